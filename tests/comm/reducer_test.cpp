// The bucketed reducer (comm/reducer.h): bucket layout (reverse slot order, caps, the small first
// bucket, an oversized slot alone); the reduced gradient bit-identical (memcmp) to
// tern::aggregate_emulated over all N workers for every compressor, with many buckets, slots
// marked ready in a different order on every rank, overlap on (the communication thread) and off,
// P = 1..3 local ranks and emulated workers; the merged stats account for every slot; a peer
// that never joins surfaces as an error from finish().
#include "comm/reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/core/philox.h"
#include "terngrad/compressor.h"
#include "tests/comm/emulated_reference.h"
#include "tests/comm/rank_threads.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;
using tern::CompressionOptions;
using tern::GradSlot;
using tern::SlotRange;

std::vector<GradSlot> layout_of(const std::vector<int64_t>& sizes) {
  std::vector<GradSlot> layout;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    layout.push_back({"t" + std::to_string(i), offset, sizes[i]});
    offset += sizes[i];
  }
  return layout;
}

TEST(MakeBuckets, ReverseOrderCapsAndAFirstSmallBucket) {
  // f32 bytes: 40, 400, 4, 4000, 40, 40.
  const auto layout = layout_of({10, 100, 1, 1000, 10, 10});
  // First bucket <= 100 B: slots 5, 4 (80 B); then <= 500 B: slot 3 alone (4000 B, over the cap);
  // then slots 2, 1 (404 B), closed after slot 1 because it is large (>= the first cap, 100 B),
  // so its exchange does not wait for slot 0; then slot 0.
  const auto b = make_buckets(layout, 500, 100);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], (SlotRange{4, 6}));
  EXPECT_EQ(b[1], (SlotRange{3, 4}));
  EXPECT_EQ(b[2], (SlotRange{1, 3}));
  EXPECT_EQ(b[3], (SlotRange{0, 1}));
  // One large bucket holds everything; the first-bucket cap never exceeds the bucket cap.
  EXPECT_EQ(make_buckets(layout, 1 << 20, 1 << 20), (std::vector<SlotRange>{{0, 6}}));
  const auto tiny = make_buckets(layout, 1, 1 << 20);
  ASSERT_EQ(tiny.size(), 6u);  // every slot alone, last slot first
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(tiny[i], (SlotRange{5 - i, 6 - i}));
  EXPECT_THROW(make_buckets(layout, 0, 1), Error);
}

Tensor worker_grad(const std::vector<GradSlot>& layout, int64_t g, int64_t step) {
  int64_t total = 0;
  for (const GradSlot& s : layout) total += s.numel;
  std::vector<float> v(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    const uint64_t stream = 900 + 50 * static_cast<uint64_t>(step) + static_cast<uint64_t>(g);
    v[i] = (uniform01(philox_word(77, stream, i)) - 0.5f) * (i % 31 == 0 ? 8.0f : 1.0f);
  }
  return Tensor::from_vector(v, {total});
}

std::vector<CompressionOptions> methods() {
  std::vector<CompressionOptions> m;
  for (const char* name : {"none", "fp16", "qsgd", "onebit", "terngrad"}) {
    CompressionOptions o;
    o.method = parse_enum(tern::kMethods, name, "method");
    o.qsgd_bucket = 64;
    o.min_size = 8;  // terngrad: the small slots go as raw f32 among the ternary ones
    m.push_back(o);
  }
  CompressionOptions own;
  own.method = ::tg::tern::Method::terngrad;
  own.scaler_sharing = ::tg::tern::ScalerSharing::none;
  m.push_back(own);
  CompressionOptions feedback;  // error feedback: per-worker residuals carried between steps
  feedback.method = ::tg::tern::Method::terngrad;
  feedback.min_size = 8;
  feedback.error_feedback = true;
  m.push_back(feedback);
  CompressionOptions finer = feedback;  // the 4-level grid, rescaled, with error feedback
  finer.levels = 4;
  finer.rescale = true;
  m.push_back(finer);
  return m;
}

const std::vector<int64_t> kSizes = {301, 5, 1203, 13, 250, 7, 64};
constexpr int kSteps = 2;

std::vector<std::vector<float>> emulated(const CompressionOptions& o, int n) {
  return emulated_outputs(o, layout_of(kSizes), n, kSteps, worker_grad);
}

