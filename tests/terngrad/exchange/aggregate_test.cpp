// aggregate against the specification, the naive fold of the three rounds over all N = P * W
// gradients in one place (tests/terngrad/emulated_reference.h): on the local communicator (P =
// 1..4 rank threads, W = 1, 2 workers each) for every compressor, both terngrad scaler-sharing
// modes and every algorithm, over three consecutive steps (1-bit SGD's and error feedback's
// residuals carry over), `out` must be bit-identical (memcmp) on every rank; the wire bytes
// reported must be the communicator's own counters and the figures of comm/wire_model.h. The
// group of one (aggregate_local, what emulated workers run) equals the fold for every method and
// W. Bucketing: many small odd-sized slots, raw slots between ternary ones, both pack formats,
// chunk sizes from 1 byte up, overlap on (a collectives thread) and off. One Gloo group (real TCP
// on 127.0.0.1, P = 2) checks the same for terngrad and none against Gloo's schedules, unchunked
// and chunked with overlap. Then the argument checks.
#include "terngrad/exchange/aggregate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_comm.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "comm/wire_model.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "nn/core/worker_thread.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/ternary_collectives.h"
#include "tests/comm/rank_threads.h"
#include "tests/terngrad/emulated_reference.h"
#include "tests/testing/files.h"
#include "tests/testing/sanitizer.h"

