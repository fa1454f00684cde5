// The exact ternary routes: the plan's cost model against hand-computed figures, `auto` never
// beaten on the slowest link, and every route on the local communicator (P = 1..6 rank threads,
// W = 1..3 workers each, n from 0 to 100003, node layouts of one node, every rank alone, blocks and
// interleaved nodes) yielding bit-identical accumulators equal to the plain sum of the unpacked
// codes, with exactly the wire bytes the plan predicts, per rank and across nodes. Buckets
// (several segments in one call, cut into chunks, decoded on one thread while the next chunk
// travels on another) against the same per-segment specification. One run over Gloo (real TCP on
// 127.0.0.1) checks the same against Gloo's schedules, a bucket included.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "comm/wire_model.h"
#include "nn/core/philox.h"
#include "nn/core/worker_thread.h"
#include "terngrad/exchange/ternary_collectives.h"
#include "terngrad/ternary_kernels.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"
#include "tests/testing/sanitizer.h"

namespace tg::tern {
namespace {

using namespace tg::comm;

using namespace std::chrono_literals;
using tern::PackFormat;

constexpr uint64_t kSeed = 2017;

// Worker g's packed codes: a random gradient (normal-ish, from Philox) ternarized with the
// scaler at 0.6 max|g|, so some elements clip and many are 0.
std::vector<uint8_t> worker_codes(int64_t g, int64_t n, PackFormat f) {
  std::vector<float> grad(n);
  float max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float u1 = uniform01(philox_word(kSeed, 1000 + g, 2 * i)) + 1e-7f;
    const float u2 = uniform01(philox_word(kSeed, 1000 + g, 2 * i + 1));
    grad[i] = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    max_abs = std::max(max_abs, std::fabs(grad[i]));
  }
  std::vector<uint8_t> out(tern::packed_bytes(f, n));
  tern::ternarize_pack_cpu(grad.data(), n, 0.6f * max_abs, kSeed,
                           rng_stream(RngPurpose::ternarize, 0, g, 0), f, out.data());
  return out;
}

// The specification: decode every code by hand and add.
int code_at(const std::vector<uint8_t>& packed, int64_t i, PackFormat f) {
  if (f == PackFormat::two_bit) return ((packed[i / 4] >> (2 * (i % 4))) & 3) - 1;
  int v = packed[i / 5];
  for (int64_t d = 0; d < i % 5; ++d) v /= 3;
  return v % 3 - 1;
}

struct Problem {
  int p, w;
  int64_t n;
  PackFormat f;
  std::vector<std::vector<uint8_t>> rank_codes;  // [rank] = W vectors back to back
  std::vector<int32_t> baseline, expected;       // acc before, and baseline + sum of codes
};

Problem make_problem(int p, int w, int64_t n, PackFormat f) {
  Problem pr{p,
             w,
             n,
             f,
             std::vector<std::vector<uint8_t>>(p),
             std::vector<int32_t>(n),
             std::vector<int32_t>(n)};
  for (int64_t i = 0; i < n; ++i) pr.baseline[i] = pr.expected[i] = static_cast<int32_t>(i % 7) - 3;
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < w; ++k) {
      const std::vector<uint8_t> c = worker_codes(static_cast<int64_t>(r) * w + k, n, f);
      pr.rank_codes[r].insert(pr.rank_codes[r].end(), c.begin(), c.end());
      for (int64_t i = 0; i < n; ++i) pr.expected[i] += code_at(c, i, f);
    }
  }
  return pr;
}

// Every route a test runs, `auto` last.
constexpr Route kRoutes[] = {Route::ps,      Route::allgather,    Route::packed_allreduce,
                             Route::sharded, Route::hierarchical, Route::automatic};

// Node layouts worth running a P-rank group under (the hierarchical route's nodes and the cost
// model's slow links): none known, one node, every rank alone, blocks of 2 and 3, ranks
// interleaved across two nodes.
std::vector<NodeLayout> layouts(int p) {
  std::vector<NodeLayout> out = {NodeLayout{}, NodeLayout::single(p), NodeLayout::each_alone(p)};
  if (p >= 3) out.push_back(NodeLayout::blocks(p, 2));
  if (p >= 4) out.push_back(NodeLayout::blocks(p, 3));
  if (p >= 3) {
    NodeLayout even_odd;
    for (int r = 0; r < p; ++r) even_odd.node_of.push_back(r % 2);
    out.push_back(even_odd);
  }
  return out;
}

