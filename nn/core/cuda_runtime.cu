// The CUDA runtime wrapper: device discovery (errors mean zero devices), one stream and one
// cuBLAS handle per device, raw allocation and copies.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "nn/core/cuda_check.cuh"
#include "nn/core/cuda_runtime.h"

namespace tg::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};

std::array<DeviceState, kMaxDevices>& states() {
  static std::array<DeviceState, kMaxDevices> s;
  return s;
}

struct Discovery {
  int count = 0;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      // No driver, no device, or a driver too old: all mean "no usable GPU here".
      r.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      cudaGetLastError();  // clear the sticky error so later calls do not see it
      return r;
    }
    r.count = n < kMaxDevices ? n : kMaxDevices;
    if (n == 0) r.reason = "the CUDA runtime reports 0 devices";
    return r;
  }();
  return d;
}

DeviceState& state(int device) {
  TG_CHECK(device >= 0 && device < device_count(), "CUDA device ", device, " does not exist (",
           device_count(), " present)");
  DeviceState& s = states()[device];
  std::call_once(s.once, [&] {
    DeviceGuard g(device);
    TG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    TG_CUBLAS_CHECK(cublasCreate(&s.cublas));
    TG_CUBLAS_CHECK(cublasSetStream(s.cublas, s.stream));
    // Plain FP32 math: parity tests compare against the CPU with FP32 tolerances.
    TG_CUBLAS_CHECK(cublasSetMathMode(s.cublas, CUBLAS_DEFAULT_MATH));
  });
  return s;
}

int current_device() {
  int d = 0;
  TG_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

}  // namespace

int device_count() {
  return discovery().count;
}
std::string unavailable_reason() {
  return discovery().reason;
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  TG_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return p.name;
}

void* stream(int device) {
  return state(device).stream;
}
cudaStream_t current_stream() {
  return state(current_device()).stream;
}
cublasHandle_t cublas_handle() {
  return state(current_device()).cublas;
}

void synchronize(int device) {
  TG_CUDA_CHECK(cudaStreamSynchronize(state(device).stream));
}

void* malloc_raw(int device, size_t bytes) {
  DeviceGuard g(device);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    TG_THROW("cudaMalloc of ", bytes, " bytes on cuda:", device, " failed: ", cudaGetErrorName(err),
             ": ", cudaGetErrorString(err));
  }
  return p;
}

void free_raw(int device, void* p) {
  DeviceGuard g(device);
  TG_CUDA_CHECK(cudaFree(p));
}

void copy_h2d(int device, void* dst, const void* src, size_t bytes) {
  DeviceState& s = state(device);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.stream));
  TG_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void copy_d2h(int device, void* dst, const void* src, size_t bytes) {
  DeviceState& s = state(device);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.stream));
  TG_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void copy_d2d(int device, void* dst, const void* src, size_t bytes) {
  DeviceState& s = state(device);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream));
}

void copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes) {
  // Order after the source's pending work, then copy; synchronous for simplicity.
  synchronize(src_device);
  TG_CUDA_CHECK(
      cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, state(dst_device).stream));
  synchronize(dst_device);
}

void memset_async(int device, void* p, int value, size_t bytes) {
  TG_CUDA_CHECK(cudaMemsetAsync(p, value, bytes, state(device).stream));
}

DeviceGuard::DeviceGuard(int device) {
  TG_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) TG_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0)
    cudaSetDevice(previous_);
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_<unknown>";
  }
}

}  // namespace tg::cuda
