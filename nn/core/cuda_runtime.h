// Host-side view of the CUDA runtime, usable from plain C++ in every build. In a build without
// CUDA (TG_CUDA == 0) device_count() is 0 and everything else throws a clear error.
//
// Zero GPUs is a normal state: device_count() turns the runtime's "no driver" / "no device"
// errors into 0 and never throws; CPU code never calls anything else here.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace tg::cuda {

int device_count();
// Why device_count() is 0 ("built without CUDA", "cudaErrorNoDevice: ..."), or "" if it is not.
std::string unavailable_reason();
// The device's name ("NVIDIA H100 80GB HBM3"); throws if `device` does not exist.
std::string device_name(int device);

// Every device has a main stream; every kernel, copy and cuBLAS call of the library runs on it,
// so freeing a block into the caching allocator and reusing it is ordered by the stream. A
// thread may switch to the device's side stream instead (SideStreamScope, below): then
// everything that thread does on that device, the allocator's pools included, is on the side
// stream, ordered against the main stream only by Events.
void* stream(int device);      // cudaStream_t of `device` for this thread: main, or side in a scope
void synchronize(int device);  // waits for this thread's stream of `device`
void synchronize_all(int device);  // waits for both streams of `device`

void* malloc_raw(int device, size_t bytes);  // throws tg::Error on OOM, naming the size
void free_raw(int device, void* p);

// Copies are ordered on the device's stream; the host-side ones return when the copy is done.
void copy_h2d(int device, void* dst, const void* src, size_t bytes);
void copy_d2h(int device, void* dst, const void* src, size_t bytes);
void copy_d2d(int device, void* dst, const void* src, size_t bytes);
void copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes);
void memset_async(int device, void* p, int value, size_t bytes);

// Input staging (datasets/device_stager.h): a third stream per device for host-to-device copies
// beside the main stream's compute, and page-locked host memory, which such a copy needs to run
// asynchronously at the link's rate (a copy from pageable memory goes through a driver bounce
// buffer and, on most systems, waits for it).
void* copy_stream(int device);  // created on first use
// cudaMemcpyAsync host -> device on `stream` (a cudaStream_t); returns without waiting.
void copy_h2d_async(int device, void* dst, const void* src, size_t bytes, void* stream);
// `bytes` of page-locked host memory, from a per-process pool: released, the block goes back to
// the pool for the next request of the same size (a training run asks for the same batch sizes
// every step, so cudaHostAlloc runs only in the first steps). Shared, so a batch tensor can keep
// its block alive (Tensor::from_owner).
std::shared_ptr<void> pinned_host(size_t bytes);

// While alive, this thread's work on `device` runs on the device's side stream (created on first
// use, at the highest priority the device offers, so that communication is not starved by the
// main stream's compute). The data-parallel reducer's communication thread holds one
// (comm/reducer.h). Scopes nest; other threads and other devices are unaffected.
class SideStreamScope {
 public:
  explicit SideStreamScope(int device);
  ~SideStreamScope();
  SideStreamScope(const SideStreamScope&) = delete;
  SideStreamScope& operator=(const SideStreamScope&) = delete;

 private:
  int previous_ = -1;
};

// A CUDA event without timing, to order work across the two streams of `device`: record()
// marks the current end of this thread's stream; wait() makes this thread's stream wait until
// the work before the last record() has run (without blocking the host). A wait() before any
// record() waits for nothing.
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record();
  void wait();
  // The same on a given stream (a cudaStream_t, e.g. copy_stream()), and a host wait.
  void record_on(void* stream);
  void wait_on(void* stream);
  void synchronize();

 private:
  int device_;
  void* event_ = nullptr;  // cudaEvent_t
};

// Makes `device` current for the lifetime of the guard (kernels launch on the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace tg::cuda