// Rank r's call took the route `asked` resolves to and moved the bytes its plan says.
void expect_planned(const TernaryResult& got, Route asked, const TernaryBucketShape& shape, int r,
                    const std::string& what) {
  const Route ran = asked == Route::automatic ? choose_bucket_route(shape) : asked;
  EXPECT_EQ(got.route, ran) << what;
  const TernaryCost cost = ternary_bucket_cost(ran, shape, r);
  EXPECT_EQ(got.wire.sent, cost.rank.sent) << what << " rank " << r;
  EXPECT_EQ(got.wire.received, cost.rank.received) << what << " rank " << r;
  if (shape.nodes.nodes() > 1) {
    EXPECT_EQ(got.inter.sent, cost.rank_inter.sent) << what << " rank " << r;
    EXPECT_EQ(got.inter.received, cost.rank_inter.received) << what << " rank " << r;
  }
}

// Runs `route` on a fresh local group and checks result, choice and wire bytes on every rank.
void check_local(const Problem& pr, Route route, const NodeLayout& nodes = {}) {
  const std::string what =
      tg::detail::concat(name(route), " P=", pr.p, " W=", pr.w, " n=", pr.n,
                         pr.f == PackFormat::base3 ? " base3" : " two_bit", " nodes ", nodes.str());
  auto comms = make_local_group(pr.p, 30s);
  std::vector<std::vector<int32_t>> accs(pr.p, pr.baseline);
  std::vector<TernaryResult> results(pr.p);
  TernaryPipeline pipeline;
  pipeline.nodes = nodes;
  const auto errors = run_ranks(pr.p, [&](int r) {
    results[r] = ternary_aggregate_bucket(*comms[r], route, pr.rank_codes[r].data(), pr.w, {pr.n},
                                          pr.f, {accs[r].data()}, pipeline);
  });
  TernaryBucketShape shape{{pr.n}, pr.p, pr.w, pr.f, "local"};
  shape.nodes = nodes;
  for (int r = 0; r < pr.p; ++r) {
    ASSERT_EQ(errors[r], "") << what << " rank " << r;
    ASSERT_EQ(accs[r], pr.expected) << what << " rank " << r;
    expect_planned(results[r], route, shape, r, what);
    EXPECT_EQ(comms[r]->wire().sent, results[r].wire.sent) << what << " rank " << r;
  }
}

TEST(TernaryRoutes, NamesAndTheRoutesABucketTakes) {
  for (const auto& e : kAlgorithms) EXPECT_EQ(name(e.value), e.name);
  for (const auto& e : kRouteNames) EXPECT_EQ(name(e.value), e.name);
  EXPECT_EQ(std::string(name(static_cast<Route>(200))), "?");
  for (Route r : kBucketRoutes) EXPECT_TRUE(is_bucket_route(r)) << name(r);
  for (Route r :
       {Route::automatic, Route::ring, Route::message, Route::reduce_scatter, Route::gathered})
    EXPECT_FALSE(is_bucket_route(r)) << name(r);
  EXPECT_EQ(bucket_route_for(Route::ring), Route::automatic);
  EXPECT_EQ(bucket_route_for(Route::hierarchical), Route::hierarchical);
  EXPECT_THROW(bucket_route_for(Route::gathered), Error);
  EXPECT_EQ(parse_enum(kAlgorithms, "sharded", "x"), Route::sharded);
  try {
    parse_enum(kAlgorithms, "tree", "comm.algorithm");
    ADD_FAILURE() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hierarchical"), std::string::npos) << e.what();
  }
}

