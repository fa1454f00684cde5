// One data-parallel aggregation step across ranks: the three rounds of terngrad/compressor.h
// (meta, encode, accumulate + finalize) with the W workers of each rank local and the messages
// moved by a Communicator. The contract is exactness: `out` is bit-identical on every rank to
// tern::aggregate_emulated over all N = P * W gradients in global worker order, for every
// compressor.
//
// Symbols: P ranks, W workers per rank (the same on every rank), N = P * W; rank r hosts the
// global workers r * W .. r * W + W - 1. M = c.num_meta() floats of meta per worker, B =
// c.payload_bytes(step) bytes of one worker's message.
//
// The generic path (every compressor; terngrad too when the algorithm is allgather):
//   1. meta:   allgather the W * M local metas (f32), then shared = the elementwise max in global
//              worker order, exactly as aggregate_emulated folds it (skipped when M = 0);
//   2. encode: each local worker's message, encoded with its GLOBAL index (1-bit SGD keeps its
//              residual per worker index, so the index must not depend on P);
//   3. gather: allgather all messages at a stride of B4 = B rounded up to 4 bytes (W * B4 bytes
//              from each rank, N * B4 on every rank; the <= 3 zero bytes of padding keep every
//              message as aligned as in one process, where raw floats inside it are read as
//              floats);
//   4. reduce: c.accumulate of all N messages in global order, c.finalize with N workers.
// Float sums (fp16, qsgd, onebit, terngrad with own scalers) are then added in the same order as
// in one process, so they are bit-identical; no allreduce is used for them because a ring
// allreduce adds in a chunk-dependent order.
// Wire, per rank (ring allgather, comm/wire_model.h): sent = received = (P - 1) W (4 M + B4).
//
// The fp32 path (c.elementwise_fp32(): the "none" method) on P >= 2 ranks: an exact
// reduce-scatter + allgather, 2 (P - 1) / P of the gradient's bytes per rank as a ring allreduce
// moves, but with the bits of one process. The n elements are cut into P ranges of
// C = ceil(n / P) (the last shorter, zero-padded); rank q owns range q.
//   1. reduce-scatter: one alltoall sends each rank's W local gradients' range q to rank q
//      (W * 4C bytes per peer);
//   2. rank q adds its range of all N = P * W gradients in global worker order, acc = 0 + g_0 +
//      ... + g_{N-1}, and scales it, 0 + acc * (1 / N): per element exactly what aggregate_emulated
//      does over the whole vector;
//   3. allgather of the P scaled ranges (4C bytes each) into out.
// Wire, per rank: sent = received = (P - 1) (W + 1) 4C: with W = 1, 2 (P - 1) / P * 4n rounded up
// to whole ranges, against (P - 1) 4n for the generic allgather.
//
// The ternary path (terngrad with shared scalers, algorithm ps, packed_allreduce or automatic):
// every ternary slot's codes are on one grid, so their integer sums are exact in any order. All
// ternary slots travel as ONE bucket (comm/ternary_collectives.h, ternary_aggregate_bucket): one
// worker's bucket is the slots' codes back to back in layout order (each packed_bytes(pack,
// numel) long, so with no raw slot a message is its own bucket), summed into the accumulator's
// int32 sums slot by slot; the padding codes at a slot's end travel but are never decoded. The
// bucket's algorithm is AggregateOptions::algorithm, or for `automatic` the cheapest for the
// whole bucket by the byte cost model of that header (ternary_bucket_cost, chunking included),
// so every ternary slot takes the same route (ps, packed-allreduce or allgather). The bucket is
// cut into chunks of AggregateOptions::chunk_bytes bytes of one worker's codes; on a CPU
// communicator, with `overlap`, a second thread runs chunk c + 1's collective while this one
// decodes chunk c (the decode hides behind the transfer). Slots sent as raw fp32 (the exclusion
// rules, a floating-gradient epoch) travel together in one allgather of a per-worker block (their
// floats back to back) and are accumulated in global worker order like the generic path; then
// c.finalize scales every integer sum once. The message layout (which slot is ternary at `step`,
// and each slot's bytes) is recomputed from the options the compressor was made with
// (AggregateOptions::compression), documented in terngrad/compressor.h: a ternary slot is
// packed_bytes(pack, numel) bytes of codes, any other slot numel raw floats, slots back to back in
// layout order. The recomputed payload size is checked against c.payload_bytes(step).
// Wire, per rank: the meta allgather, plus ternary_bucket_cost(route, bucket, rank), plus an
// allgather of W * G bytes (G: one worker's raw floats, 4 bytes each) when there is a raw slot.
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
  // How ternary slots are summed (terngrad with scaler_sharing = max only; every other method,
  // and terngrad without sharing, always takes the generic allgather path). allgather: the
  // generic path, whole messages.
  TernaryAlgorithm algorithm = TernaryAlgorithm::automatic;
  // The options the compressor was made with; read only on the ternary path (method must be
  // "terngrad" there, else it throws), to find the slots' bytes inside a message.
  tern::CompressionOptions compression;
  // Ternary path: bytes of one worker's bucket per collective call (0: the whole bucket in one
  // call), and whether to decode chunk c while chunk c + 1 is on the wire (CPU communicators;
  // a second thread issues the collectives). Every rank must pass the same values.
  int64_t chunk_bytes = int64_t{2} << 20;
  bool overlap = true;
};

