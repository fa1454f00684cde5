// One data-parallel aggregation step across ranks: the three rounds of terngrad/compressor.h
// (meta, encode, accumulate + finalize) for one slot range r of the layout (a bucket of
// comm/reducer.h, or the whole layout), with the W workers of each rank local and the messages
// moved by a Communicator. The contract is exactness: `out` at r's slots is bit-identical on
// every rank to tern::aggregate_emulated over all N = P * W gradients in global worker order, for
// every compressor (except with the opt-in float_ring below).
//
// The route is chosen from the compressor's own description of its message, Compressor::wire
// (step, r) (terngrad/compressor.h: each slot's coding and bytes); this file never names a
// method. Symbols: P ranks, W workers per rank (the same on every rank), N = P * W; rank q hosts
// the global workers q * W .. q * W + W - 1. M = c.num_meta(r) floats of meta per worker, B =
// c.payload_bytes(step, r) bytes of one worker's message.
//
// The generic path (opaque slots: qsgd, 1-bit, terngrad with per-worker scalers; and ternary
// slots when the algorithm is allgather):
//   1. meta:   allgather the W * M local metas (f32), then shared = the elementwise max in global
//              worker order, exactly as aggregate_emulated folds it (skipped when M = 0);
//   2. encode: each local worker's message, encoded with its GLOBAL index (1-bit SGD keeps its
//              residual per worker index, so the index must not depend on P);
//   3. gather: allgather all messages at a stride of B4 = B rounded up to 4 bytes (W * B4 bytes
//              from each rank, N * B4 on every rank; the <= 3 zero bytes of padding keep every
//              message as aligned as in one process, where raw floats inside it are read as
//              floats);
//   4. reduce: c.accumulate of all N messages in global order, c.finalize with N workers.
// Float sums are then added in the same order as in one process, so they are bit-identical.
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
//      the coding's contract says aggregate_emulated does;
//   3. allgather of the P averaged ranges in f32 (4C bytes each) into out.
// Wire, per rank: sent = received = (P - 1) (W e + 4) C: for f32 with W = 1, 2 (P - 1) / P * 4n
// (a ring allreduce's bytes), against (P - 1) 4n for the generic allgather.
// With AggregateOptions::float_ring and every slot f32: the local workers' sum in order, then a
// ring allreduce (Communicator::allreduce) of it and the average: the ring's bytes and speed, but
// the sum's order depends on P and the ring's chunking, so it is not bit-identical to one process
// (every rank still gets the same bits).
//
// The ternary path (some slot ternary, every other slot f32, algorithm ps, packed_allreduce or
// automatic): every ternary slot's codes are on one grid, so their integer sums are exact in any
// order. All ternary slots of r travel as ONE bucket (comm/ternary_collectives.h,
// ternary_aggregate_bucket): one worker's bucket is the slots' codes back to back in layout order
// (each WireLayout::slots[t].bytes = packed_bytes(pack, numel) long, so with no f32 slot a message
// is its own bucket), summed into the accumulator's int32 sums slot by slot; the padding codes at
// a slot's end travel but are never decoded. The bucket's algorithm is AggregateOptions::
// algorithm, or for `automatic` the cheapest for the whole bucket by the byte cost model of that
// header (ternary_bucket_cost, chunking included). The bucket is cut into chunks of
// AggregateOptions::chunk_bytes bytes of one worker's codes; on a CPU communicator, with
// `overlap`, a second thread runs chunk c + 1's collective while this one decodes chunk c. The
// f32 slots (exclusion rules) travel together in one allgather of a per-worker block (their
// floats back to back) and are accumulated in global worker order like the generic path; then
// c.finalize scales every integer sum once.
// Wire, per rank: the meta allgather, plus ternary_bucket_cost(route, bucket, rank), plus an
// allgather of W * G bytes (G: one worker's f32 slots, 4 bytes per element) when there is one.
//
// Devices: local_grads, out and every buffer live on comm.device() (host for local and gloo,
// this rank's GPU for nccl); temporaries come from the device's caching allocator. The metas are
// computed on the host (Compressor::local_meta) and staged through comm.device().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/ternary_collectives.h"
#include "nn/core/tensor.h"
#include "terngrad/compressor.h"

