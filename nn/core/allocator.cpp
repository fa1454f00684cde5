#include "nn/core/allocator.h"

#include <cstdlib>
#include <memory>

#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"

namespace tg {

size_t CachingAllocator::round_size(size_t bytes) {
  // Small blocks: multiples of 512 B. Large: multiples of 1 MiB (waste < 1 MiB, and the few
  // large sizes of a network each get their own class).
  constexpr size_t kSmall = 512, kLarge = 1 << 20;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

CachingAllocator::~CachingAllocator() {
  // Process teardown: the CUDA context may already be gone, so only CPU blocks are returned.
  if (device_.is_cpu()) {
    std::lock_guard<std::mutex> lock(mu_);
    empty_cache_locked();
  }
}

void* CachingAllocator::raw_alloc(size_t bytes) {
  if (device_.is_cpu()) {
    void* p = std::aligned_alloc(64, bytes);
    TG_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  return cuda::malloc_raw(device_.index, bytes);
}

void CachingAllocator::raw_free(void* p) {
  if (device_.is_cpu()) {
    std::free(p);
  } else {
    cuda::free_raw(device_.index, p);
  }
}

CachingAllocator::Pool& CachingAllocator::pool(void* stream) {
  for (Pool& p : pools_)
    if (p.stream == stream) return p;
  pools_.push_back(Pool{stream, {}});
  return pools_.back();
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = round_size(bytes);
  void* const stream = device_.is_cuda() ? cuda::stream(device_.index) : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto& free = pool(stream).free;
  auto it = free.find(cls);
  if (it != free.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= cls;
    ++stats_.cache_hits;
  } else {
    try {
      p = raw_alloc(cls);
    } catch (const Error&) {
      empty_cache_locked();
      p = raw_alloc(cls);  // throws again, with the size, if it still does not fit
    }
    ++stats_.raw_allocs;
  }
  live_.emplace(p, Live{cls, stream});
  stats_.in_use_bytes += cls;
  if (stats_.in_use_bytes > stats_.peak_in_use_bytes)
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  TG_CHECK(it != live_.end(), "deallocate of a pointer this ", device_.str(),
           " allocator did not hand out");
  const Live l = it->second;
  live_.erase(it);
  stats_.in_use_bytes -= l.cls;
  stats_.cached_bytes += l.cls;
  pool(l.stream).free[l.cls].push_back(p);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  if (device_.is_cuda())
    cuda::synchronize_all(device_.index);  // blocks may still be in use by their streams
  for (Pool& pl : pools_) {
    for (auto& [cls, blocks] : pl.free) {
      for (void* p : blocks) raw_free(p);
    }
    pl.free.clear();
  }
  stats_.cached_bytes = 0;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

CachingAllocator& allocator_for(const Device& d) {
  static CachingAllocator cpu(Device::cpu());
  if (d.is_cpu()) return cpu;
  check_device_usable(d);
  // Leaked on purpose: CUDA allocators must not run their destructors after the runtime is gone.
  static std::vector<CachingAllocator*> cuda_allocs = [] {
    std::vector<CachingAllocator*> v;
    for (int i = 0; i < cuda::device_count(); ++i)
      v.push_back(new CachingAllocator(Device::cuda(i)));
    return v;
  }();
  return *cuda_allocs[d.index];
}

}  // namespace tg
