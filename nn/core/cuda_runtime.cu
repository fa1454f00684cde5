// The CUDA runtime wrapper: device discovery (errors mean zero devices), a main and a side stream
// per device with a cuBLAS handle each, the thread's choice between them, events, raw
// allocation and copies.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "nn/core/cuda_check.cuh"
#include "nn/core/cuda_libs.h"
#include "nn/core/cuda_runtime.h"

namespace tg::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::once_flag side_once;
  std::atomic<cudaStream_t> side{nullptr};  // read without the once_flag by synchronize_all
  cublasHandle_t side_cublas = nullptr;
  std::once_flag copy_once;
  cudaStream_t copy = nullptr;
};

// The device whose side stream this thread is on (SideStreamScope), or -1.
thread_local int t_side_device = -1;

cublasHandle_t make_cublas(cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  TG_CUBLAS_CHECK(cublas_api().create(&h));
  TG_CUBLAS_CHECK(cublas_api().set_stream(h, stream));
  // Plain FP32 math: parity tests compare against the CPU with FP32 tolerances.
  TG_CUBLAS_CHECK(cublas_api().set_math_mode(h, CUBLAS_DEFAULT_MATH));
  return h;
}

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
    s.cublas = make_cublas(s.stream);
  });
  return s;
}

DeviceState& side_state(int device) {
  DeviceState& s = state(device);
  std::call_once(s.side_once, [&] {
    DeviceGuard g(device);
    int least = 0, greatest = 0;  // numerically lower is a higher priority
    TG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t side = nullptr;
    TG_CUDA_CHECK(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, greatest));
    s.side_cublas = make_cublas(side);
    s.side.store(side);
  });
  return s;
}

// This thread's stream of `device`.
cudaStream_t thread_stream(int device) {
  if (t_side_device == device) return side_state(device).side.load();
  return state(device).stream;
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
  return thread_stream(device);
}
cudaStream_t current_stream() {
  return thread_stream(current_device());
}
cublasHandle_t cublas_handle() {
  const int d = current_device();
  if (t_side_device == d) return side_state(d).side_cublas;
  return state(d).cublas;
}

void synchronize(int device) {
  TG_CUDA_CHECK(cudaStreamSynchronize(thread_stream(device)));
}

void synchronize_all(int device) {
  DeviceState& s = state(device);
  TG_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  if (const cudaStream_t side = s.side.load()) TG_CUDA_CHECK(cudaStreamSynchronize(side));
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
  const cudaStream_t s = thread_stream(device);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
}

void copy_d2h(int device, void* dst, const void* src, size_t bytes) {
  const cudaStream_t s = thread_stream(device);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
}

void copy_d2d(int device, void* dst, const void* src, size_t bytes) {
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, thread_stream(device)));
}

void copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes) {
  // Order after the source's pending work, then copy; synchronous for simplicity.
  synchronize(src_device);
  TG_CUDA_CHECK(
      cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, thread_stream(dst_device)));
  synchronize(dst_device);
}

void memset_async(int device, void* p, int value, size_t bytes) {
  TG_CUDA_CHECK(cudaMemsetAsync(p, value, bytes, thread_stream(device)));
}

void* copy_stream(int device) {
  DeviceState& s = state(device);
  std::call_once(s.copy_once, [&] {
    DeviceGuard g(device);
    TG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
  });
  return s.copy;
}

void copy_h2d_async(int device, void* dst, const void* src, size_t bytes, void* stream) {
  DeviceGuard g(device);
  TG_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
}

namespace {

struct PinnedPool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;  // by exact size
};

PinnedPool& pinned_pool() {
  static PinnedPool* p = new PinnedPool;  // never destroyed: blocks may be released at exit
  return *p;
}

}  // namespace

std::shared_ptr<void> pinned_host(size_t bytes) {
  if (bytes == 0) bytes = 1;
  PinnedPool& pool = pinned_pool();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    auto it = pool.free.find(bytes);
    if (it != pool.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    }
  }
  if (p == nullptr) {
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      TG_THROW("cudaHostAlloc of ", bytes,
               " bytes of page-locked memory failed: ", cudaGetErrorName(err), ": ",
               cudaGetErrorString(err));
    }
  }
  return std::shared_ptr<void>(p, [bytes](void* q) {
    PinnedPool& pl = pinned_pool();
    std::lock_guard<std::mutex> lock(pl.mu);
    pl.free[bytes].push_back(q);
  });
}

SideStreamScope::SideStreamScope(int device) : previous_(t_side_device) {
  side_state(device);  // create it here, where an error can still be reported
  t_side_device = device;
}

SideStreamScope::~SideStreamScope() {
  t_side_device = previous_;
}

Event::Event(int device) : device_(device) {
  DeviceGuard g(device);
  cudaEvent_t e = nullptr;
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Event::Event(Event&& other) noexcept : device_(other.device_), event_(other.event_) {
  other.event_ = nullptr;
}

void Event::record() {
  DeviceGuard g(device_);
  TG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), thread_stream(device_)));
}

void Event::wait() {
  DeviceGuard g(device_);
  TG_CUDA_CHECK(cudaStreamWaitEvent(thread_stream(device_), static_cast<cudaEvent_t>(event_), 0));
}

void Event::record_on(void* stream) {
  DeviceGuard g(device_);
  TG_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)));
}

void Event::wait_on(void* stream) {
  DeviceGuard g(device_);
  TG_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event_), 0));
}

void Event::synchronize() {
  TG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
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
