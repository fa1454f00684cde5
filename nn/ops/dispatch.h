// The one explicit device dispatch of an op frontend: runs the CPU or the CUDA kernel call.
// CUDA in a build without CUDA throws; it never falls back to the CPU (hidden fallbacks ruin
// benchmarks). The CUDA branch makes the tensor's device current for the kernel launch.
#pragma once

#include "nn/core/cuda_runtime.h"
#include "nn/core/device.h"
#include "nn/core/error.h"

#if TG_CUDA
#define TG_DISPATCH_CUDA_(dev, opname, ...)         \
  do {                                              \
    ::tg::cuda::DeviceGuard tg_guard_((dev).index); \
    __VA_ARGS__;                                    \
  } while (0)
#else
#define TG_DISPATCH_CUDA_(dev, opname, ...) \
  TG_THROW(opname, " on ", (dev).str(), ": terngrad was built without CUDA")
#endif

// TG_DISPATCH(device, "conv2d", conv2d_forward_cpu(...), conv2d_forward_cuda(...));
#define TG_DISPATCH(device, opname, cpu_call, ...)       \
  do {                                                   \
    const ::tg::Device tg_dev_ = (device);               \
    switch (tg_dev_.type) {                              \
      case ::tg::DeviceType::cpu: {                      \
        cpu_call;                                        \
        break;                                           \
      }                                                  \
      case ::tg::DeviceType::cuda: {                     \
        TG_DISPATCH_CUDA_(tg_dev_, opname, __VA_ARGS__); \
        break;                                           \
      }                                                  \
    }                                                    \
  } while (0)