// One rank's steps through a Reducer with small buckets; slots marked ready in a shuffled order
// (seeded by rank and step).
void run_rank(Communicator* comm, int rank, int w, const CompressionOptions& o, bool overlap,
              const std::vector<std::vector<float>>& want, const std::string& what) {
  auto c = tern::make_compressor(o, layout_of(kSizes));
  ReducerOptions ro;
  ro.bucket_bytes = 1500;
  ro.first_bucket_bytes = 300;
  ro.overlap = overlap;
  Reducer reducer(*c, comm, ro);
  ASSERT_GE(reducer.buckets().size(), 4u) << what;
  EXPECT_EQ(reducer.overlapped(), overlap && comm != nullptr) << what;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<Tensor> grads;
    for (int k = 0; k < w; ++k) grads.push_back(worker_grad(c->layout(), rank * w + k, step));
    Tensor out = Tensor::full({c->total()}, 777.0);
    reducer.begin(step, grads, out);
    std::vector<size_t> order(kSizes.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 gen(static_cast<unsigned>(31 * rank + step));
    std::shuffle(order.begin(), order.end(), gen);
    order.pop_back();  // one slot never marked: finish() must still reduce it
    for (size_t t : order) reducer.mark_ready(t);
    const ReduceStats st = reducer.finish();
    const std::string at = what + " rank " + std::to_string(rank) + " step " + std::to_string(step);
    const std::vector<float> got = out.to_vector<float>();
    ASSERT_EQ(got.size(), want[step].size()) << at;
    EXPECT_EQ(std::memcmp(got.data(), want[step].data(), got.size() * sizeof(float)), 0)
        << at << ": differs from aggregate_emulated";
    EXPECT_EQ(st.buckets, static_cast<int64_t>(reducer.buckets().size())) << at;
    EXPECT_EQ(st.merged.routes.size(), kSizes.size()) << at;
    EXPECT_GE(st.wait_s, 0.0) << at;
    if (comm != nullptr) {
      EXPECT_EQ(st.merged.wire.sent > 0, comm->size() > 1) << at;
    }
  }
}

TEST(Reducer, BitIdenticalToEmulatedForEveryMethodBucketingAndOrder) {
  for (const CompressionOptions& o : methods()) {
    const std::string label =
        std::string(enum_name(tern::kMethods, o.method)) +
        (o.scaler_sharing == ::tg::tern::ScalerSharing::none ? " own scalers" : "") +
        (o.error_feedback ? " error feedback" : "") + (o.levels != 3 ? " levels" : "") +
        (o.rescale ? " rescale" : "");
    // Emulated workers: the reducer without a communicator.
    {
      const auto want = emulated(o, 3);
      auto c = tern::make_compressor(o, layout_of(kSizes));
      Reducer reducer(*c, nullptr, ReducerOptions{1500, 300, true, {}});
      for (int64_t step = 0; step < kSteps; ++step) {
        std::vector<Tensor> grads;
        for (int g = 0; g < 3; ++g) grads.push_back(worker_grad(c->layout(), g, step));
        Tensor out = Tensor::empty({c->total()});
        reducer.begin(step, grads, out);
        reducer.finish();
        EXPECT_EQ(std::memcmp(out.raw_data(), want[step].data(), out.nbytes()), 0)
            << label << " emulated step " << step;
      }
    }
    for (int p : {1, 2, 3})
      for (int w : {1, 2})
        for (bool overlap : {true, false}) {
          const std::string what = label + " P=" + std::to_string(p) + " W=" + std::to_string(w) +
                                   (overlap ? " overlap" : " in finish");
          const auto want = emulated(o, p * w);
          auto comms = make_local_group(p, 20s);
          const auto errors =
              run_ranks(p, [&](int r) { run_rank(comms[r].get(), r, w, o, overlap, want, what); });
          for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
        }
  }
}

TEST(Reducer, APeerThatNeverJoinsFailsTheStep) {
  auto comms = make_local_group(2, 300ms);
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  auto c = tern::make_compressor(o, layout_of(kSizes));
  Reducer reducer(*c, comms[0].get(), ReducerOptions{1500, 300, true, {}});
  std::vector<Tensor> grads = {worker_grad(c->layout(), 0, 0)};
  Tensor out = Tensor::empty({c->total()});
  reducer.begin(0, grads, out);
  for (size_t t = 0; t < kSizes.size(); ++t) reducer.mark_ready(t);
  const std::string e = error_of([&] { reducer.finish(); });
  EXPECT_FALSE(e.empty());
  EXPECT_NE(e.find("local"), std::string::npos) << e;  // names the backend
}

}  // namespace
}  // namespace tg::comm
