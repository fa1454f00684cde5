// The simulator's schedule (terngrad/analysis/sim/schedule.h) is the exchange's own: per rank, the
// bytes its messages carry are what the cost model and Gloo's wire counts say the real exchange
// moves.
#include "terngrad/analysis/sim/schedule.h"

#include <gtest/gtest.h>

#include "comm/buckets.h"
#include "comm/gloo_wire.h"
#include "nn/core/error.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::sim {
namespace {

// A small net's layout: a conv-like stack and a large classifier (several buckets at 1 MB).
const std::vector<int64_t> kLayout = {1500, 20, 25000, 50, 400000, 500, 5000, 10};

std::vector<uint64_t> sent_per_rank(const Schedule& s, bool skip_scalers) {
  std::vector<uint64_t> sent(static_cast<size_t>(s.ranks), 0);
  for (const Bucket& b : s.buckets)
    for (size_t c = 0; c < b.chunks.size(); ++c)
      for (size_t k = 0; k < b.chunks[c].phases.size(); ++k) {
        if (skip_scalers && c == 0 && k == 0) continue;  // round 1: the scalers
        for (const tern::Message& m : b.chunks[c].phases[k]) {
          EXPECT_NE(m.src, m.dst);
          EXPECT_GT(m.bytes, 0);
          sent[static_cast<size_t>(m.src)] += static_cast<uint64_t>(m.bytes);
        }
      }
  return sent;
}

std::vector<comm::SlotRange> buckets_of(const std::vector<int64_t>& numel) {
  std::vector<comm::GradSlot> layout;
  int64_t at = 0;
  for (int64_t n : numel) {
    layout.push_back({"", at, n});
    at += n;
  }
  return comm::make_buckets(layout, int64_t{25} << 20, int64_t{1} << 20);
}

TEST(SimSchedule, RingIsGlooRingPerBucket) {
  for (int p : {2, 3, 4, 7}) {
    for (const char* name : {"fp32:ring", "fp16:ring"}) {
      ScheduleOptions o;
      o.ranks = p;
      const Schedule s = build_schedule(kLayout, Method::parse(name), o);
      const uint64_t e = std::string(name) == "fp32:ring" ? 4 : 2;
      const auto buckets = buckets_of(kLayout);
      ASSERT_EQ(s.buckets.size(), buckets.size());
      std::vector<uint64_t> want(static_cast<size_t>(p), 0);
      for (const Bucket& b : s.buckets) {
        EXPECT_EQ(b.chunks.size(), 1u);
        EXPECT_EQ(b.chunks[0].phases.size(), static_cast<size_t>(2 * (p - 1)));
        for (int r = 0; r < p; ++r)
          want[static_cast<size_t>(r)] +=
              comm::gloo_wire::allreduce(static_cast<uint64_t>(b.elements) * e, e, p, r).sent;
      }
      EXPECT_EQ(sent_per_rank(s, false), want) << name << " P = " << p;
    }
  }
}

// Our exact fp32/fp16: per bucket the path aggregate.h takes (allgather at P = 2, reduce-scatter
// + allgather, the fold along the nodes), its messages elementwise_messages' (which the
// aggregate tests check against the communicators' counters).
TEST(SimSchedule, ExactFloatsTakeTheElementwisePath) {
  struct Case {
    int p;
    comm::NodeLayout nodes;
    tern::Route route;  // of the big bucket
  };
  for (const Case& c :
       {Case{2, {}, tern::Route::allgather}, Case{4, {}, tern::Route::reduce_scatter},
        Case{8, comm::NodeLayout::blocks(8, 4), tern::Route::hierarchical}}) {
    for (const char* name : {"fp32", "fp16"}) {
      ScheduleOptions o;
      o.ranks = c.p;
      o.nodes = c.nodes;
      o.chunk_bytes = 100000;
      const Schedule s = build_schedule(kLayout, Method::parse(name), o);
      const int64_t e = std::string(name) == "fp32" ? 4 : 2;
      std::vector<uint64_t> want(static_cast<size_t>(c.p), 0);
      bool saw = false;
      for (const Bucket& b : s.buckets) {
        if (b.elements >= 400000) {
          EXPECT_EQ(b.route, c.route) << name << " P = " << c.p;
          saw = true;
        }
        for (const tern::Message& m :
             tern::elementwise_messages(c.nodes, c.p, 1, e, b.elements, o.chunk_bytes))
          want[static_cast<size_t>(m.src)] += static_cast<uint64_t>(m.bytes);
      }
      EXPECT_TRUE(saw);
      EXPECT_EQ(sent_per_rank(s, false), want) << name << " P = " << c.p;
    }
  }
  EXPECT_EQ(Method::parse("fp32").route_name(), "auto");
  EXPECT_EQ(Method::parse("fp16:ring").route_name(), "ring");
  EXPECT_THROW(Method::parse("fp32:sharded"), Error);
}

TEST(SimSchedule, TernGradRoutesAreTheirPlansPlusTheScalers) {
  for (int p : {2, 3, 4, 8}) {
    for (tern::Route route : tern::kBucketRoutes) {
      ScheduleOptions o;
      o.ranks = p;
      o.nodes = comm::NodeLayout::blocks(p, 2);
      o.chunk_bytes = 20000;  // several chunks for the big tensor
      Method m;
      m.gradients = Gradients::terngrad;
      m.route = route;
      const Schedule s = build_schedule(kLayout, m, o);
      std::vector<uint64_t> want(static_cast<size_t>(p), 0);
      for (const Bucket& b : s.buckets) {
        EXPECT_EQ(b.route, route);
        tern::TernaryBucketShape shape;
        shape.numel.assign(kLayout.begin() + static_cast<int64_t>(b.first_slot),
                           kLayout.begin() + static_cast<int64_t>(b.last_slot));
        shape.ranks = p;
        shape.backend = "gloo";
        shape.chunk_bytes = o.chunk_bytes;
        shape.nodes = o.nodes;
        for (int r = 0; r < p; ++r)
          want[static_cast<size_t>(r)] += tern::ternary_bucket_cost(route, shape, r).rank.sent;
        // Round 1 first: every rank's scalers (4 bytes a tensor) to every other rank.
        const Phase& meta = b.chunks[0].phases[0];
        EXPECT_EQ(meta.size(), static_cast<size_t>(p * (p - 1)));
        for (const tern::Message& msg : meta)
          EXPECT_EQ(msg.bytes, static_cast<int64_t>(4 * (b.last_slot - b.first_slot)));
      }
      EXPECT_EQ(sent_per_rank(s, true), want) << tern::name(route) << " P = " << p;
    }
  }
}

TEST(SimSchedule, AutoPicksPerBucketAsTheExchangeDoes) {
  ScheduleOptions o;
  o.ranks = 8;
  o.nodes = comm::NodeLayout::blocks(8, 4);
  const Schedule s = build_schedule(kLayout, Method::parse("terngrad"), o);
  for (const Bucket& b : s.buckets) {
    tern::TernaryBucketShape shape;
    shape.numel.assign(kLayout.begin() + static_cast<int64_t>(b.first_slot),
                       kLayout.begin() + static_cast<int64_t>(b.last_slot));
    shape.ranks = 8;
    shape.backend = "gloo";
    shape.chunk_bytes = o.chunk_bytes;
    shape.nodes = o.nodes;
    EXPECT_EQ(b.route, tern::choose_bucket_route(shape));
  }
}

TEST(SimSchedule, BucketsBecomeReadyDuringBackward) {
  ScheduleOptions o;
  o.ranks = 2;
  o.forward_s = 0.1;
  o.backward_s = 0.2;
  const Schedule s = build_schedule(kLayout, Method::parse("fp32:ring"), o);
  ASSERT_GE(s.buckets.size(), 2u);
  double last = 0;
  for (const Bucket& b : s.buckets) {
    EXPECT_GT(b.ready_s, o.forward_s);
    EXPECT_GE(b.ready_s, last);  // launch order is backward's order
    last = b.ready_s;
  }
  // The bucket holding the first tensor is ready when backward ends.
  EXPECT_NEAR(last, 0.3, 1e-12);
  const Schedule at_once = build_schedule(kLayout, Method::parse("fp32"), ScheduleOptions{2});
  for (const Bucket& b : at_once.buckets) EXPECT_EQ(b.ready_s, 0.0);
}

TEST(SimSchedule, RejectsBadInput) {
  EXPECT_THROW(Method::parse("fp64"), Error);
  EXPECT_THROW(Method::parse("terngrad:ring"), Error);
  EXPECT_EQ(Method::parse("terngrad:sharded").route, tern::Route::sharded);
  EXPECT_EQ(Method::parse("terngrad").route_name(), "auto");
  EXPECT_THROW(build_schedule({}, Method::parse("fp32"), ScheduleOptions{2}), Error);
  EXPECT_THROW(build_schedule({10, 0}, Method::parse("fp32"), ScheduleOptions{2}), Error);
  ScheduleOptions wrong;
  wrong.ranks = 4;
  wrong.nodes = comm::NodeLayout::blocks(6, 2);
  EXPECT_THROW(build_schedule(kLayout, Method::parse("terngrad"), wrong), Error);
}

}  // namespace
}  // namespace tg::sim
