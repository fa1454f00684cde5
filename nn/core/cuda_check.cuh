// Helpers for .cu files: checked CUDA/cuBLAS calls, launch checks, the current stream and
// grid sizing. Include only from .cu files (and cuda_runtime.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "nn/core/error.h"

namespace tg::cuda {

cudaStream_t current_stream();   // the stream of the current device
cublasHandle_t cublas_handle();  // bound to current_stream()

// Grid for a grid-stride loop over n items: enough blocks to fill the GPU, never more than n needs.
inline unsigned grid_for(int64_t n, int threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  return static_cast<unsigned>(blocks);
}

const char* cublas_status_name(cublasStatus_t s);

}  // namespace tg::cuda

#define TG_CUDA_CHECK(expr)                                                                       \
  do {                                                                                            \
    cudaError_t tg_err_ = (expr);                                                                 \
    if (tg_err_ != cudaSuccess) {                                                                 \
      TG_THROW(#expr, " failed: ", cudaGetErrorName(tg_err_), ": ", cudaGetErrorString(tg_err_)); \
    }                                                                                             \
  } while (0)

#define TG_CUBLAS_CHECK(expr)                                               \
  do {                                                                      \
    cublasStatus_t tg_st_ = (expr);                                         \
    if (tg_st_ != CUBLAS_STATUS_SUCCESS) {                                  \
      TG_THROW(#expr, " failed: ", ::tg::cuda::cublas_status_name(tg_st_)); \
    }                                                                       \
  } while (0)

// After every kernel launch: catches bad launch configurations immediately.
#define TG_CUDA_LAUNCH_CHECK() TG_CUDA_CHECK(cudaGetLastError())