TEST(TernaryCostModel, HandComputedFigures) {
  // n = 1000 two_bit: B = 250 bytes. P = 4, W = 2: N = 8, L = 17, 15 digits per word, K = 8 * 67.
  const TernaryBucketShape s{{1000}, 4, 2};
  const uint64_t k = 8 * 67;
  const TernaryCost ps0 = ternary_bucket_cost(Route::ps, s, 0);
  EXPECT_EQ(ps0.rank.sent, 3 * k);
  EXPECT_EQ(ps0.rank.received, 3u * 500);
  EXPECT_EQ(ps0.busiest, 3 * k + 3u * 500);
  const TernaryCost ps2 = ternary_bucket_cost(Route::ps, s, 2);
  EXPECT_EQ(ps2.rank.sent, 500u);
  EXPECT_EQ(ps2.rank.received, k);
  EXPECT_EQ(ps2.busiest, ps0.busiest);
  const TernaryCost ag = ternary_bucket_cost(Route::allgather, s, 1);
  EXPECT_EQ(ag.rank.sent, 3u * 500);
  EXPECT_EQ(ag.rank.received, 3u * 500);
  const TernaryCost pa = ternary_bucket_cost(Route::packed_allreduce, s, 3);
  EXPECT_EQ(pa.rank.sent, 2 * 3 * k / 4);
  EXPECT_EQ(pa.busiest, 2 * (2 * 3 * k / 4));
  // Sharded: shards of 62, 63, 62, 63 bytes (248, 252, 248, 252 elements). A rank sends each
  // other owner its two workers' sum (base 5, 27 digits per word: 10 words) and gets back the
  // owners' final sums (base 17: 17 words each).
  const TernaryCost sh = ternary_bucket_cost(Route::sharded, s, 0);
  EXPECT_EQ(sh.rank.sent, 3u * 80 + 3u * 136);
  EXPECT_EQ(sh.rank.received, 3u * 80 + 3u * 136);
  EXPECT_EQ(sh.busiest, 2u * (3 * 80 + 3 * 136));
  EXPECT_EQ(choose_bucket_route(s), Route::sharded);
  // Two nodes of two ranks: node sums (base 9, 20 digits: 13 words) cross once per foreign
  // shard; rank 0 sums shard 2 for its node (foreign shards 2, 3 go to ranks 0, 1 in turn).
  TernaryBucketShape two = s;
  two.nodes = NodeLayout::blocks(4, 2);
  const TernaryCost h0 = ternary_bucket_cost(Route::hierarchical, two, 0);
  // A: rank 0 sends rank 1 its codes of shards 1 and 3 (2 x (63 + 63)); gets theirs of 0 and 2.
  // C: node sum of shard 2 to rank 2 (104 bytes); gets node 1's sum of shard 0 (from rank 2).
  // E: its final sums to node 1's owner of shard 0 (rank 2); gets shard 2's from rank 2.
  // F: the final sums of shards 0 and 2 to rank 1; gets those of 1 and 3.
  EXPECT_EQ(h0.rank.sent, 2u * 126 + 104 + 136 + 272);
  EXPECT_EQ(h0.rank.received, 2u * 124 + 104 + 136 + 272);
  EXPECT_EQ(h0.rank_inter.sent, 104u + 136);
  EXPECT_EQ(h0.rank_inter.received, 104u + 136);
  // Across the boundary each node sends 2 node sums and 2 final sums and receives as many.
  EXPECT_EQ(h0.busiest_link, 2u * (2 * 104 + 2 * 136));
  EXPECT_EQ(choose_bucket_route(two), Route::hierarchical);
  EXPECT_THROW(ternary_bucket_cost(Route::automatic, s, 0), Error);
  EXPECT_THROW(ternary_bucket_cost(Route::ps, s, 4), Error);
  EXPECT_THROW(ternary_bucket_cost(Route::ps, TernaryBucketShape{{-1}, 2, 1}, 0), Error);
  EXPECT_THROW(ternary_bucket_cost(Route::ps, TernaryBucketShape{{10}, 2, 0}, 0), Error);
  TernaryBucketShape bad_layout = s;
  bad_layout.nodes = NodeLayout::blocks(3, 1);
  EXPECT_THROW(ternary_bucket_cost(Route::ps, bad_layout, 0), Error);
}

