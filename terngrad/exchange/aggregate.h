// The aggregation of one data-parallel step: the three rounds of terngrad/compressor.h (meta,
// encode, accumulate + finalize) for one slot range r of the layout (a bucket of comm/reducer.h,
// or the whole layout), with the W workers of each rank local and the messages moved by a
// comm::Communicator. It is the one aggregation path: workers emulated in one process run it over
// the group of one (aggregate_local, comm::make_self_communicator), processes over gloo, nccl or
// a local group; and CompressionHook (terngrad/exchange/comm_hook.h) is how the Reducer calls it.
//
// The contract is exactness: `out` at r's slots is bit-identical on every rank, for every P, to
// the rounds folded over all N = P * W workers in global worker order in one place,
//   shared = max(meta_0, ..., meta_{N-1});  for w = 0..N-1: acc += decode(encode_w(g_w, shared));
//   out = finalize(acc, shared, N),
// for every compressor (except with the opt-in `ring` algorithm below).
//
// The route is chosen from the compressor's own description of its message, Compressor::wire
// (step, r) (terngrad/compressor.h: each slot's coding and bytes); this file never names a
// method. Symbols: P ranks, W workers per rank (the same on every rank), N = P * W; rank q hosts
// the global workers q * W .. q * W + W - 1. M = c.num_meta(r) floats of meta per worker, B =
// c.payload_bytes(step, r) bytes of one worker's message.
//
// Round 1, every path: allgather the W * M local metas (f32), then shared = the elementwise max in
// global worker order (skipped when M = 0; with P = 1 no collective: the metas are this rank's).
//
// The generic path (opaque slots: qsgd, 1-bit, terngrad with per-worker scalers or finer grids;
// ternary slots when the algorithm is allgather; and every method when P = 1 has no other):
//   1. encode: each local worker's message, encoded with its GLOBAL index (1-bit SGD keeps its
//              residual per worker index, so the index must not depend on P);
//   2. gather: allgather all messages at a stride of B4 = B rounded up to 4 bytes (W * B4 bytes
//              from each rank, N * B4 on every rank; the <= 3 zero bytes of padding keep every
//              message 4-byte aligned, as raw floats inside it are read as floats);
//   3. reduce: c.accumulate of all N messages in global order, c.finalize with N workers.
// With P = 1 there is nothing to gather: each message is accumulated as soon as it is encoded,
// in one message buffer (the memory of a single worker's message, whatever W).
// Float sums are added in the fold's order, so they are bit-identical.
// Wire, per rank (ring allgather, comm/wire_model.h): sent = received = (P - 1) W (4 M + B4).
//
// The elementwise path (every slot of r f32, or every slot f16: none, fp16, terngrad in a
// floating-gradient epoch) on P >= 2 ranks: an exact reduce-scatter + allgather. The n elements
// of r are cut into P ranges of C = ceil(n / P) (the last shorter, zero-padded); rank q owns
// range q. With e bytes per element on the wire (4 for f32, 2 for f16):
//   1. reduce-scatter: one alltoall sends each rank's W local messages' range q to rank q
//      (W * e * C bytes per peer; f32 slots are the gradient's floats, read in place);
//   2. rank q adds its range of all N messages in global worker order, acc = 0 + m_0 + ... +
//      m_{N-1} (f16 values widened to f32), and averages it, 0 + acc * (1 / N): per element what
//      the coding's contract (SlotCoding) says the fold does;
//   3. allgather of the P averaged ranges in f32 (4C bytes each) into out.
// Wire, per rank: sent = received = (P - 1) (W e + 4) C: for f32 with W = 1, 2 (P - 1) / P * 4n
// (a ring allreduce's bytes), against (P - 1) 4n for the generic allgather.
// Where allgathering the messages instead, (P - 1) W e n bytes a rank, moves no more
// (gathers_values below: f32 at P = 2, W = 1, the same bytes; f16 at P = 2 with W <= 2 or P = 3
// with W = 1, fewer), the path does that: one phase, not two (each costs a wait for the slowest
// rank), every rank adding all N messages in worker order as step 2 does. The slots' route is
// then Route::allgather.
// Over a known layout of M >= 2 nodes of G >= 2 consecutive ranks, where it sends fewer bytes out
// of the busiest node (node_fold_lanes below), the fold travels instead: the worker-order sum is
// a prefix sum, so node 0's ranks fold their workers' lanes, node 1's continue from those partial
// sums, and so on; the last node averages and sends the averages back (BucketExchange's
// node_fold_path has the rounds). Across node links only 4 bytes an element travel (for M = 2
// each way once, where the flat path sends G (W e + 4) / 2 of them); the same additions in the
// same order, so the same bits. The slots' route is then Route::hierarchical.
// With Route::ring asked and every slot f32: the local workers' sum in order, then a ring allreduce
// (comm::Communicator::allreduce) of it and the average: the ring's bytes and speed, but the
// sum's order depends on P and the ring's chunking, so it is not bit-identical to one process
// (every rank still gets the same bits).
//
// The ternary path (some slot ternary, every other slot f32, any route but allgather asked) on
// P >= 2 ranks: every ternary slot's codes are on one grid, so their integer sums are exact in
// any order. All ternary slots of r travel as ONE bucket (terngrad/exchange/ternary_collectives.h,
// ternary_aggregate_bucket): one worker's bucket is the slots' codes back to back in layout order
// (each WireLayout::slots[t].bytes = packed_bytes(pack, numel) long, so with no f32 slot a
// message is its own bucket), summed into the accumulator's int32 sums slot by slot; the padding
// codes at a slot's end travel but are never decoded. The bucket's route is the one asked for,
// or for `automatic` (and `ring`) the cost model's pick for this bucket, chunking and node layout
// included (terngrad/exchange/plan.h: fewest bytes across the slowest links, then on the busiest
// rank). The bucket is cut into chunks of AggregateOptions::chunk_bytes bytes of one worker's
// codes; on a CPU communicator of P >= 2 ranks, given a collectives thread, that thread runs
// chunk c + 1's collectives while this one decodes chunk c. The f32 slots (exclusion rules)
// travel together in one allgather of a per-worker block (their floats back to back) and are
// accumulated in global worker order like the generic path; then c.finalize scales every integer
// sum once.
// Wire, per rank: the meta allgather, plus ternary_bucket_cost(route, bucket, rank), plus an
// allgather of W * G bytes (G: one worker's f32 slots, 4 bytes per element) when there is one.
//
// Devices: local_grads, out and every buffer live on comm.device() (host for local and gloo,
// the group of one's device, this rank's GPU for nccl); temporaries come from the device's
// caching allocator. The metas are computed on the host (Compressor::local_meta) and staged
// through comm.device().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "nn/core/enum_names.h"
#include "nn/core/tensor.h"
#include "nn/core/worker_thread.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/route.h"
#include "terngrad/exchange/ternary_collectives.h"

