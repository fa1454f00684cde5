// CPU-only build: no CUDA device exists; any attempt to use one is an error, never a fallback.
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"

namespace tg::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  TG_THROW(what, ": terngrad was built without CUDA (configure with -DTG_ENABLE_CUDA=ON)");
}
}  // namespace

int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return "built without CUDA";
}
std::string device_name(int) {
  no_cuda("cuda::device_name");
}
void* stream(int) {
  no_cuda("cuda::stream");
}
void synchronize(int) {
  no_cuda("cuda::synchronize");
}
void synchronize_all(int) {
  no_cuda("cuda::synchronize_all");
}
void* malloc_raw(int, size_t) {
  no_cuda("cuda::malloc_raw");
}
void free_raw(int, void*) {
  no_cuda("cuda::free_raw");
}
void copy_h2d(int, void*, const void*, size_t) {
  no_cuda("cuda::copy_h2d");
}
void copy_d2h(int, void*, const void*, size_t) {
  no_cuda("cuda::copy_d2h");
}
void copy_d2d(int, void*, const void*, size_t) {
  no_cuda("cuda::copy_d2d");
}
void copy_peer(int, void*, int, const void*, size_t) {
  no_cuda("cuda::copy_peer");
}
void memset_async(int, void*, int, size_t) {
  no_cuda("cuda::memset_async");
}
DeviceGuard::DeviceGuard(int) {
  no_cuda("cuda::DeviceGuard");
}
DeviceGuard::~DeviceGuard() = default;
SideStreamScope::SideStreamScope(int) {
  no_cuda("cuda::SideStreamScope");
}
SideStreamScope::~SideStreamScope() = default;
Event::Event(int device) : device_(device) {
  no_cuda("cuda::Event");
}
Event::~Event() = default;
Event::Event(Event&& other) noexcept : device_(other.device_) {}
void Event::record() {
  no_cuda("cuda::Event::record");
}
void Event::wait() {
  no_cuda("cuda::Event::wait");
}
void Event::record_on(void*) {
  no_cuda("cuda::Event::record_on");
}
void Event::wait_on(void*) {
  no_cuda("cuda::Event::wait_on");
}
void Event::synchronize() {
  no_cuda("cuda::Event::synchronize");
}
void* copy_stream(int) {
  no_cuda("cuda::copy_stream");
}
void copy_h2d_async(int, void*, const void*, size_t, void*) {
  no_cuda("cuda::copy_h2d_async");
}
std::shared_ptr<void> pinned_host(size_t) {
  no_cuda("cuda::pinned_host");
}

}  // namespace tg::cuda
