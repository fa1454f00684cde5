// The generic bucketed reducer (comm/reducer.h) with a hook of the test's own, knowing nothing of
// compression: the bucket layout (reverse slot order, caps, the small first bucket, an oversized
// slot alone); every bucket handed to the hook once per step, in bucket order, with the step,
// its slots and the local gradients; slots marked ready in any order, one never marked; overlap
// running the hook on the communication thread before finish() while backward still runs, and
// off (everything in finish(), on the caller's thread); P = 1..3 local ranks and the group of one;
// a hook's error and a peer that never joins surfacing from finish(). The compressors' hook is
// tested in tests/terngrad/comm_hook_test.cpp.
#include "comm/reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "nn/core/error.h"
#include "tests/comm/rank_threads.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

int64_t total_of(const std::vector<GradSlot>& layout) {
  return layout.back().offset + layout.back().numel;
}

TEST(MakeBuckets, ReverseOrderCapsAndAFirstSmallBucket) {
  // f32 bytes: 40, 400, 4, 4000, 40, 40.
  const auto layout = layout_of({10, 100, 1, 1000, 10, 10});
  // First bucket: slots 5, 4 (80 B, under the first cap of 100 B) go with slot 3 (4000 B) instead
  // of travelling alone, and the bucket closes (over the cap); then slots 2, 1 (404 B), closed
  // after slot 1 because it is large (>= the first cap), so its exchange does not wait for slot
  // 0; then slot 0.
  const auto b = make_buckets(layout, 500, 100);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (SlotRange{3, 6}));
  EXPECT_EQ(b[1], (SlotRange{1, 3}));
  EXPECT_EQ(b[2], (SlotRange{0, 1}));
  // f32 bytes: 40, 4000, then eight slots of 80. The first bucket closes at 160 B (>= 100); the
  // next holds six slots (480 B: it has reached the first cap) and closes before the 4000 B slot
  // that would take it past 500 B, which goes alone; then the 40 B.
  const auto full = make_buckets(layout_of({10, 1000, 20, 20, 20, 20, 20, 20, 20, 20}), 500, 100);
  ASSERT_EQ(full.size(), 4u);
  EXPECT_EQ(full[0], (SlotRange{8, 10}));
  EXPECT_EQ(full[1], (SlotRange{2, 8}));
  EXPECT_EQ(full[2], (SlotRange{1, 2}));
  EXPECT_EQ(full[3], (SlotRange{0, 1}));
  // One large bucket holds everything; the first-bucket cap never exceeds the bucket cap.
  EXPECT_EQ(make_buckets(layout, 1 << 20, 1 << 20), (std::vector<SlotRange>{{0, 6}}));
  const auto tiny = make_buckets(layout, 1, 1 << 20);
  ASSERT_EQ(tiny.size(), 6u);  // every slot alone, last slot first
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(tiny[i], (SlotRange{5 - i, 6 - i}));
  EXPECT_THROW(make_buckets(layout, 0, 1), Error);
}

TEST(ReducerOptions, BucketBytesFromMegabytes) {
  ReducerOptions o;
  EXPECT_EQ(o.bucket_bytes(), int64_t{25} << 20);  // PyTorch DDP's bucket_cap_mb
  o.bucket_mb = 0.5;
  EXPECT_EQ(o.bucket_bytes(), int64_t{1} << 19);
  o.bucket_mb = 1e-9;
  EXPECT_EQ(o.bucket_bytes(), 1);  // at least one byte: every slot a bucket of its own
}

// A hook that averages a bucket exactly: every rank's W local gradients summed in order into
// one f32 vector, summed over ranks by the communicator (rank order: the same bits everywhere),
// scaled by 1 / N. It records what it was handed.
class AverageHook final : public CommHook {
 public:
  struct Call {
    int64_t step;
    size_t index, count;
    SlotRange slots;
    size_t workers;
    std::thread::id thread;
  };

  AverageHook(const std::vector<GradSlot>& layout, int ranks) : layout_(layout), ranks_(ranks) {}

