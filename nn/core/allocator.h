// Caching allocator, one per device. Blocks are rounded to size classes and, when freed, kept
// in per-class free lists for reuse: a training step allocates the same sizes every iteration,
// so after the first step it costs neither cudaMalloc/cudaFree (which synchronize the device)
// nor page faults on the CPU. On CUDA every op runs on the device's single stream, so a block
// freed by the host can be handed out again immediately: stream order protects it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "nn/core/device.h"

namespace tg {

struct AllocatorStats {
  size_t in_use_bytes = 0;  // handed out and not yet freed
  size_t cached_bytes = 0;  // held in free lists
  size_t peak_in_use_bytes = 0;
  uint64_t raw_allocs = 0;  // calls to the underlying malloc (cudaMalloc, aligned_alloc)
  uint64_t cache_hits = 0;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(Device device) : device_(device) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns at least `bytes` bytes, 64-byte aligned (CPU) / 256-byte aligned (CUDA).
  // A zero-byte request returns nullptr. On out-of-memory the cache is emptied and the
  // allocation retried once; then tg::Error names the device and size.
  void* allocate(size_t bytes);
  void deallocate(void* p);
  void empty_cache();
  AllocatorStats stats() const;
  Device device() const { return device_; }

  // The size class `bytes` is rounded to (exposed for tests).
  static size_t round_size(size_t bytes);

 private:
  void* raw_alloc(size_t bytes);
  void raw_free(void* p);
  void empty_cache_locked();

  Device device_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;               // pointer -> size class
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> blocks
  AllocatorStats stats_;
};

// The process-wide allocator of a device (created on first use; never destroyed before exit).
CachingAllocator& allocator_for(const Device& d);

}  // namespace tg