TEST(TernaryCostModel, AutoIsNeverBeatenOnTheSlowestLink) {
  const int64_t n = 1 << 20;
  // W = 1: allgather at P = 2 (two bits per code beat sending half the codes plus half the sums
  // back), the sharded reduce-scatter from P = 3; with nodes, the hierarchical route.
  EXPECT_EQ(choose_bucket_route({{n}, 2, 1}), Route::allgather);
  EXPECT_EQ(choose_bucket_route({{n}, 3, 1}), Route::sharded);
  EXPECT_EQ(choose_bucket_route({{n}, 16, 1}), Route::sharded);
  EXPECT_EQ(choose_bucket_route({{n}, 1, 3}), Route::allgather);  // all free
  TernaryBucketShape nodes{{n}, 8, 1};
  nodes.nodes = NodeLayout::blocks(8, 4);
  EXPECT_EQ(choose_bucket_route(nodes), Route::hierarchical);
  // The choice is the minimum of the busiest link's bytes, then the busiest rank's.
  for (int p = 1; p <= 12; ++p)
    for (int w : {1, 2, 4})
      for (const NodeLayout& l : layouts(p)) {
        TernaryBucketShape s{{12345, 7, 301}, p, w};
        s.nodes = l;
        const TernaryCost c = ternary_bucket_cost(choose_bucket_route(s), s, 0);
        for (Route r : kBucketRoutes) {
          const TernaryCost other = ternary_bucket_cost(r, s, 0);
          EXPECT_LE(c.busiest_link, other.busiest_link)
              << "P=" << p << " W=" << w << " " << l.str() << " " << name(r);
          if (c.busiest_link == other.busiest_link) {
            EXPECT_LE(c.busiest, other.busiest) << "P=" << p << " W=" << w << " " << name(r);
          }
        }
      }
}

// The saving the routes keep as P grows (W = 1, two_bit, one LeNet-sized segment): against a ring
// allreduce of fp32, sent by the busiest rank.
TEST(TernaryCostModel, TheShardedRouteKeepsItsSavingAtScale) {
  const int64_t n = 431080;
  for (int p : {16, 32, 64}) {
    const TernaryBucketShape s{{n}, p, 1};
    const double fp32 = static_cast<double>(comm::wire_model::allreduce(4 * n, p).sent);
    const double ratio =
        fp32 / static_cast<double>(ternary_bucket_cost(Route::sharded, s, 0).rank.sent);
    EXPECT_GE(ratio, p == 16 ? 8.0 : 6.0) << "P=" << p;
    EXPECT_EQ(choose_bucket_route(s), Route::sharded) << "P=" << p;
  }
}

// The main property: every route, every shape, bit-identical and exact.
TEST(TernaryAggregate, AllRoutesExactOnLocalGroups) {
  for (int p = 1; p <= 5; ++p) {
    for (int w = 1; w <= 3; ++w) {
      for (int64_t n : {0, 1, 63, 64, 65, 1000, 100003}) {
        const Problem pr = make_problem(p, w, n, PackFormat::two_bit);
        for (Route a : kRoutes) {
          check_local(pr, a);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The hierarchical route (and auto) under every node layout, P = 3..6, both formats.
TEST(TernaryAggregate, HierarchicalExactUnderEveryNodeLayout) {
  for (int p = 2; p <= 6; ++p)
    for (int w : {1, 2})
      for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
        const Problem pr = make_problem(p, w, 20011, f);
        for (const NodeLayout& l : layouts(p)) {
          check_local(pr, Route::hierarchical, l);
          check_local(pr, Route::automatic, l);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
}

TEST(TernaryAggregate, Base3CodesToo) {
  for (int p : {2, 3}) {
    const Problem pr = make_problem(p, 2, 1001, PackFormat::base3);
    for (Route a : kRoutes) check_local(pr, a);
  }
}

TEST(TernaryAggregate, RejectsBadArguments) {
  auto comms = make_local_group(1);
  std::vector<uint8_t> codes(4);
  std::vector<int32_t> acc(16);
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::ps, codes.data(), 0, {16},
                                        PackFormat::two_bit, {acc.data()}),
               Error);
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::ps, nullptr, 1, {16}, PackFormat::two_bit,
                                        {acc.data()}),
               Error);
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::ps, codes.data(), 1, {-1},
                                        PackFormat::two_bit, {acc.data()}),
               Error);
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::gathered, codes.data(), 1, {16},
                                        PackFormat::two_bit, {acc.data()}),
               Error);
  TernaryPipeline wrong;
  wrong.nodes = NodeLayout::blocks(2, 1);  // two ranks' layout for a group of one
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::hierarchical, codes.data(), 1, {16},
                                        PackFormat::two_bit, {acc.data()}, wrong),
               Error);
}

