// DeviceStager on a GPU: each step's device batches hold exactly the pipeline's bytes, whether the
// step was staged a step ahead or asked for out of order, while the next step's copy is in
// flight; the pinned blocks are reused. Skips without a GPU.
#include "datasets/device_stager.h"

#include <gtest/gtest.h>

#include <cstring>

#include "nn/core/cuda_runtime.h"
#include "tests/testing/op_harness.h"

namespace tg::data {
namespace {

// Example i of step key k: pixels that differ per example and per position in the stream.
class Counting final : public Dataset {
 public:
  Counting() {
    info_.name = "counting";
    info_.size = 1000;
    info_.channels = 3;
    info_.height = info_.width = 32;
    info_.num_classes = 7;
  }
  void load(std::span<const int64_t> indices, bool, uint64_t, uint64_t key_base, float* images,
            int32_t* labels) const override {
    const int64_t px = 3 * 32 * 32;
    for (size_t i = 0; i < indices.size(); ++i) {
      for (int64_t j = 0; j < px; ++j)
        images[i * px + j] = static_cast<float>(indices[i] * 7 + j) + 0.25f * (key_base + i);
      labels[i] = static_cast<int32_t>((indices[i] + key_base) % 7);
    }
  }
};

BatchPipeline::Plan two_workers(int64_t batch) {
  return [batch](int64_t step) {
    std::vector<BatchRequest> r(2);
    for (int w = 0; w < 2; ++w) {
      for (int64_t i = 0; i < batch; ++i)
        r[w].indices.push_back((step * 2 * batch + w * batch + i) % 1000);
      r[w].key_base = static_cast<uint64_t>(step * 2 * batch + w * batch);
    }
    return r;
  };
}

bool same(const Tensor& device_t, const Tensor& host) {
  const Tensor back = device_t.to(Device::cpu());
  return back.nbytes() == host.nbytes() &&
         std::memcmp(back.raw_data(), host.raw_data(), host.nbytes()) == 0;
}

TEST(DeviceStagerCuda, EveryStepHoldsThePipelinesBytes) {
  TG_REQUIRE_CUDA();
  Counting ds;
  constexpr int64_t kBatch = 64, kSteps = 9;
  BatchPipeline reference(ds, two_workers(kBatch), {1, 0, false, 3});
  PipelineOptions o{3, 2, false, 3};
  o.allocate = DeviceStager::host_allocator();
  BatchPipeline pipeline(ds, two_workers(kBatch), o);
  DeviceStager stager(pipeline, Device::cuda(0));
  // Steps in order, each prefetching the next (the trainer's pattern), then one out of order.
  for (int64_t s : {0, 1, 2, 3, 4, 5, 6, 8}) {
    SCOPED_TRACE(s);
    const std::vector<HostBatch> got = stager.get(s, kSteps);
    stager.prefetch(s + 1, kSteps);  // in flight while we read step s back
    const std::vector<HostBatch> want = reference.get(s, kSteps);
    ASSERT_EQ(got.size(), 2u);
    for (int w = 0; w < 2; ++w) {
      EXPECT_TRUE(got[w].x.device().is_cuda());
      EXPECT_TRUE(same(got[w].x, want[w].x)) << "worker " << w;
      EXPECT_TRUE(same(got[w].y, want[w].y)) << "worker " << w;
    }
  }
  const StagerStats st = stager.stats();
  EXPECT_GE(st.staged_ahead, 6);
  EXPECT_GE(st.copied_on_demand, 2);  // step 0 and the jump to 8
  EXPECT_GT(st.bytes, 0);
}

TEST(DeviceStagerCuda, PinnedBlocksAreReused) {
  TG_REQUIRE_CUDA();
  void* first = nullptr;
  {
    auto a = cuda::pinned_host(12345);
    first = a.get();
  }
  auto b = cuda::pinned_host(12345);
  EXPECT_EQ(b.get(), first);
  auto c = cuda::pinned_host(12345);  // the one block is taken: a new one
  EXPECT_NE(c.get(), first);
}

}  // namespace
}  // namespace tg::data
