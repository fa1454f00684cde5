// The compressors' communication hook (terngrad/exchange/comm_hook.h) under the Reducer
// (comm/reducer.h): the reduced gradient bit-identical (memcmp) to the fold of the three rounds
// over all N workers (tests/terngrad/emulated_reference.h) for every compressor, with many buckets,
// slots marked ready in a different order on every rank, overlap on (the communication thread) and
// off, P = 1..3 local ranks and the group of one (emulated workers); every bucket's stats kept, in
// words as the trainer logs them. (A failing exchange surfacing from finish():
// tests/comm/reducer_test.cpp.)
#include "terngrad/exchange/comm_hook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/reducer.h"
#include "nn/core/philox.h"
#include "terngrad/compressor.h"
#include "tests/comm/rank_threads.h"
#include "tests/terngrad/emulated_reference.h"

namespace tg::tern {
namespace {

using namespace std::chrono_literals;
using namespace tg::comm;

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
    o.method = parse_enum(kMethods, name, "method");
    o.qsgd_bucket = 64;
    o.min_size = 8;  // terngrad: the small slots go as raw f32 among the ternary ones
    m.push_back(o);
  }
  CompressionOptions own;
  own.method = Method::terngrad;
  own.scaler_sharing = ScalerSharing::none;
  m.push_back(own);
  CompressionOptions feedback;  // error feedback: per-worker residuals carried between steps
  feedback.method = Method::terngrad;
  feedback.min_size = 8;
  feedback.error_feedback = true;
  m.push_back(feedback);
  CompressionOptions finer = feedback;  // the 4-level grid, rescaled, with error feedback
  finer.levels = 4;
  finer.rescale = true;
  m.push_back(finer);
  return m;
}

std::string label_of(const CompressionOptions& o) {
  return std::string(enum_name(kMethods, o.method)) +
         (o.scaler_sharing == ScalerSharing::none ? " own scalers" : "") +
         (o.error_feedback ? " error feedback" : "") + (o.levels != 3 ? " levels" : "") +
         (o.rescale ? " rescale" : "");
}

const std::vector<int64_t> kSizes = {301, 5, 1203, 13, 250, 7, 64};
constexpr int kSteps = 2;

std::vector<std::vector<float>> emulated(const CompressionOptions& o, int n) {
  return emulated_outputs(o, layout_of(kSizes), n, kSteps, worker_grad);
}

// One rank's steps through a Reducer with small buckets and the compressors' hook; slots marked
// ready in a shuffled order (seeded by rank and step).
void run_rank(Communicator& comm, int w, const CompressionOptions& o, bool overlap,
              const std::vector<std::vector<float>>& want, const std::string& what) {
  const int rank = comm.rank();
  auto c = make_compressor(o, layout_of(kSizes));
  CompressionHook hook(*c, {});
  Reducer reducer(c->layout(), comm, hook, small_buckets(overlap));
  ASSERT_GE(reducer.buckets().size(), 4u) << what;
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
    reducer.finish();
    const std::string at = what + " rank " + std::to_string(rank) + " step " + std::to_string(step);
    const std::vector<float> got = out.to_vector<float>();
    ASSERT_EQ(got.size(), want[step].size()) << at;
    EXPECT_EQ(std::memcmp(got.data(), want[step].data(), got.size() * sizeof(float)), 0)
        << at << ": differs from the fold";
    // Every bucket's stats kept, their routes covering every slot once.
    const std::vector<AggregateStats>& buckets = hook.last_step();
    ASSERT_EQ(buckets.size(), reducer.buckets().size()) << at;
    size_t slots = 0;
    uint64_t sent = 0;
    for (const AggregateStats& b : buckets) {
      slots += b.routes.size();
      sent += b.wire.sent;
    }
    EXPECT_EQ(slots, kSizes.size()) << at;
    EXPECT_EQ(sent > 0, comm.size() > 1) << at;
    EXPECT_GE(compression_seconds(buckets), 0.0) << at;
  }
}

TEST(CompressionHook, BitIdenticalToTheFoldForEveryMethodBucketingAndOrder) {
  for (const CompressionOptions& o : methods()) {
    const std::string label = label_of(o);
    {
      const auto want = emulated(o, 3);
      auto self = make_self_communicator(Device::cpu());
      run_rank(*self, 3, o, false, want, label + " emulated");
    }
    for (int p : {1, 2, 3})
      for (int w : {1, 2})
        for (bool overlap : {true, false}) {
          const std::string what = label + " P=" + std::to_string(p) + " W=" + std::to_string(w) +
                                   (overlap ? " overlap" : " in finish");
          const auto want = emulated(o, p * w);
          auto comms = make_local_group(p, 20s);
          const auto errors =
              run_ranks(p, [&](int r) { run_rank(*comms[r], w, o, overlap, want, what); });
          for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
        }
  }
}

// How a step's gradients travelled, in the words the trainer logs, for each kind of route.
TEST(CompressionHook, DescribesTheStepsRoute) {
  struct Case {
    const char* method;
    Route algorithm;
    std::string route;
  };
  const std::vector<Case> cases = {
      {"terngrad", Route::ps, "ternary codes by ps in "},
      {"terngrad", Route::sharded, "ternary codes by sharded in "},
      {"terngrad", Route::hierarchical, "ternary codes by hierarchical in "},
      {"terngrad", Route::automatic, "ternary codes by allgather in "},
      {"terngrad", Route::allgather, "whole messages by allgather in "},
      // Two ranks of one worker: the values allgathered (the same bytes as reduce-scatter +
      // allgather for fp32, fewer for fp16; aggregate.h's gathers_values).
      {"none", Route::automatic, "fp32 by allgather, summed in worker order in "},
      {"none", Route::ring, "fp32 by ring allreduce in "},
      {"fp16", Route::automatic, "fp16 by allgather, summed in worker order in "},
      {"qsgd", Route::automatic, "whole messages by allgather in "},
  };
  for (const Case& k : cases) {
    auto comms = make_local_group(2, 20s);
    std::vector<std::string> routes(2), lines(2);
    const auto errors = run_ranks(2, [&](int r) {
      CompressionOptions o;
      o.method = parse_enum(kMethods, k.method, "method");
      auto c = make_compressor(o, layout_of(kSizes));
      AggregateOptions ao;
      ao.algorithm = k.algorithm;
      CompressionHook hook(*c, ao);
      Reducer reducer(c->layout(), *comms[r], hook, small_buckets(false));
      const std::vector<Tensor> grads = {worker_grad(c->layout(), r, 0)};
      Tensor out = Tensor::empty({c->total()});
      reducer.begin(0, grads, out);
      reducer.finish();
      routes[r] = describe_route(hook.last_step());
      lines[r] = describe(hook.last_step());
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(errors[r], "") << k.method;
      EXPECT_EQ(routes[r].rfind(k.route, 0), 0u) << routes[r];
      EXPECT_NE(routes[r].find(" buckets"), std::string::npos) << routes[r];
      EXPECT_NE(lines[r].find("; wire sent "), std::string::npos) << lines[r];
    }
  }
}

}  // namespace
}  // namespace tg::tern