// ---- buckets ----------------------------------------------------------------------------------

// S segments of the given sizes; rank r's W worker buckets; the expected accumulators per segment.
struct BucketProblem {
  int p, w;
  std::vector<int64_t> numel;
  PackFormat f;
  std::vector<std::vector<uint8_t>> rank_codes;          // [rank] = W buckets back to back
  std::vector<std::vector<int32_t>> baseline, expected;  // [segment]
};

BucketProblem make_bucket_problem(int p, int w, std::vector<int64_t> numel, PackFormat f) {
  BucketProblem pr{p, w, numel, f, std::vector<std::vector<uint8_t>>(p), {}, {}};
  for (size_t s = 0; s < numel.size(); ++s) {
    std::vector<int32_t> b(numel[s]);
    for (int64_t i = 0; i < numel[s]; ++i) b[i] = static_cast<int32_t>((i + s) % 5) - 2;
    pr.baseline.push_back(b);
    pr.expected.push_back(b);
  }
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < w; ++k) {
      const int64_t g = static_cast<int64_t>(r) * w + k;
      for (size_t s = 0; s < numel.size(); ++s) {
        // A different code vector per segment: offset the worker index.
        const std::vector<uint8_t> c = worker_codes(g + 100 * static_cast<int64_t>(s), numel[s], f);
        pr.rank_codes[r].insert(pr.rank_codes[r].end(), c.begin(), c.end());
        for (int64_t i = 0; i < numel[s]; ++i) pr.expected[s][i] += code_at(c, i, f);
      }
    }
  }
  return pr;
}

// overlap: each rank issues its chunks' collectives on a thread of its own.
void check_bucket(const BucketProblem& pr, Route route, int64_t chunk_bytes, bool overlap,
                  const NodeLayout& nodes = {}) {
  const std::string what =
      tg::detail::concat(name(route), " P=", pr.p, " W=", pr.w, " S=", pr.numel.size(), " chunk ",
                         chunk_bytes, overlap ? " overlap" : " serial",
                         pr.f == PackFormat::base3 ? " base3" : " two_bit", " nodes ", nodes.str());
  auto comms = make_local_group(pr.p, 30s);
  std::vector<std::vector<std::vector<int32_t>>> accs(pr.p, pr.baseline);
  std::vector<TernaryResult> results(pr.p);
  const auto errors = run_ranks(pr.p, [&](int r) {
    std::vector<int32_t*> ptrs;
    for (auto& a : accs[r]) ptrs.push_back(a.data());
    WorkerThread collectives;
    const TernaryPipeline pipeline{chunk_bytes, overlap ? &collectives : nullptr, nodes};
    results[r] = ternary_aggregate_bucket(*comms[r], route, pr.rank_codes[r].data(), pr.w, pr.numel,
                                          pr.f, ptrs, pipeline);
  });
  const TernaryBucketShape shape{pr.numel, pr.p, pr.w, pr.f, "local", chunk_bytes, nodes};
  for (int r = 0; r < pr.p; ++r) {
    ASSERT_EQ(errors[r], "") << what << " rank " << r;
    ASSERT_EQ(accs[r], pr.expected) << what << " rank " << r;
    expect_planned(results[r], route, shape, r, what);
  }
}

