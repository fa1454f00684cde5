// The side stream and events (nn/core/cuda_runtime.h) and the caching allocator's per-stream
// pools (nn/core/allocator.h). Without a GPU: the CPU-only build's clear errors; with one: a
// thread's scope switches only its own stream, a block freed on one stream is never handed to
// the other, and an event orders a read on the side stream after a write on the main one.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "nn/core/allocator.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

TEST(SideStream, WithoutCudaIsAClearError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(cuda::SideStreamScope(0), Error);
  EXPECT_THROW(cuda::Event(0), Error);
}

TEST(SideStream, ScopeSwitchesThisThreadOnly) {
  TG_REQUIRE_CUDA();
  void* const main = cuda::stream(0);
  void* side = nullptr;
  void* other_thread = nullptr;
  {
    cuda::SideStreamScope scope(0);
    side = cuda::stream(0);
    std::thread t([&] { other_thread = cuda::stream(0); });
    t.join();
    {
      cuda::SideStreamScope nested(0);
      EXPECT_EQ(cuda::stream(0), side);
    }
    EXPECT_EQ(cuda::stream(0), side);  // the nested scope restored the outer one
  }
  EXPECT_NE(side, main);
  EXPECT_EQ(other_thread, main);
  EXPECT_EQ(cuda::stream(0), main);
}

TEST(SideStream, AllocatorKeepsEachStreamsBlocks) {
  TG_REQUIRE_CUDA();
  CachingAllocator a(Device::cuda(0));
  void* m = a.allocate(3000);
  a.deallocate(m);
  void* s = nullptr;
  {
    cuda::SideStreamScope scope(0);
    s = a.allocate(3000);  // the same size class, but the main stream's block is not reused
    EXPECT_NE(s, m);
    a.deallocate(s);
    EXPECT_EQ(a.allocate(2900), s);  // the side stream's own block is
  }
  EXPECT_EQ(a.allocate(3000), m);
  // The block allocated on the side stream, freed from the main thread, still goes back to the
  // side stream's pool.
  a.deallocate(s);
  void* fresh = a.allocate(3000);
  EXPECT_NE(fresh, s);
  const AllocatorStats st = a.stats();
  EXPECT_EQ(st.raw_allocs, 3u);
  EXPECT_EQ(st.cache_hits, 2u);
  a.deallocate(m);
  a.deallocate(fresh);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

// A large write on the main stream, then a read of its last bytes on the side stream: with the
// event, the read sees the write (without it the side stream starts at once and would most
// likely read the old bytes).
TEST(SideStream, EventOrdersTheSideStreamAfterTheMainStream) {
  TG_REQUIRE_CUDA();
  const int64_t n = int64_t{256} << 20;  // 256 MiB: the memset takes a while
  Tensor buf = Tensor::zeros({n}, DType::u8, Device::cuda(0));
  cuda::synchronize(0);
  for (int value : {7, 9}) {
    cuda::memset_async(0, buf.data<uint8_t>(), value, static_cast<size_t>(n));
    cuda::Event written(0);
    written.record();
    uint8_t tail[16] = {};
    {
      cuda::SideStreamScope scope(0);
      written.wait();
      cuda::copy_d2h(0, tail, buf.data<uint8_t>() + n - 16, sizeof(tail));
    }
    for (uint8_t b : tail) ASSERT_EQ(b, value);
  }
  cuda::synchronize_all(0);
}

}  // namespace
}  // namespace tg