namespace tg::comm {

struct AggregateOptions {
  // How ternary slots are summed (allgather: the generic path, whole messages).
  TernaryAlgorithm algorithm = TernaryAlgorithm::automatic;
  // f32 slots by a ring allreduce instead of the exact reduce-scatter (see above): faster on
  // some links, not bit-identical to one process. comm.algorithm = "ring".
  bool float_ring = false;
  // Ternary path: bytes of one worker's bucket per collective call (0: the whole bucket in one
  // call), and whether to decode chunk c while chunk c + 1 is on the wire (CPU communicators;
  // a second thread issues the collectives). Every rank must pass the same values.
  int64_t chunk_bytes = int64_t{2} << 20;
  bool overlap = true;
};

// How one slot travelled.
enum class SlotRoute : uint8_t {
  message,           // generic path: inside the allgathered whole messages
  reduce_scatter,    // elementwise path: exact reduce-scatter (alltoall) + allgather of the sums
  ring,              // elementwise path with float_ring: ring allreduce of the f32 sums
  gathered,          // ternary path: raw fp32 in the allgathered block
  ps,                // ternary path: in the bucket, parameter server
  packed_allreduce,  // ternary path: in the bucket, packed-field allreduce
  allgather,         // ternary path: in the bucket, allgather of the codes
};
// "message", "reduce-scatter", "ring", "gathered", "ps", "packed-allreduce", "allgather"
const char* name(SlotRoute r);

struct AggregateStats {
  WireBytes wire;                 // this call on this rank: the change in comm.wire()
  WireBytes meta_wire;            // ... of which the meta allgather
  std::vector<SlotRoute> routes;  // per slot of the range
  bool ternary_path = false;      // false: the generic or the elementwise path
  bool elementwise_path = false;  // the reduce-scatter + allgather (or float_ring) of f32/f16
  int elementwise_bytes = 0;      // ... its bytes per element on the reduce-scatter (4 or 2)
  int64_t ternary_slots = 0;      // slots summed as integer codes (ternary path)
  int64_t raw_slots = 0;          // slots sent as raw fp32 in the gathered block (ternary path)
  // Ternary path: the bucket's algorithm (automatic resolved), one worker's bucket bytes, and
  // the collective calls (chunks) it took; 0 bytes and 0 chunks when no slot is ternary.
  TernaryAlgorithm bucket_algorithm = TernaryAlgorithm::allgather;
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

// A short line for logs: "ternary: 0 ps, 0 packed-allreduce, 4 allgather, 2 gathered raw fp32;
// bucket of 4 slots, 1234 B per worker, 1 chunk; wire sent 1234 B received 1234 B" or "generic
// allgather of 5 slots; wire ...".
std::string describe(const AggregateStats& s);

// out (f32 [c.total()] on comm.device()) at the slots of r (default: all) = the aggregated
// gradient of all N workers at `step`, bit-identical on every rank to tern::aggregate_emulated(c,
// all N gradients in global order, step, out, r) in one process (with a compressor in the same
// state).
//   local_grads: this rank's W >= 1 workers' flat gradients, each a contiguous f32 [c.total()] on
//                comm.device(); W must be the same on every rank (not checked: a mismatch
//                fails in, or hangs until the timeout of, the first collective);
//   c:           this rank's compressor; encode is called with the global worker indices
//                r * W + w, so 1-bit SGD residuals live under those indices.
// Collective: every rank calls it with the same step, range, options and layout. Only r's slots
// of the gradients are read and of out written (another thread may be writing the rest). Throws
// on invalid arguments (naming them) and on communicator failures (the communicator is then
// broken).
AggregateStats aggregate_distributed(tern::Compressor& c, Communicator& comm,
                                     std::span<const Tensor> local_grads, int64_t step, Tensor& out,
                                     const AggregateOptions& options = {}, tern::SlotRange r = {});

}  // namespace tg::comm
