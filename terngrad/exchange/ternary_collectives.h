// Exact aggregation of TernGrad codes across ranks (issue 5 §3). Each of the P ranks holds the
// packed ternary codes of its W local workers (one tensor of n elements each, in a format of
// terngrad/ternary_kernels.h); afterwards every rank has added, into its int32 accumulator, the
// integer sum over all N = P * W workers' codes (in [-N, N]). The sum is exact, so every
// algorithm gives bit-identical accumulators, equal to unpacking all N code vectors in one place.
//
// Symbols: n elements; B = packed_bytes(format, n) bytes of one worker's codes (two_bit:
// ceil(n / 4)); k = sum_field_bits(N) = ceil(log2(2N + 1)); f = floor(64 / k) fields per word;
// K = 8 * ceil(n / f) bytes of the k-bit sum fields (layout: terngrad/ternary_fields.h).
//
//   ps                the paper's parameter server, rank 0 the server: gather every rank's W code
//                     vectors to rank 0 (flat gather of W B bytes), rank 0 sums them, shifts the
//                     sums by +N to [0, 2N], packs them in k-bit fields and broadcasts the K bytes
//                     (flat); every rank unpacks (minus N) into acc.
//                       rank 0: sent (P - 1) K, received (P - 1) W B
//                       others: sent W B, received K
//   allgather         allgather every rank's W code vectors (ring: (P - 1) W B each way); every
//                     rank unpack-accumulates all N vectors in rank order.
//   packed_allreduce  each rank sums its own W workers' codes into [-W, W], shifts by +W to
//                     [0, 2W], packs into k-bit fields (2^k > 2N, so the sum over P ranks, in
//                     [0, 2N], never carries from one field into the next), runs the backend's
//                     stock allreduce sum on the u64 words (ring: 2 (P - 1) / P K each way) and
//                     unpacks (minus N) into acc.
//   automatic         ("auto") the cheapest of the three by the byte cost model below, ties going
//                     to allgather, then packed_allreduce, then ps.
// The byte figures above are those of comm/wire_model.h, which the local backend reports exactly;
// for the gloo backend the cost model uses Gloo's own schedules (comm/gloo_wire.h), which move the
// same totals but split them differently between ranks (the ps broadcast is a binomial tree).
//
// Napkin numbers (two_bit, W = 1, per element, sent + received of the busiest rank):
//   P = 2:  allgather 0.50 B, packed_allreduce 0.76 B (k = 3), ps 0.63 B  -> allgather
//   P = 4:  allgather 1.50 B, packed_allreduce 1.50 B (k = 4), ps 2.25 B  -> allgather (tie)
//   P = 8:  allgather 3.50 B, packed_allreduce 2.33 B (k = 5), ps 6.42 B  -> packed_allreduce
// fp32 ring allreduce moves 16 (P - 1) / P B per element (8 B at P = 2).
//
// Buckets (what aggregate uses): S code vectors ("segments", one per gradient tensor,
// numel[s] elements each) travel in ONE collective per chunk instead of one per tensor. One
// worker's bucket is the segments' packed codes back to back, segment s from byte
// sum_{j<s} packed_bytes(format, numel[j]): every segment starts on a fresh byte, so the padding
// codes at a segment's end travel but are never decoded, and every decode is per segment into
// that segment's own accumulator (acc[s], anywhere). The k-bit sum fields of ps and
// packed_allreduce start each (piece of a) segment on a fresh 64-bit word, so a piece's fields
// unpack with the plain kernels; at most one partly used word per piece. ternary_aggregate on one
// vector is the bucket of one segment, unchunked.
//
// Chunks and overlap: with chunk_bytes = C > 0 the bucket's B bytes per worker are cut into
// chunks [c C, min(B, (c + 1) C)) (cut at byte boundaries, i.e. at whole codes); chunk c is a
// bucket of the pieces of the segments it overlaps and runs the algorithm on its own: cost =
// the sum of the chunks' costs (ring figures are linear in the bytes, so for allgather the same
// total; packed fields pay up to one word per piece). On a CPU communicator with overlap on and
// >= 2 chunks, a second thread issues the collectives of chunk c + 1, c + 2, ... back to back
// while the calling thread decodes chunk c (and, for ps / packed_allreduce, packs chunk c + 1):
// Gloo collectives block, so this is what hides the decode behind the transfer. Only that thread
// touches the communicator meanwhile (collectives stay in one order on every rank). On CUDA the
// chunks run one after another on the calling thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "nn/core/worker_thread.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

enum class TernaryAlgorithm : uint8_t { ps, allgather, packed_allreduce, automatic };

const char* name(TernaryAlgorithm a);  // "ps", "allgather", "packed-allreduce", "auto"
// Accepts the names above (and "packed_allreduce"); throws listing the known names otherwise.
TernaryAlgorithm parse_ternary_algorithm(std::string_view s);
std::vector<std::string> ternary_algorithm_names();