namespace tg::tern {
namespace {

using namespace tg::comm;

using namespace std::chrono_literals;
using tern::CompressionOptions;
using tern::GradSlot;
using tern::PackFormat;

constexpr uint64_t kSeed = 2017;
constexpr int kSteps = 3;

// A small net's flat gradient: sizes chosen so slots are not multiples of 4 (codes end
// mid-word, raw floats sit at odd byte offsets inside a message) and two of them fall under
// min_size below.
std::vector<GradSlot> test_layout() {
  const std::vector<std::pair<std::string, int64_t>> sizes = {{"conv1.w", 601}, {"conv1.b", 6},
                                                              {"fc1.w", 1203},  {"fc1.b", 13},
                                                              {"fc2.w", 250},   {"fc2.b", 5}};
  std::vector<GradSlot> layout;
  int64_t offset = 0;
  for (const auto& [name, n] : sizes) {
    layout.push_back({name, offset, n});
    offset += n;
  }
  return layout;
}

// Worker g's gradient at `step`: normal-ish values (Box-Muller on Philox), a different scale
// per slot, a few outliers so clipping matters.
Tensor worker_grad(const std::vector<GradSlot>& layout, int64_t g, int64_t step) {
  int64_t total = 0;
  for (const GradSlot& s : layout) total += s.numel;
  std::vector<float> v(total);
  for (size_t t = 0; t < layout.size(); ++t) {
    const float scale = 0.01f * static_cast<float>(t + 1);
    for (int64_t i = layout[t].offset; i < layout[t].offset + layout[t].numel; ++i) {
      const uint64_t stream = 7000 + 100 * static_cast<uint64_t>(step) + static_cast<uint64_t>(g);
      const float u1 = uniform01(philox_word(kSeed, stream, 2 * i)) + 1e-7f;
      const float u2 = uniform01(philox_word(kSeed, stream, 2 * i + 1));
      float x = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
      if (i % 97 == 0) x *= 8.0f;
      v[i] = scale * x;
    }
  }
  return Tensor::from_vector(v, {total});
}

struct Method {
  std::string label;
  CompressionOptions o;
};

std::vector<Method> methods() {
  std::vector<Method> m;
  CompressionOptions o;
  o.method = ::tg::tern::Method::none;
  m.push_back({"none", o});
  o.method = ::tg::tern::Method::fp16;
  m.push_back({"fp16", o});
  o.method = ::tg::tern::Method::qsgd;
  o.qsgd_bucket = 64;
  m.push_back({"qsgd", o});
  o = {};
  o.method = ::tg::tern::Method::onebit;
  m.push_back({"onebit", o});
  o = {};
  o.method = ::tg::tern::Method::terngrad;
  o.min_size = 8;  // conv1.b and fc2.b go as raw fp32
  m.push_back({"terngrad_shared", o});
  // Logits raw, base-3 codes, and step 1 a floating-gradient epoch (every slot raw fp32).
  o.min_size = 1;
  o.quantize_logits = false;
  o.pack = PackFormat::base3;
  o.floating_grad_epoch = 2;
  o.steps_per_epoch = 1;
  m.push_back({"terngrad_shared_base3_floating", o});
  o = {};
  o.method = ::tg::tern::Method::terngrad;
  o.scaler_sharing = ::tg::tern::ScalerSharing::none;
  o.min_size = 8;
  m.push_back({"terngrad_unshared", o});
  // Error feedback: step 1 ternarizes gradient + residual (per global worker index).
  o.error_feedback = true;
  m.push_back({"terngrad_unshared_error_feedback", o});
  o.scaler_sharing = ::tg::tern::ScalerSharing::max;
  m.push_back({"terngrad_shared_error_feedback", o});
  // The finer grids: shared scalers (exact integer sums the compressor decodes), and own ones.
  o.error_feedback = false;
  o.levels = 4;
  m.push_back({"terngrad_shared_4_levels", o});
  o.levels = 5;
  o.scaler_sharing = ::tg::tern::ScalerSharing::none;
  m.push_back({"terngrad_unshared_5_levels", o});
  // The norm-preserving rescale: two floats of meta per tensor, one scale per tensor.
  o = {};
  o.method = ::tg::tern::Method::terngrad;
  o.min_size = 8;
  o.rescale = true;
  m.push_back({"terngrad_shared_rescale", o});
  return m;
}

// The routes a run can ask for but ring (allgather: the generic path, whole messages).
constexpr Route kAsked[] = {Route::ps,      Route::allgather,    Route::packed_allreduce,
                            Route::sharded, Route::hierarchical, Route::automatic};

// The specification: the fold over all N workers, steps 0 .. kSteps - 1.
std::vector<std::vector<float>> emulated(const Method& m, int n,
                                         const std::vector<GradSlot>& slots = test_layout()) {
  return emulated_outputs(m.o, slots, n, kSteps, worker_grad);
}

// One rank's bytes in the elementwise path's plan (elementwise_messages, what the simulator
// replays).
WireBytes planned_wire(const comm::NodeLayout& nodes, int p, int w, int64_t e, int64_t n,
                       int64_t chunk_bytes, int rank) {
  WireBytes t;
  for (const tern::Message& m : elementwise_messages(nodes, p, w, e, n, chunk_bytes)) {
    if (m.src == rank) t.sent += static_cast<uint64_t>(m.bytes);
    if (m.dst == rank) t.received += static_cast<uint64_t>(m.bytes);
  }
  return t;
}

// What one rank's call should move, from the documented paths (terngrad/exchange/aggregate.h) and
// the wire figures of the backend ("local": comm/wire_model.h, "gloo": comm/gloo_comm.h). The
// elementwise path's figures are checked against its message plan on the way.
WireBytes expected_wire(const Method& m, const AggregateOptions& opt, const std::string& backend,
                        int p, int w, int rank, int64_t step,
                        const std::vector<GradSlot>& slots = test_layout()) {
  const bool gloo = backend == "gloo";
  auto allgather = [&](uint64_t bytes) {
    return gloo ? gloo_wire::allgather(bytes, p) : wire_model::allgather(bytes, p);
  };
  auto c = tern::make_compressor(m.o, slots);
  WireBytes total;
  if (c->num_meta() > 0) wire_model::add(total, allgather(w * c->num_meta() * sizeof(float)));
  const Route a = opt.algorithm;
  const bool floating = step % 2 == 1 && m.o.floating_grad_epoch == 2;
  const bool ternary_path = p > 1 && m.o.method == ::tg::tern::Method::terngrad &&
                            m.o.scaler_sharing == ::tg::tern::ScalerSharing::max &&
                            m.o.levels == 3 && a != Route::allgather && !floating;
  const bool all_f32 = m.o.method == ::tg::tern::Method::none ||
                       (m.o.method == ::tg::tern::Method::terngrad && floating);
  if (p > 1 && (all_f32 || m.o.method == ::tg::tern::Method::fp16)) {
    // The elementwise path: alltoall of W ranges of e bytes per element, allgather of one f32
    // range.
    // At P = 2 (and f16 at P = 3, W = 1) the W messages allgathered instead: no more bytes.
    const uint64_t e = m.o.method == ::tg::tern::Method::fp16 ? 2 : 4;
    const auto n = static_cast<uint64_t>(c->total()), pu = static_cast<uint64_t>(p),
               wu = static_cast<uint64_t>(w);
    const uint64_t range = (n + pu - 1) / pu;
    const WireBytes planned =
        planned_wire(opt.nodes, p, w, static_cast<int64_t>(e), c->total(), opt.chunk_bytes, rank);
    const WireBytes before = total;
    auto check_plan = [&] {
      EXPECT_EQ(total.sent - before.sent, planned.sent) << "elementwise_messages, rank " << rank;
      EXPECT_EQ(total.received - before.received, planned.received)
          << "elementwise_messages, rank " << rank;
    };
    if (const int64_t g = node_fold_lanes(opt.nodes, p, w, static_cast<int64_t>(e), c->total());
        g > 0) {
      // The fold along M nodes of G: W lanes to each other rank of the node and back; a partial
      // sum from the previous node (all but node 0) and to the next (all but the last); the
      // averages from the last node (to each other node's lane owner), then the node's lanes.
      const auto gu = static_cast<uint64_t>(g), m = pu / gu,
                 node = static_cast<uint64_t>(rank) / gu;
      const uint64_t lane = (n + gu - 1) / gu;
      WireBytes t{(gu - 1) * wu * e * lane, (gu - 1) * wu * e * lane};
      if (node > 0) t.received += 4 * lane;
      if (node + 1 < m) t.sent += 4 * lane;
      if (node + 1 == m)
        t.sent += (m - 1) * 4 * lane;
      else
        t.received += 4 * lane;
      t.sent += (gu - 1) * 4 * lane;
      t.received += (gu - 1) * 4 * lane;
      wire_model::add(total, t);
      check_plan();
      return total;
    }
    if ((pu - 1) * wu * e * n <= (pu - 1) * (wu * e + 4) * range) {
      wire_model::add(total, allgather(wu * e * n));
      check_plan();
      return total;
    }
    wire_model::add(total, gloo ? gloo_wire::alltoall(wu * e * range, p)
                                : wire_model::alltoall(wu * e * range, p));
    wire_model::add(total, allgather(4 * range));
    check_plan();
    return total;
  }
  if (!ternary_path) {
    wire_model::add(total, allgather(w * ((c->payload_bytes(step) + 3) / 4 * 4)));
    return total;
  }
  const auto& layout = c->layout();
  uint64_t block = 0;
  TernaryBucketShape bucket{{}, p, w, m.o.pack, backend, opt.chunk_bytes, opt.nodes};
  for (size_t t = 0; t < layout.size(); ++t) {
    const int64_t n = layout[t].numel;
    const bool logits = t + 2 >= layout.size();
    const bool ternary = !floating && n >= m.o.min_size && (m.o.quantize_logits || !logits);
    if (ternary)
      bucket.numel.push_back(n);
    else
      block += n * sizeof(float);
  }
  const Route ran = bucket_route_for(a) == Route::automatic ? choose_bucket_route(bucket) : a;
  wire_model::add(total, ternary_bucket_cost(ran, bucket, rank).rank);
  if (block > 0) wire_model::add(total, allgather(w * block));
  return total;
}

// One rank's share of a run: its W gradients at `step`.
std::vector<Tensor> local_grads(const tern::Compressor& c, int rank, int w, int64_t step) {
  std::vector<Tensor> g;
  for (int k = 0; k < w; ++k) g.push_back(worker_grad(c.layout(), rank * w + k, step));
  return g;
}

// Every step of `m` with algorithm `a` on `comm` (this rank's thread): out bit-identical to
// the fold, the reported wire equal to the counters' change and to the model. With
// pipeline.overlap the chunks' collectives run on a thread of the rank's own.
void run_and_check(Communicator& comm, const Method& m, const AggregateOptions& pipeline, Route a,
                   int w, const std::vector<std::vector<float>>& want, const std::string& what,
                   const std::vector<GradSlot>& slots = test_layout()) {
  const int p = comm.size(), r = comm.rank();
  auto c = tern::make_compressor(m.o, slots);
  AggregateOptions opt = pipeline;
  opt.algorithm = a;
  WorkerThread collectives;
  for (int64_t step = 0; step < kSteps; ++step) {
    const std::vector<Tensor> grads = local_grads(*c, r, w, step);
    Tensor out = Tensor::full({c->total()}, 12345.0);
    const WireBytes before = comm.wire();
    const AggregateStats st = aggregate(*c, comm, grads, step, out, opt, {}, &collectives);
    const WireBytes after = comm.wire();
    const std::string at = tg::detail::concat(what, " rank ", r, " step ", step);
    const std::vector<float> got = out.to_vector<float>();
    ASSERT_EQ(got.size(), want[step].size()) << at;
    EXPECT_EQ(std::memcmp(got.data(), want[step].data(), got.size() * sizeof(float)), 0)
        << at << ": out differs from the fold";
    EXPECT_EQ(st.wire.sent, after.sent - before.sent) << at;
    EXPECT_EQ(st.wire.received, after.received - before.received) << at;
    const WireBytes model = expected_wire(m, opt, comm.backend(), p, w, r, step, slots);
    EXPECT_EQ(st.wire.sent, model.sent) << at << " (" << describe(st) << ")";
    EXPECT_EQ(st.wire.received, model.received) << at << " (" << describe(st) << ")";
    EXPECT_EQ(st.routes.size(), c->layout().size()) << at;
    const bool floating = step % 2 == 1 && m.o.floating_grad_epoch == 2;
    const bool all_f32 = m.o.method == ::tg::tern::Method::none ||
                         (m.o.method == ::tg::tern::Method::terngrad && floating);
    if (all_f32 ||
        m.o.method == ::tg::tern::Method::fp16) {  // the exact reduce-scatter path on several ranks
      EXPECT_EQ(st.elementwise_path, p > 1) << at;
      EXPECT_EQ(st.elementwise_bytes, p == 1                                   ? 0
                                      : m.o.method == ::tg::tern::Method::fp16 ? 2
                                                                               : 4)
          << at;
      const int64_t e = m.o.method == ::tg::tern::Method::fp16 ? 2 : 4;
      const bool gathered = gathers_values(p, w, e, c->total());
      // (P - 1) W e <= 4, up to ceil(n / P)'s padding, which these layouts are too large to tip.
      EXPECT_EQ(gathered, p > 1 && w * e * (p - 1) <= 4) << at;
      const bool folded = node_fold_lanes(opt.nodes, p, w, e, c->total()) > 0;
      for (Route route : st.routes)
        EXPECT_EQ(route, p == 1     ? Route::message
                         : folded   ? Route::hierarchical
                         : gathered ? Route::allgather
                                    : Route::reduce_scatter)
            << at;
      if (folded && c->num_meta() == 0) {
        // Across the node links only partial sums and averages: 4 bytes of each lane element
        // (and the scalers' allgather, for a method that has them).
        const int64_t g = p / opt.nodes.nodes(), lane = (c->total() + g - 1) / g;
        const int64_t node = r / g, nodes = opt.nodes.nodes();
        EXPECT_EQ(st.inter_wire.sent, (node + 1 < nodes ? 4 * lane : 0) +
                                          (node + 1 == nodes ? (nodes - 1) * 4 * lane : 0))
            << at;
      }
      if (m.o.method == ::tg::tern::Method::none && p > 1 && w == 1 && !folded) {
        // a ring allreduce's 2 (P - 1) / P of the bytes, plus padding
        const double ring = 2.0 * (p - 1) / p * 4 * c->total();
        EXPECT_LE(static_cast<double>(st.wire.sent), ring + 8.0 * p) << at;
      }
    }
    EXPECT_GE(st.encode_s, 0.0);
    EXPECT_GE(st.comm_s, 0.0);
    EXPECT_GE(st.reduce_s, 0.0);
    // One rank exchanges nothing: every method folds on the generic path there.
    const bool ternary_path = p > 1 && m.o.method == ::tg::tern::Method::terngrad &&
                              m.o.scaler_sharing == ::tg::tern::ScalerSharing::max &&
                              m.o.levels == 3 && a != Route::allgather && !floating;
    EXPECT_EQ(st.ternary_path, ternary_path) << at;
    if (p == 1) {
      for (Route route : st.routes) EXPECT_EQ(route, Route::message) << at;
    }
    if (ternary_path) {
      EXPECT_EQ(st.ternary_slots + st.raw_slots, static_cast<int64_t>(c->layout().size())) << at;
      if (a != Route::automatic) {
        EXPECT_EQ(st.bucket_route, a) << at;
      }
      // One bucket: every ternary slot on the bucket's route, every raw slot gathered.
      int64_t gathered = 0;
      for (Route route : st.routes) {
        EXPECT_TRUE(route == st.bucket_route || route == Route::gathered) << at;
        gathered += route == Route::gathered;
      }
      EXPECT_EQ(gathered, st.raw_slots) << at;
      const int64_t chunk = opt.chunk_bytes;
      const int64_t chunks = st.bucket_bytes == 0 ? 0
                             : chunk == 0         ? 1
                                                  : (st.bucket_bytes + chunk - 1) / chunk;
      EXPECT_EQ(st.bucket_chunks, chunks) << at;
    }
  }
}

class AggregateLocal : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(AggregateLocal, BitIdenticalToEmulatedForEveryMethodAndAlgorithm) {
  const int p = std::get<0>(GetParam()), w = std::get<1>(GetParam());
  for (const Method& m : methods()) {
    const auto want = emulated(m, p * w);
    for (Route a : kAsked) {
      const std::string what = tg::detail::concat(m.label, " ", name(a), " P=", p, " W=", w);
      auto comms = make_local_group(p, 20s);
      const auto errors =
          run_ranks(p, [&](int r) { run_and_check(*comms[r], m, {}, a, w, want, what); });
      for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
    }
  }
}

// The group of one is what workers emulated in one process aggregate through: the fold itself,
// for every method and any number of workers, with nothing on the wire.
TEST(AggregateLocal, TheGroupOfOneIsTheFold) {
  for (const Method& m : methods())
    for (int n : {1, 2, 3}) {
      const auto want = emulated(m, n);
      auto c = tern::make_compressor(m.o, test_layout());
      for (int64_t step = 0; step < kSteps; ++step) {
        std::vector<Tensor> grads;
        for (int g = 0; g < n; ++g) grads.push_back(worker_grad(c->layout(), g, step));
        Tensor out = Tensor::full({c->total()}, 12345.0);
        const AggregateStats st = aggregate_local(*c, grads, step, out);
        const std::string at = tg::detail::concat(m.label, " N=", n, " step ", step);
        EXPECT_EQ(std::memcmp(out.raw_data(), want[step].data(), out.nbytes()), 0) << at;
        EXPECT_EQ(st.wire.sent + st.wire.received, 0u) << at;
        EXPECT_FALSE(st.ternary_path || st.elementwise_path) << at;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Ranks, AggregateLocal,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return "P" + std::to_string(std::get<0>(info.param)) + "_W" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The routes of a shared-scaler terngrad step: raw slots gathered, every ternary slot in the one
// bucket on the asked route (auto: the cost model's; at P = 2, W = 1, allgather).
TEST(AggregateRoutes, FollowTheAlgorithmAndTheExclusionRules) {
  const Method m = methods()[4];  // terngrad_shared, min_size 8
  // (allgather, asked, is the generic path: whole messages.)
  for (Route a : {Route::ps, Route::packed_allreduce, Route::sharded, Route::hierarchical,
                  Route::automatic}) {
    auto comms = make_local_group(2, 20s);
    std::vector<AggregateStats> stats(2);
    const auto errors = run_ranks(2, [&](int r) {
      auto c = tern::make_compressor(m.o, test_layout());
      AggregateOptions opt;
      opt.algorithm = a;
      Tensor out = Tensor::empty({c->total()});
      stats[r] = aggregate(*c, *comms[r], local_grads(*c, r, 1, 0), 0, out, opt);
    });
    const Route b = a == Route::automatic ? Route::allgather : a;
    // conv1.w 601, fc1.w 1203, fc1.b 13, fc2.w 250 elements: 151 + 301 + 4 + 63 code bytes.
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(errors[r], "") << name(a);
      const std::vector<Route> want = {b, Route::gathered, b, b, b, Route::gathered};
      EXPECT_EQ(stats[r].routes, want) << name(a);
      EXPECT_EQ(stats[r].ternary_slots, 4);
      EXPECT_EQ(stats[r].raw_slots, 2);
      EXPECT_EQ(stats[r].bucket_bytes, 519);
      EXPECT_EQ(stats[r].bucket_chunks, 1);
      const std::string want_line = std::string("ternary: 4 ") + name(b) +
                                    ", 2 gathered raw fp32; bucket of 4 slots, 519 B per worker, "
                                    "1 chunk; wire sent ";
      EXPECT_EQ(describe(stats[r]).rfind(want_line, 0), 0u) << describe(stats[r]);
    }
  }
}

// The matrix of "same bits": P = 3, 4, 6, 8, both formats, error feedback, tiny chunks,
// overlap on and off, every exact route, and the hierarchical one over 2 and 3 nodes: out
// bit-identical to the fold over all N workers in one place, step after step (error feedback's
// residuals carry over). Under a sanitizer (tests/testing/sanitizer.h) P = 3 (two workers a
// rank; nodes of 2 and 1) and 6 (three nodes) take every route and node layout, each with two
// of the eight (format, chunk, overlap) pipelines in turn, so every pipeline meets every P.
TEST(AggregateRoutes, SameBitsForEveryRouteNodeLayoutAndPipeline) {
  const std::vector<int> ranks =
      tg::testing::kSanitized ? std::vector<int>{3, 6} : std::vector<int>{3, 4, 6, 8};
  int p_index = 0;
  for (int p : ranks) {
    ++p_index;
    for (PackFormat pack : {PackFormat::two_bit, PackFormat::base3}) {
      Method m{"terngrad_ef", {}};
      m.o.method = ::tg::tern::Method::terngrad;
      m.o.error_feedback = true;
      m.o.pack = pack;
      m.o.min_size = 8;
      const int w = p == 3 ? 2 : 1;
      const auto want = emulated(m, p * w);
      for (int64_t chunk : {int64_t{0}, int64_t{5}})
        for (bool overlap : {false, true}) {
          const int pipeline_index = (pack == PackFormat::base3) * 4 + (chunk > 0) * 2 + overlap;
          int cell = p_index;  // + the route's and the layout's index
          for (Route a : {Route::ps, Route::packed_allreduce, Route::sharded, Route::hierarchical,
                          Route::automatic})
            for (int nodes : {1, 2, 3}) {
              if (nodes > 1 && a != Route::hierarchical && a != Route::automatic) continue;
              if (tg::testing::kSanitized && (pipeline_index + cell++) % 4 != 0) continue;
              AggregateOptions pipeline;
              pipeline.chunk_bytes = chunk;
              pipeline.overlap = overlap;
              pipeline.nodes = NodeLayout::blocks(p, (p + nodes - 1) / nodes);
              const std::string what = tg::detail::concat(
                  m.label, pack == PackFormat::base3 ? " base3 " : " ", name(a), " P=", p,
                  " chunk ", chunk, overlap ? " overlap " : " serial ", pipeline.nodes.str());
              auto comms = make_local_group(p, 20s);
              const auto errors = run_ranks(
                  p, [&](int r) { run_and_check(*comms[r], m, pipeline, a, w, want, what); });
              for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
            }
        }
    }
  }
}

// fp32 and fp16 over nodes: where it sends fewer bytes out of the busiest node the exact sum
// folds along the nodes (partial sums cross between them); the same bits as one process, the
// bytes of the rounds, and the flat path where the fold would not pay (nodes of one rank, or
// uneven and non-contiguous layouts).
TEST(AggregateRoutes, ExactFloatsFoldAlongTheNodes) {
  struct Case {
    int p, per_node, w;
    bool fold;
  };
  // Bytes out of the busiest node per element, fold against flat, fp32 (fp16): P = 4 as 2 x 2: 4
  // against 8 (6); 6 as 2 x 3: 4 against 12 (9); 6 as 3 x 2 with W = 2: 8 against 16 (10.7); 8
  // as 2 x 4: 4 against 16 (12); 8 as 4 x 2 in fp16: 12 against 9. Nodes of one rank and a short
  // last node are not folded.
  const std::vector<Case> cases = {{4, 2, 1, true}, {6, 3, 1, true},  {6, 2, 2, true},
                                   {8, 4, 1, true}, {4, 1, 1, false}, {5, 3, 1, false}};
  for (const Method& m : methods()) {
    // fp32, fp16, and TernGrad with a floating-gradient epoch (step 1: every slot fp32).
    if (m.label != "none" && m.label != "fp16" && m.label != "terngrad_shared_base3_floating")
      continue;
    std::vector<Case> these = cases;
    if (m.label == "fp16") these.push_back({8, 2, 1, false});
    // Chunks: the whole lane in one piece, and pieces of a few elements (the pipeline's rounds).
    for (const Case& k : these)
      for (int64_t chunk : {int64_t{0}, int64_t{64}}) {
        const auto want = emulated(m, k.p * k.w);
        AggregateOptions pipeline;
        pipeline.nodes = NodeLayout::blocks(k.p, k.per_node);
        pipeline.chunk_bytes = chunk;
        const std::string what = tg::detail::concat(m.label, " P=", k.p, " W=", k.w, " ",
                                                    pipeline.nodes.str(), " chunk ", chunk);
        const int64_t e = m.o.method == ::tg::tern::Method::fp16 ? 2 : 4;
        const int64_t total = tern::make_compressor(m.o, test_layout())->total();
        EXPECT_EQ(node_fold_lanes(pipeline.nodes, k.p, k.w, e, total) > 0, k.fold) << what;
        auto comms = make_local_group(k.p, 20s);
        const auto errors = run_ranks(k.p, [&](int r) {
          run_and_check(*comms[r], m, pipeline, Route::automatic, k.w, want, what);
        });
        for (int r = 0; r < k.p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
      }
  }
}

// Many small slots of odd sizes (codes end mid-byte, several slots share a chunk, one slot spans
// many chunks), some under min_size so raw fp32 slots sit between ternary ones, both pack formats,
// chunk sizes from 1 byte to one chunk for the whole bucket, overlap on and off: out bit-identical
// to the fold, the wire the bucket cost model's, every ternary slot in one bucket.
std::vector<GradSlot> many_slots_layout() {
  std::vector<GradSlot> layout;
  int64_t offset = 0;
  for (int t = 0; t < 37; ++t) {
    const int64_t n = t == 17 ? 4099 : 1 + (t * 53) % 97;  // 1 .. 97, and one larger slot
    std::string name = "t";  // (not "t" + to_string: GCC 12 -Wrestrict false positive)
    name += std::to_string(t);
    layout.push_back({name, offset, n});
    offset += n;
  }
  return layout;
}

class AggregateBucket : public ::testing::TestWithParam<std::tuple<PackFormat, int64_t, bool>> {};

TEST_P(AggregateBucket, ManySmallSlotsMixedRoutesExact) {
  const auto [pack, chunk, overlap] = GetParam();
  Method m{"terngrad_many", {}};
  m.o.method = ::tg::tern::Method::terngrad;
  m.o.min_size = 10;  // about a tenth of the slots stay raw fp32
  m.o.pack = pack;
  AggregateOptions pipeline;
  pipeline.chunk_bytes = chunk;
  pipeline.overlap = overlap;
  const std::vector<GradSlot> slots = many_slots_layout();
  for (const auto& [p, w] : {std::pair{3, 2}, std::pair{4, 1}}) {
    const auto want = emulated(m, p * w, slots);
    for (Route a : {Route::ps, Route::packed_allreduce, Route::sharded, Route::hierarchical,
                    Route::automatic}) {
      const std::string what =
          tg::detail::concat(m.label, pack == PackFormat::base3 ? " base3" : "", " chunk ", chunk,
                             overlap ? " overlap " : " ", name(a), " P=", p, " W=", w);
      auto comms = make_local_group(p, 20s);
      const int workers = w;  // clang 14 cannot capture a structured binding
      const auto errors = run_ranks(
          p, [&](int r) { run_and_check(*comms[r], m, pipeline, a, workers, want, what, slots); });
      for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << what << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Chunks, AggregateBucket,
    ::testing::Combine(::testing::Values(PackFormat::two_bit, PackFormat::base3),
                       ::testing::Values(int64_t{0}, int64_t{1}, int64_t{7}, int64_t{64},
                                         int64_t{1} << 20),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == PackFormat::base3 ? "base3" : "two_bit") +
             "_chunk" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_overlap" : "_serial");
    });

// Every slot ternary and every one through ps: the gathered block is empty and skipped.
TEST(AggregateRoutes, NothingGatheredWhenEverySlotIsTernary) {
  Method m{"terngrad_all_ternary", {}};
  m.o.method = ::tg::tern::Method::terngrad;
  const int p = 3, w = 2;
  const auto want = emulated(m, p * w);
  auto comms = make_local_group(p, 20s);
  const auto errors = run_ranks(
      p, [&](int r) { run_and_check(*comms[r], m, {}, Route::ps, w, want, "all ternary, ps"); });
  for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
}

// Over Gloo (TCP on 127.0.0.1, ranks as threads, one group for every case): the same outputs,
// and the wire bytes of Gloo's own schedules.
TEST(AggregateGloo, BitIdenticalToEmulatedWithGlooWireBytes) {
  testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  const int p = 2, w = 2;
  std::vector<Method> cases;
  for (const Method& m : methods())
    if (m.o.method == ::tg::tern::Method::none || m.o.method == ::tg::tern::Method::terngrad)
      cases.push_back(m);
  std::vector<std::vector<std::vector<float>>> want;
  for (const Method& m : cases) want.push_back(emulated(m, p * w));
  const auto errors = run_ranks(p, [&](int r) {
    auto store = open_store(url, 20s);
    auto comm = make_communicator(gloo_loopback(r, p, 20s), *store, "aggregate");
    AggregateOptions chunked;  // several chunks: the collectives run on a second thread
    chunked.chunk_bytes = 100;
    for (size_t i = 0; i < cases.size(); ++i)
      for (Route a : kAsked)
        for (const AggregateOptions& pipeline : {AggregateOptions{}, chunked})
          run_and_check(*comm, cases[i], pipeline, a, w, want[i],
                        tg::detail::concat("gloo ", cases[i].label, " ", name(a), " chunk ",
                                           pipeline.chunk_bytes));
  });
  for (int r = 0; r < p; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
}

// ---- argument checks (P = 1: nothing to hang on) ---------------------------------------------

TEST(AggregateErrors, NamesWhatIsWrong) {
  auto comms = make_local_group(1, 5s);
  Communicator& comm = *comms[0];
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  auto c = tern::make_compressor(o, test_layout());
  const std::vector<Tensor> grads = local_grads(*c, 0, 1, 0);
  Tensor out = Tensor::empty({c->total()});

  EXPECT_EQ(error_of([&] { aggregate(*c, comm, grads, 0, out, {}); }), "");
  // A negative chunk size, refused whatever the path.
  AggregateOptions neg;
  neg.chunk_bytes = -1;
  std::string e = error_of([&] { aggregate(*c, comm, grads, 0, out, neg); });
  EXPECT_NE(e.find("chunk_bytes"), std::string::npos) << e;
  AggregateOptions ag;
  ag.algorithm = Route::allgather;
  EXPECT_EQ(error_of([&] { aggregate(*c, comm, grads, 0, out, ag); }), "");

  e = error_of([&] { aggregate(*c, comm, {}, 0, out, ag); });
  EXPECT_NE(e.find("no local worker gradients"), std::string::npos) << e;
  const std::vector<Tensor> short_grad = {Tensor::zeros({5})};
  e = error_of([&] { aggregate(*c, comm, short_grad, 0, out, ag); });
  EXPECT_NE(e.find("local gradient 0 must be a contiguous f32"), std::string::npos) << e;
  Tensor short_out = Tensor::empty({3});
  e = error_of([&] { aggregate(*c, comm, grads, 0, short_out, ag); });
  EXPECT_NE(e.find("out must be a contiguous f32"), std::string::npos) << e;
  e = error_of([&] { aggregate_local(*c, {}, 0, out); });
  EXPECT_NE(e.find("no worker gradients"), std::string::npos) << e;
}

}  // namespace
}  // namespace tg::tern