  void run(Communicator& comm, const GradBucket& b) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(
          {b.step, b.index, b.count, b.slots, b.local_grads.size(), std::this_thread::get_id()});
    }
    cv_.notify_all();
    if (fail_at_ == static_cast<int64_t>(b.index)) TG_THROW("hook failed on bucket ", b.index);
    const int64_t begin = layout_[b.slots.first].offset;
    const int64_t end = layout_[b.slots.last - 1].offset + layout_[b.slots.last - 1].numel;
    std::vector<float> sum(static_cast<size_t>(end - begin), 0.0f);
    for (const Tensor& g : b.local_grads)
      for (int64_t i = begin; i < end; ++i) sum[i - begin] += g.data<float>()[i];
    comm.allreduce(sum.data(), end - begin, DType::f32, ReduceOp::sum);
    const float inv = 1.0f / static_cast<float>(ranks_ * b.local_grads.size());
    Tensor out = b.out;
    for (int64_t i = begin; i < end; ++i) out.data<float>()[i] = sum[i - begin] * inv;
  }

  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }
  // Waits until at least n calls were made (false after a generous timeout).
  bool wait_for_calls(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 20s, [&] { return calls_.size() >= n; });
  }
  void fail_at(int64_t bucket) { fail_at_ = bucket; }

 private:
  std::vector<GradSlot> layout_;
  int ranks_;
  int64_t fail_at_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_;
};

const std::vector<int64_t> kSizes = {301, 5, 1203, 13, 250, 7, 64};

// Worker g's gradient at `step`: distinct values, exact in f32 sums of a few workers.
Tensor worker_grad(int64_t total, int64_t g, int64_t step) {
  std::vector<float> v(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) v[i] = static_cast<float>((i * 7 + g * 13 + step * 5) % 64);
  return Tensor::from_vector(v, {total});
}