// How one slot travelled.
enum class SlotRoute : uint8_t {
  message,           // generic path: inside the allgathered whole messages
  reduce_scatter,    // fp32 path: exact reduce-scatter (alltoall) + allgather of the sums
  gathered,          // ternary path: raw fp32 in the allgathered block
  ps,                // ternary path: in the bucket, parameter server
  packed_allreduce,  // ternary path: in the bucket, packed-field allreduce
  allgather,         // ternary path: in the bucket, allgather of the codes
};
// "message", "reduce-scatter", "gathered", "ps", "packed-allreduce", "allgather"
const char* name(SlotRoute r);

struct AggregateStats {
  WireBytes wire;                 // this call on this rank: the change in comm.wire()
  WireBytes meta_wire;            // ... of which the meta allgather
  std::vector<SlotRoute> routes;  // per slot of c.layout()
  bool ternary_path = false;      // false: the generic or the fp32 path
  bool fp32_path = false;         // the exact fp32 reduce-scatter + allgather
  int64_t ternary_slots = 0;      // slots summed as integer codes (ternary path)
  int64_t raw_slots = 0;          // slots sent as raw fp32 in the gathered block (ternary path)
  // Ternary path: the bucket's algorithm (automatic resolved), one worker's bucket bytes, and
  // the collective calls (chunks) it took; 0 bytes and 0 chunks when no slot is ternary.
  TernaryAlgorithm bucket_algorithm = TernaryAlgorithm::allgather;
  int64_t bucket_bytes = 0;
  int64_t bucket_chunks = 0;
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

// out (f32 [c.total()] on comm.device()) = the aggregated gradient of all N workers at `step`,
// bit-identical on every rank to tern::aggregate_emulated(c, all N gradients in global order,
// step, out) in one process (with a compressor in the same state).
//   local_grads: this rank's W >= 1 workers' flat gradients, each a contiguous f32 [c.total()] on
//                comm.device(); W must be the same on every rank (not checked: a mismatch
//                fails in, or hangs until the timeout of, the first collective);
//   c:           this rank's compressor; encode is called with the global worker indices
//                r * W + w, so 1-bit SGD residuals live under those indices.
// Collective: every rank calls it with the same step, options and layout. Throws on invalid
// arguments (naming them), on a ternary-path compression option set that does not describe c,
// and on communicator failures (the communicator is then broken).
AggregateStats aggregate_distributed(tern::Compressor& c, Communicator& comm,
                                     std::span<const Tensor> local_grads, int64_t step, Tensor& out,
                                     const AggregateOptions& options = {});

}  // namespace tg::comm