namespace tg::tern {

struct AggregateOptions {
  // The config's comm.algorithm (kAlgorithms, terngrad/exchange/route.h): for ternary codes
  // `automatic` (the cost model, per bucket), ps, packed_allreduce, sharded or hierarchical, or
  // allgather (the generic path: whole messages); every one exact. `ring` sends f32 slots by a
  // plain ring allreduce instead of the exact reduce-scatter (faster on some links, not
  // bit-identical to one process) and codes as `automatic`.
  Route algorithm = Route::automatic;
  // Ternary path: bytes of one worker's bucket per collective call (0: the whole bucket in one
  // call), and whether to decode chunk c while chunk c + 1 is on the wire (CPU communicators of
  // two or more ranks, given a collectives thread). Every rank must pass the same values.
  int64_t chunk_bytes = int64_t{2} << 20;
  bool overlap = true;
  // Which node each rank is on (not a config key: the process group learns it, comm/topology.h):
  // the hierarchical route's nodes and the cost model's slow links. Unknown: plan.h.
  comm::NodeLayout nodes = {};
  bool operator==(const AggregateOptions&) const = default;
};

struct AggregateStats {
  comm::WireBytes wire;        // this call on this rank: the change in comm.wire()
  comm::WireBytes meta_wire;   // ... of which the meta allgather
  comm::WireBytes inter_wire;  // ... of which to and from ranks on other nodes (options.nodes)
  // Per slot of the range, how it travelled: message, reduce_scatter (or allgather, its P = 2
  // form), ring, gathered, or the ternary bucket's route.
  std::vector<Route> routes;
  bool took(Route r) const;       // some slot of the range travelled by r
  bool ternary_path = false;      // false: the generic or the elementwise path
  bool elementwise_path = false;  // the reduce-scatter + allgather (or ring) of f32/f16
  int elementwise_bytes = 0;      // ... its bytes per element on the reduce-scatter (4 or 2)
  int64_t ternary_slots = 0;      // slots summed as integer codes (ternary path)
  int64_t raw_slots = 0;          // slots sent as raw fp32 in the gathered block (ternary path)
  // Ternary path: the bucket's route (automatic resolved), one worker's bucket bytes, and the
  // collective calls (chunks) it took; 0 bytes and 0 chunks when no slot is ternary.
  Route bucket_route = Route::allgather;
  int64_t bucket_bytes = 0;
  int64_t bucket_chunks = 0;
  // The shared meta every worker encoded with: c.num_meta(r) floats, meta_per_slot() per slot of
  // r in slot order (TernGrad: each slot's shared scaler). Empty when the method shares none.
  std::vector<float> shared_meta;
  // Host wall-clock seconds. On a CUDA device the phases are not synchronised, so queued kernel
  // time can land in a later phase; the sum is the call's time.
  double encode_s = 0;  // local_meta + encode (+ staging the gathered block)
  double comm_s = 0;    // collectives (the bucket's whole, including its decoding)
  double reduce_s = 0;  // accumulate + finalize
};

// A short line for logs: "ternary: 4 sharded, 2 gathered raw fp32; bucket of 4 slots, 1234 B per
// worker, 1 chunk; wire sent 1234 B received 1234 B" (each bucket route that carried slots, in
// kBucketRoutes order) or "generic allgather of 5 slots; wire ...". Of several calls (a step's
// buckets): the same line with the slot counts, bytes, chunks and wire summed.
std::string describe(std::span<const AggregateStats> calls);

// True when the elementwise path allgathers the messages of n elements of e bytes (W per rank,
// P ranks) instead of the reduce-scatter + allgather: no more bytes a rank (see above).
bool gathers_values(int64_t p, int64_t w, int64_t e, int64_t n);

// The node fold (see above): G when the elementwise path folds along the nodes of `nodes`
// (M >= 2 nodes of G >= 2 consecutive ranks each) because that sends fewer bytes out of the
// busiest node than the flat reduce-scatter + allgather, else 0.
int64_t node_fold_lanes(const comm::NodeLayout& nodes, int64_t p, int64_t w, int64_t e, int64_t n);

// The pieces the node fold cuts each lane of `lane` elements into (n elements of e bytes,
// chunk_bytes as AggregateOptions::chunk_bytes, 0 = one piece): as many as the bucket has chunks,
// at most one per element.
int64_t fold_pieces(int64_t lane, int64_t e, int64_t n, int64_t chunk_bytes);

// Every message the elementwise path sends for n elements of e bytes (W per rank, P ranks, the
// node layout `nodes`, chunk_bytes as above), with its phase (a phase's messages are in flight
// together, as one comm::Communicator::exchange): the allgather (one phase), the reduce-scatter
// and allgather (two), or the fold along the nodes (the lanes inside the node; the rounds of
// partial sums and averages; the lanes back). What a simulator replays (terngrad/analysis/sim/).
std::vector<Message> elementwise_messages(const comm::NodeLayout& nodes, int64_t p, int64_t w,
                                          int64_t e, int64_t n, int64_t chunk_bytes);
inline std::string describe(const AggregateStats& s) {
  return describe(std::span<const AggregateStats>(&s, 1));
}

// out (f32 [c.total()] on comm.device()) at the slots of r (default: all) = the aggregated
// gradient of all N workers at `step`: the fold of the header comment, the same bits on every
// rank and for every P (with compressors in the same state).
//   local_grads: this rank's W >= 1 workers' flat gradients, each a contiguous f32 [c.total()] on
//                comm.device(); W must be the same on every rank (not checked: a mismatch
//                fails in, or hangs until the timeout of, the first collective);
//   c:           this rank's compressor; encode is called with the global worker indices
//                rank * W + w, so 1-bit SGD and error-feedback residuals live under those;
//   collectives: a thread the ternary path may issue its chunks' collectives on while this one
//                decodes (options.overlap, CPU, P >= 2); null: everything on this thread.
// Collective: every rank calls it with the same step, range, options and layout. Only r's slots
// of the gradients are read and of out written (another thread may be writing the rest). Throws
// on invalid arguments (naming them) and on communicator failures (the communicator is then
// broken).
AggregateStats aggregate(Compressor& c, comm::Communicator& comm,
                         std::span<const Tensor> local_grads, int64_t step, Tensor& out,
                         const AggregateOptions& options = {}, SlotRange r = {},
                         WorkerThread* collectives = nullptr);

// N workers emulated in one process: aggregate() over the group of one on the gradients' device
// (comm::make_self_communicator), worker_grads in worker order 0..N-1.
AggregateStats aggregate_local(Compressor& c, std::span<const Tensor> worker_grads, int64_t step,
                               Tensor& out, SlotRange r = {});

}  // namespace tg::tern