// One rank's two steps, slots marked ready in a shuffled order (one never), out checked against
// the average and the hook's calls against the buckets.
void run_rank(Communicator& comm, int w, bool overlap, const std::string& what) {
  const auto layout = layout_of(kSizes);
  const int64_t total = total_of(layout);
  const int p = comm.size(), rank = comm.rank();
  AverageHook hook(layout, p);
  Reducer reducer(layout, comm, hook, small_buckets(overlap));
  const std::vector<SlotRange>& buckets = reducer.buckets();
  ASSERT_GE(buckets.size(), 4u) << what;
  EXPECT_EQ(reducer.overlapped(), overlap) << what;
  for (int64_t step = 0; step < 2; ++step) {
    hook.clear();
    std::vector<Tensor> grads;
    for (int k = 0; k < w; ++k) grads.push_back(worker_grad(total, rank * w + k, step));
    Tensor out = Tensor::full({total}, 777.0);
    reducer.begin(step, grads, out);
    std::vector<size_t> order(kSizes.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 gen(static_cast<unsigned>(31 * rank + step));
    std::shuffle(order.begin(), order.end(), gen);
    order.pop_back();  // one slot never marked: finish() must still hand its bucket over
    for (size_t t : order) reducer.mark_ready(t);
    const ReduceStats st = reducer.finish();
    const std::string at = what + " rank " + std::to_string(rank) + " step " + std::to_string(step);
    EXPECT_EQ(st.buckets, static_cast<int64_t>(buckets.size())) << at;
    EXPECT_GE(st.wait_s, 0.0) << at;
    EXPECT_GE(st.busy_s, 0.0) << at;
    // Every bucket once, in bucket order, with this step, its slots and the W gradients.
    const auto calls = hook.calls();
    ASSERT_EQ(calls.size(), buckets.size()) << at;
    for (size_t b = 0; b < calls.size(); ++b) {
      EXPECT_EQ(calls[b].step, step) << at;
      EXPECT_EQ(calls[b].index, b) << at;
      EXPECT_EQ(calls[b].count, buckets.size()) << at;
      EXPECT_EQ(calls[b].slots, buckets[b]) << at;
      EXPECT_EQ(calls[b].workers, static_cast<size_t>(w)) << at;
      // Overlapped: on the communication thread; otherwise in finish(), on this one.
      EXPECT_EQ(calls[b].thread == std::this_thread::get_id(), !overlap) << at;
    }
    // The average of all P * W workers, everywhere (the hook wrote every slot).
    const std::vector<float> got = out.to_vector<float>();
    for (int64_t i = 0; i < total; ++i) {
      float sum = 0;
      for (int g = 0; g < p * w; ++g) sum += worker_grad(total, g, step).data<float>()[i];
      ASSERT_EQ(got[i], sum * (1.0f / static_cast<float>(p * w))) << at << " element " << i;
    }
  }
}

TEST(Reducer, EveryBucketToTheHookInOrderForAnyReadyOrder) {
  for (int p : {1, 2, 3})
    for (int w : {1, 2})
      for (bool overlap : {true, false}) {
        const std::string what = "P=" + std::to_string(p) + " W=" + std::to_string(w) +
                                 (overlap ? " overlap" : " in finish");
        auto comms = make_local_group(p, 20s);
        const auto errors = run_ranks(p, [&](int r) { run_rank(*comms[r], w, overlap, what); });
        for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
      }
  // The group of one (workers emulated in one process).
  auto self = make_self_communicator(Device::cpu());
  run_rank(*self, 3, false, "group of one");
}

// With overlap, a bucket goes to the hook as soon as its slots are ready and every bucket before
// it has gone: the first bucket is exchanged while the other slots are still "in backward".
TEST(Reducer, OverlapHandsABucketOverBeforeBackwardEnds) {
  const auto layout = layout_of(kSizes);
  auto self = make_self_communicator(Device::cpu());
  AverageHook hook(layout, 1);
  Reducer reducer(layout, *self, hook, small_buckets(true));
  ASSERT_TRUE(reducer.overlapped());
  const std::vector<SlotRange>& buckets = reducer.buckets();
  const std::vector<Tensor> grads = {worker_grad(total_of(layout), 0, 0)};
  Tensor out = Tensor::empty({total_of(layout)});
  reducer.begin(0, grads, out);
  for (size_t t = buckets[0].first; t < buckets[0].last; ++t) reducer.mark_ready(t);
  EXPECT_TRUE(hook.wait_for_calls(1)) << "bucket 0 was not handed over while backward ran";
  // A later bucket whose slots are ready waits for the one before it.
  for (size_t t = buckets[2].first; t < buckets[2].last; ++t) reducer.mark_ready(t);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(hook.calls().size(), 1u) << "bucket 2 went before bucket 1";
  reducer.finish();
  EXPECT_EQ(hook.calls().size(), buckets.size());
}

TEST(Reducer, AHookErrorSurfacesFromFinish) {
  const auto layout = layout_of(kSizes);
  for (bool overlap : {true, false}) {
    auto self = make_self_communicator(Device::cpu());
    AverageHook hook(layout, 1);
    hook.fail_at(1);
    Reducer reducer(layout, *self, hook, small_buckets(overlap));
    const std::vector<Tensor> grads = {worker_grad(total_of(layout), 0, 0)};
    Tensor out = Tensor::empty({total_of(layout)});
    reducer.begin(0, grads, out);
    for (size_t t = 0; t < kSizes.size(); ++t) reducer.mark_ready(t);
    const std::string e = error_of([&] { reducer.finish(); });
    EXPECT_NE(e.find("hook failed on bucket 1"), std::string::npos) << e;
  }
}

TEST(Reducer, APeerThatNeverJoinsFailsTheStep) {
  const auto layout = layout_of(kSizes);
  auto comms = make_local_group(2, 300ms);
  AverageHook hook(layout, 2);
  Reducer reducer(layout, *comms[0], hook, small_buckets(true));
  const std::vector<Tensor> grads = {worker_grad(total_of(layout), 0, 0)};
  Tensor out = Tensor::empty({total_of(layout)});
  reducer.begin(0, grads, out);
  for (size_t t = 0; t < kSizes.size(); ++t) reducer.mark_ready(t);
  const std::string e = error_of([&] { reducer.finish(); });
  EXPECT_FALSE(e.empty());
  EXPECT_NE(e.find("local"), std::string::npos) << e;  // names the backend
}

}  // namespace
}  // namespace tg::comm