TEST(TernaryBucket, EveryRouteChunkAndOverlapExactPerSegment) {
  // Odd sizes (codes end mid-byte), empty segments, one segment over many chunks; chunks of one
  // byte leave most shards empty. One-byte chunks (~1,000 rounds a bucket) are most of the
  // time: under a sanitizer (tests/testing/sanitizer.h) they run at P = 3 only, and each
  // (format, P, W, route) takes a third of the ten (chunk, overlap) pipelines in turn, so every
  // pipeline still meets every format, P and W.
  const std::vector<int64_t> numel = {1, 0, 7, 63, 64, 65, 0, 999, 5, 3001, 2};
  const int64_t chunks[] = {0, 1, 13, 100, int64_t{1} << 20};
  const int routes = static_cast<int>(std::size(kRoutes));
  for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
    for (int p : {1, 2, 3, 4}) {
      for (int w : {1, 2}) {
        const BucketProblem pr = make_bucket_problem(p, w, numel, f);
        const int base = ((f == PackFormat::base3) * 4 + p - 1) * 2 + w - 1;
        for (int ci = 0; ci < 5; ++ci)
          for (bool overlap : {false, true})
            for (int ai = 0; ai < routes; ++ai) {
              const int64_t chunk = chunks[ci];
              const Route a = kRoutes[ai];
              if (tg::testing::kSanitized && chunk == 1 && p != 3) continue;
              if (tg::testing::kSanitized && (ci * 2 + overlap + base + ai) % 3 != 0) continue;
              check_bucket(
                  pr, a, chunk, overlap,
                  a == Route::hierarchical && p >= 3 ? NodeLayout::blocks(p, 2) : NodeLayout{});
              if (::testing::Test::HasFatalFailure()) return;
            }
      }
    }
  }
}

TEST(TernaryBucket, CostModelOfChunks) {
  for (int p : {2, 4, 8}) {
    for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
      // Chunked allgather moves the same bytes; sum words at most one word more per piece.
      const TernaryBucketShape whole{{5000, 3, 70001}, p, 2, f, "local", 0};
      TernaryBucketShape chunked = whole;
      chunked.chunk_bytes = 1000;
      EXPECT_EQ(ternary_bucket_cost(Route::allgather, chunked, 0).busiest,
                ternary_bucket_cost(Route::allgather, whole, 0).busiest);
      EXPECT_EQ(bucket_code_bytes(whole.numel, f),
                static_cast<int64_t>(tern::packed_bytes(f, 5000) + tern::packed_bytes(f, 3) +
                                     tern::packed_bytes(f, 70001)));
      for (Route r : {Route::packed_allreduce, Route::sharded}) {
        const uint64_t a = ternary_bucket_cost(r, whole, 0).rank.sent;
        const uint64_t b = ternary_bucket_cost(r, chunked, 0).rank.sent;
        EXPECT_GE(b, a) << name(r);
        // <= 2 pieces per chunk (per shard), ~20 chunks, one extra word each, to P - 1 peers.
        EXPECT_LE(b, a + 2 * 8 * 2 * 25 * static_cast<uint64_t>(p)) << name(r);
      }
    }
  }
  EXPECT_THROW(ternary_bucket_cost(Route::ps, {{10, -1}, 2, 1}, 0), Error);
  TernaryBucketShape neg{{10}, 2, 1};
  neg.chunk_bytes = -5;
  EXPECT_THROW(ternary_bucket_cost(Route::ps, neg, 0), Error);
}

// The plan's messages: what a rank sends is what its peer receives, no message is empty, and the
// totals are the cost model's.
TEST(TernaryBucket, PlanMessagesAreConsistent) {
  const TernaryBucketShape base{{5000, 3, 70001}, 6, 2, PackFormat::two_bit, "local", 4000};
  for (const NodeLayout& l : layouts(6)) {
    TernaryBucketShape s = base;
    s.nodes = l;
    const Plan plan = plan_bucket(s.numel, s.format, s.chunk_bytes);
    for (Route r : kBucketRoutes) {
      std::vector<uint64_t> sent(6, 0);
      for (size_t c = 0; c < plan.chunks.size(); ++c)
        for (const Message& m : chunk_messages(r, s, plan, c)) {
          EXPECT_GT(m.bytes, 0) << name(r);
          EXPECT_NE(m.src, m.dst) << name(r);
          sent[static_cast<size_t>(m.src)] += static_cast<uint64_t>(m.bytes);
        }
      for (int q = 0; q < 6; ++q)
        EXPECT_EQ(sent[static_cast<size_t>(q)], ternary_bucket_cost(r, s, q).rank.sent)
            << name(r) << " " << l.str();
    }
  }
}

