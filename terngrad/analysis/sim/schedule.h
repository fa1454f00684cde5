// The message schedule of one training iteration's gradient exchange, for the simulator
// (terngrad/analysis/sim/simulate.h, `terngrad perf-model --simulate`): which rank sends which rank
// how many bytes, in which phase, for every bucket and chunk, and when each bucket becomes ready.
//
// Nothing here is a second description of the exchange. The pieces come from the code that the
// communicators execute:
//   buckets     comm::make_buckets (comm/buckets.h), the Reducer's, with its default caps;
//   TernGrad    per bucket, round 1 (every rank's scalers to every rank: the allgather of
//               share_meta, terngrad/exchange/aggregate.cpp), then the chosen route's plan:
//               tern::plan_bucket and tern::chunk_messages (terngrad/exchange/plan.h), chunk by
//               chunk; `auto` asks tern::choose_bucket_route per bucket, as aggregate does;
//   fp32, fp16  our exact elementwise path (tern::elementwise_messages, aggregate.h): the
//               allgather, the reduce-scatter + allgather, or the fold along the nodes, as that
//               path picks per bucket;
//   fp32:ring,  the ring allreduce every DDP-like system runs (Gloo's ring, NCCL's ring): 2 (P - 1)
//   fp16:ring   steps, each rank sending one of the P segments of the bucket to its neighbour per
//               step, the segments cut as comm/gloo_wire.h counts them.
// Phases: a phase's messages are in flight together; a rank starts its phase k + 1 once it has
// sent and received all of its phase-k messages (the data dependency of every route here).
//
// Readiness: backward produces the last layers' gradients first. A bucket is ready when its
// slots' backward has run: with `backward_s` > 0 the backward pass is spread over the tensors in
// proportion to their elements (an assumption: a convolution's backward costs more per weight
// than a fully connected layer's), after `forward_s`; with both 0 every bucket is ready at once
// (what bench_comm times).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/topology.h"
#include "terngrad/exchange/plan.h"
#include "terngrad/exchange/route.h"

namespace tg::sim {

// What travels: fp32 or fp16 by ring allreduce, or TernGrad by one of its exact routes.
enum class Gradients : uint8_t { fp32, fp16, terngrad };

struct Method {
  Gradients gradients = Gradients::fp32;
  // fp32, fp16: automatic (our exact path) or ring; terngrad: a bucket route or automatic
  tern::Route route = tern::Route::automatic;
  // "fp32", "fp16" (our exact path), "fp32:ring", "fp16:ring", "terngrad" (= terngrad:auto),
  // "terngrad:ROUTE" (ps, allgather, packed-allreduce, sharded, hierarchical, auto). Throws
  // listing the known names.
  static Method parse(std::string_view text);
  std::string name() const;        // "fp32", "fp16", "terngrad"
  std::string route_name() const;  // "auto", "ring", or the TernGrad route asked for
};

struct ScheduleOptions {
  int ranks = 1;
  comm::NodeLayout nodes = {};  // unknown: every rank a node of its own
  tern::PackFormat format = tern::PackFormat::two_bit;
  int64_t chunk_bytes = int64_t{2} << 20;    // TernGrad: AggregateOptions::chunk_bytes
  int64_t bucket_bytes = int64_t{25} << 20;  // ReducerOptions: bucket_mb = 25
  int64_t first_bucket_bytes = int64_t{1} << 20;
  double forward_s = 0, backward_s = 0;  // readiness (above); both 0: all ready at once
};

// One phase of a chunk: its messages (src != dst, bytes > 0).
using Phase = std::vector<tern::Message>;

struct Chunk {
  std::vector<Phase> phases;
};

struct Bucket {
  size_t first_slot = 0, last_slot = 0;  // the layout's slots [first, last)
  int64_t elements = 0;
  double ready_s = 0;
  tern::Route route = tern::Route::ring;  // the route taken (auto resolved)
  std::vector<Chunk> chunks;
};

struct Schedule {
  int ranks = 1;
  Method method;
  std::vector<Bucket> buckets;  // in launch order
  int64_t messages = 0;         // over everything
  uint64_t sent_max = 0;        // bytes the busiest rank sends in the iteration
};

// The schedule of `method` for a net whose parameter tensors have `tensor_numel` elements
// (layout order). Throws on an empty layout, ranks < 1, a node layout of another size, or a
// TernGrad route that is not a bucket route.
Schedule build_schedule(const std::vector<int64_t>& tensor_numel, const Method& method,
                        const ScheduleOptions& options);

}  // namespace tg::sim