// One aggregation: n elements per worker, P ranks of W workers each.
struct TernaryShape {
  int64_t n = 0;
  int ranks = 1;
  int workers_per_rank = 1;
  tern::PackFormat format = tern::PackFormat::two_bit;
  // Whose wire figures: "gloo" uses Gloo's exact schedules (comm/gloo_wire.h: uneven ring chunks,
  // binomial-tree broadcast); anything else ("local", "nccl") the model of comm/wire_model.h.
  std::string backend = "local";
};

struct TernaryCost {
  comm::WireBytes rank;  // what the asked-for rank sends and receives
  uint64_t busiest = 0;  // max over ranks of sent + received (rank 0 for ps)
};

// The byte cost model (see the table above). `algorithm` must not be automatic. Throws on an
// invalid shape (n < 0, ranks < 1, workers_per_rank < 1, N > 2^30) or rank.
TernaryCost ternary_cost(TernaryAlgorithm algorithm, const TernaryShape& shape, int rank);
// The algorithm `automatic` resolves to: the least busiest-rank bytes. Depends on the shape only
// (comm.size(), W, n, format, backend), so every rank picks the same one.
TernaryAlgorithm choose_ternary_algorithm(const TernaryShape& shape);

struct TernaryResult {
  TernaryAlgorithm algorithm;  // the one that ran (automatic resolved), for the caller to log
  comm::WireBytes wire;        // what this call moved on this rank (the change in comm.wire())
};

// acc[i] += sum over all P * W workers of code_i, on every rank.
//   codes: W workers' packed code vectors of n elements, contiguous, B = packed_bytes(format, n)
//          bytes each (worker w of rank r is global worker r * W + w);
//   acc:   int32 [n]; both on comm.device() (host for local/gloo, this rank's GPU for nccl).
// Collective: every rank calls it with the same algorithm, n, format and W. Temporary buffers
// come from the device's caching allocator. Throws on invalid arguments, a CUDA device in a build
// without CUDA, or a communicator failure (the communicator is then broken).
TernaryResult ternary_aggregate(comm::Communicator& comm, TernaryAlgorithm algorithm,
                                const uint8_t* codes, int workers, int64_t n,
                                tern::PackFormat format, int32_t* acc);

// ---- buckets (see the header comment) -------------------------------------------------------

struct TernaryPipeline {
  int64_t chunk_bytes = 0;  // bytes of one worker's bucket per chunk; 0 = the whole bucket at once
  // CPU communicators of two or more ranks: the thread that issues the chunks' collectives while
  // the caller decodes (the caller's, alive for the run: no thread is started per call); null:
  // everything on the caller's thread.
  WorkerThread* collectives = nullptr;
};

// S segments of numel[s] elements each; P ranks of W workers.
struct TernaryBucketShape {
  std::vector<int64_t> numel;
  int ranks = 1;
  int workers_per_rank = 1;
  tern::PackFormat format = tern::PackFormat::two_bit;
  std::string backend = "local";  // as TernaryShape::backend
  int64_t chunk_bytes = 0;        // as TernaryPipeline::chunk_bytes (the cost depends on it)
};

// Bytes of one worker's bucket: sum_s packed_bytes(format, numel[s]).
int64_t bucket_code_bytes(const std::vector<int64_t>& numel, tern::PackFormat format);
// The byte cost model for a bucket, chunk by chunk as ternary_aggregate_bucket runs it; the same
// figures as ternary_cost for one segment and chunk_bytes 0 (or >= its bytes). Throws as
// ternary_cost, and on a negative numel or chunk_bytes.
TernaryCost ternary_bucket_cost(TernaryAlgorithm algorithm, const TernaryBucketShape& shape,
                                int rank);
// `automatic` for a bucket: the least busiest-rank bytes over the whole bucket (ties as above).
TernaryAlgorithm choose_ternary_bucket_algorithm(const TernaryBucketShape& shape);

// acc[s][i] += sum over all P * W workers of code i of segment s, for every segment, on every rank.
//   codes: W worker buckets of bucket_code_bytes(numel, format) bytes each, back to back;
//   acc:   one int32 [numel[s]] pointer per segment (null allowed where numel[s] = 0), disjoint;
//   all on comm.device(). Collective: every rank calls it with the same algorithm, numel, format,
//   W and pipeline chunking. Throws as ternary_aggregate; a failure of a collective on the
//   pipeline's thread is rethrown here once that thread is done with this call.
TernaryResult ternary_aggregate_bucket(comm::Communicator& comm, TernaryAlgorithm algorithm,
                                       const uint8_t* codes, int workers,
                                       const std::vector<int64_t>& numel, tern::PackFormat format,
                                       const std::vector<int32_t*>& acc,
                                       const TernaryPipeline& pipeline = {});

}  // namespace tg::tern