TEST(TernaryBucket, RejectsBadArguments) {
  auto comms = make_local_group(1);
  std::vector<uint8_t> codes(8);
  std::vector<int32_t> a(16), b(16);
  // One accumulator for two segments.
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::ps, codes.data(), 1, {16, 16},
                                        PackFormat::two_bit, {a.data()}),
               Error);
  EXPECT_THROW(ternary_aggregate_bucket(*comms[0], Route::ps, codes.data(), 1, {16, 16},
                                        PackFormat::two_bit, {a.data(), nullptr}),
               Error);
  EXPECT_NO_THROW(ternary_aggregate_bucket(*comms[0], Route::ps, codes.data(), 1, {16, 16},
                                           PackFormat::two_bit, {a.data(), b.data()}));
}

// Over Gloo (TCP on 127.0.0.1, ranks as threads): same sums, and the wire bytes Gloo's schedules
// give (the cost model with backend "gloo").
TEST(TernaryAggregate, GlooMatchesItsCostModel) {
  testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  const int p = 3, w = 2;
  const Problem pr = make_problem(p, w, 5003, PackFormat::two_bit);
  int group = 0;
  const NodeLayout nodes = NodeLayout::blocks(p, 2);
  for (Route a : kRoutes) {
    const std::string prefix = "ternary" + std::to_string(group++);
    std::vector<std::vector<int32_t>> accs(p, pr.baseline);
    std::vector<TernaryResult> results(p);
    const auto errors = run_ranks(p, [&](int r) {
      auto store = open_store(url, 20s);
      auto comm = make_communicator(gloo_loopback(r, p, 20s), *store, prefix);
      TernaryPipeline pipeline;
      pipeline.nodes = nodes;
      results[r] = ternary_aggregate_bucket(*comm, a, pr.rank_codes[r].data(), w, {pr.n}, pr.f,
                                            {accs[r].data()}, pipeline);
    });
    TernaryBucketShape shape{{pr.n}, p, w, pr.f, "gloo"};
    shape.nodes = nodes;
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(errors[r], "") << name(a) << " rank " << r;
      EXPECT_EQ(accs[r], pr.expected) << name(a) << " rank " << r;
      const TernaryCost cost = ternary_bucket_cost(results[r].route, shape, r);
      EXPECT_EQ(results[r].wire.sent, cost.rank.sent) << name(a) << " rank " << r;
      EXPECT_EQ(results[r].wire.received, cost.rank.received) << name(a) << " rank " << r;
    }
  }
  // A bucket in chunks, collectives on the second thread, over TCP.
  const BucketProblem bp = make_bucket_problem(p, w, {5003, 17, 0, 20001}, PackFormat::base3);
  const int64_t chunk_bytes = 777;
  for (Route a : kBucketRoutes) {
    const std::string prefix = "bucket" + std::to_string(group++);
    std::vector<std::vector<std::vector<int32_t>>> accs(p, bp.baseline);
    std::vector<TernaryResult> results(p);
    const auto errors = run_ranks(p, [&](int r) {
      auto store = open_store(url, 20s);
      auto comm = make_communicator(gloo_loopback(r, p, 20s), *store, prefix);
      std::vector<int32_t*> ptrs;
      for (auto& v : accs[r]) ptrs.push_back(v.data());
      WorkerThread collectives;
      results[r] = ternary_aggregate_bucket(*comm, a, bp.rank_codes[r].data(), w, bp.numel, bp.f,
                                            ptrs, {chunk_bytes, &collectives, nodes});
    });
    const TernaryBucketShape shape{bp.numel, p, w, bp.f, "gloo", chunk_bytes, nodes};
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(errors[r], "") << "bucket " << name(a) << " rank " << r;
      EXPECT_EQ(accs[r], bp.expected) << "bucket " << name(a) << " rank " << r;
      const TernaryCost cost = ternary_bucket_cost(a, shape, r);
      EXPECT_EQ(results[r].wire.sent, cost.rank.sent) << "bucket " << name(a) << " rank " << r;
      EXPECT_EQ(results[r].wire.received, cost.rank.received) << "bucket " << name(a);
    }
  }
}

}  // namespace
}  // namespace tg::tern
