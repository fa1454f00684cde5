// device_info: what this machine's CUDA stack is, as terngrad sees it, as JSON lines on stdout.
//
//   {"kind":"cuda_stack","device_count":N,"unavailable_reason":"...","driver":13000,
//    "runtime":13000,"cublas":130100,"curand":10400,"nccl":22701}
//   {"kind":"cuda_device","index":0,"name":"NVIDIA H200","cc":"9.0","sms":132,...}
//
// Versions are the libraries actually loaded (cudaRuntimeGetVersion, cublasGetProperty,
// curandGetVersion, ncclGetVersion), so a GPU machine that resolved them from a toolkit or from
// PyTorch's pip packages shows which it got. Device rows carry the properties our code reads
// (name, UUID and PCI bus id for NCCL's one-GPU-per-rank check) and the ones that size kernels.
// Zero devices is a normal answer: the stack line says why, and the exit status is 0; 1 only on
// an error reading a device that the runtime said exists.
#include <cstdio>
#include <string>

#include "bench/harness.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"

#if TG_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>
#include <nccl.h>
#endif

namespace tg::bench {
namespace {

#if TG_CUDA
std::string hex_uuid(const cudaUUID_t& u) {
  std::string s;
  char b[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(u.bytes[i]));
    s += b;
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}
#endif

int run() {
  JsonLine stack;
  const int n = cuda::device_count();
  stack.add("kind", "cuda_stack").add("built_with_cuda", TG_CUDA).add("device_count", n);
  stack.add("unavailable_reason", cuda::unavailable_reason());
#if TG_CUDA
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is loaded
  cudaRuntimeGetVersion(&runtime);
  stack.add("driver", driver).add("runtime", runtime);
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  stack.add("cublas",
            std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch));
  int curand = 0;
  curandGetVersion(&curand);
  stack.add("curand", curand);
  int nccl = 0;
  ncclGetVersion(&nccl);
  stack.add("nccl", nccl);
#endif
  stack.print();
#if TG_CUDA
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    const cudaError_t err = cudaGetDeviceProperties(&p, d);
    TG_CHECK(err == cudaSuccess, "cudaGetDeviceProperties(", d, "): ", cudaGetErrorName(err));
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, d);
    size_t free_b = 0, total_b = 0;
    {
      cuda::DeviceGuard g(d);
      cudaMemGetInfo(&free_b, &total_b);
    }
    JsonLine l;
    l.add("kind", "cuda_device").add("index", d).add("name", p.name);
    l.add("cc", std::to_string(p.major) + "." + std::to_string(p.minor));
    l.add("sms", p.multiProcessorCount).add("total_mem_mib", static_cast<long long>(total_b >> 20));
    l.add("free_mem_mib", static_cast<long long>(free_b >> 20));
    l.add("l2_kib", p.l2CacheSize / 1024)
        .add("smem_per_block_kib", static_cast<int>(p.sharedMemPerBlock / 1024));
    l.add("smem_per_block_optin_kib", static_cast<int>(p.sharedMemPerBlockOptin / 1024));
    l.add("max_threads_per_block", p.maxThreadsPerBlock);
    l.add("max_threads_per_sm", p.maxThreadsPerMultiProcessor).add("warp", p.warpSize);
    l.add("mem_bus_bits", p.memoryBusWidth);
    l.add("uuid", hex_uuid(p.uuid)).add("pci_bus_id", bus);
    l.add("ecc", p.ECCEnabled).add("integrated", p.integrated);
    l.print();
  }
#endif
  return 0;
}

}  // namespace
}  // namespace tg::bench

int main() {
  try {
    return tg::bench::run();
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "device_info: %s\n", e.what());
    return 1;
  }
}
