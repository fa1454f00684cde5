// Caching allocator, one per device. Blocks are rounded to size classes and, when freed, kept
// in per-class free lists for reuse: a training step allocates the same sizes every iteration,
// so after the first step it costs neither cudaMalloc/cudaFree (which synchronize the device)
// nor page faults on the CPU. On CUDA a block belongs to the stream it was allocated on (the
// calling thread's stream, cuda_runtime.h): freed, it goes back to that stream's free lists and
// is handed out again only to allocations on the same stream, immediately, because stream order
// protects it. A block used on another stream too must be freed only after that stream's work
// on it is ordered before the owner's (an Event), as the data-parallel reducer does with the
// gradients its side stream reads (comm/reducer.h); PyTorch's allocator has the same rule.
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
  // Starts a new peak: peak_in_use_bytes = in_use_bytes now (to measure what one pass holds at
  // most, train/memory_plan.h).
  void reset_peak();
  Device device() const { return device_; }

  // The size class `bytes` is rounded to (exposed for tests).
  static size_t round_size(size_t bytes);

 private:
  void* raw_alloc(size_t bytes);
  void raw_free(void* p);
  void empty_cache_locked();

  struct Live {
    size_t cls;    // size class
    void* stream;  // the owner stream (nullptr on the CPU)
  };
  struct Pool {
    void* stream;
    std::unordered_map<size_t, std::vector<void*>> free;  // size class -> blocks
  };
  Pool& pool(void* stream);  // with mu_ held

  Device device_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Live> live_;
  std::vector<Pool> pools_;  // one per stream seen (two at most: main and side)
  AllocatorStats stats_;
};

// The process-wide allocator of a device (created on first use; never destroyed before exit).
CachingAllocator& allocator_for(const Device& d);

}  // namespace tg
