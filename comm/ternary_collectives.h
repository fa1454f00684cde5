// Exact aggregation of TernGrad codes across ranks (issue 5 §3). Each of the P ranks holds the
// packed ternary codes of its W local workers (one tensor of n elements each, in a format of
// terngrad/ternary_kernels.h); afterwards every rank has added, into its int32 accumulator, the
// integer sum over all N = P * W workers' codes (in [-N, N]). The sum is exact, so every
// algorithm gives bit-identical accumulators, equal to unpacking all N code vectors in one place.
//
// Symbols: n elements; B = packed_bytes(format, n) bytes of one worker's codes (two_bit:
// ceil(n / 4)); k = sum_field_bits(N) = ceil(log2(2N + 1)); f = floor(64 / k) fields per word;
// K = 8 * ceil(n / f) bytes of the k-bit sum fields (layout: comm/ternary_fields.h).
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
// for the gloo backend the cost model uses Gloo's own schedules (comm/gloo_comm.h), which move the
// same totals but split them differently between ranks (the ps broadcast is a binomial tree).
//
// Napkin numbers (two_bit, W = 1, per element, sent + received of the busiest rank):
//   P = 2:  allgather 0.50 B, packed_allreduce 0.76 B (k = 3), ps 0.63 B  -> allgather
//   P = 4:  allgather 1.50 B, packed_allreduce 1.50 B (k = 4), ps 2.25 B  -> allgather (tie)
//   P = 8:  allgather 3.50 B, packed_allreduce 2.33 B (k = 5), ps 6.42 B  -> packed_allreduce
// fp32 ring allreduce moves 16 (P - 1) / P B per element (8 B at P = 2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "terngrad/ternary_kernels.h"

namespace tg::comm {

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
  // Whose wire figures: "gloo" uses Gloo's exact schedules (comm/gloo_comm.h: uneven ring chunks,
  // binomial-tree broadcast); anything else ("local", "nccl") the model of comm/wire_model.h.
  std::string backend = "local";
};

struct TernaryCost {
  WireBytes rank;        // what the asked-for rank sends and receives
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
  WireBytes wire;              // what this call moved on this rank (the change in comm.wire())
};

// acc[i] += sum over all P * W workers of code_i, on every rank.
//   codes: W workers' packed code vectors of n elements, contiguous, B = packed_bytes(format, n)
//          bytes each (worker w of rank r is global worker r * W + w);
//   acc:   int32 [n]; both on comm.device() (host for local/gloo, this rank's GPU for nccl).
// Collective: every rank calls it with the same algorithm, n, format and W. Temporary buffers
// come from the device's caching allocator. Throws on invalid arguments, a CUDA device in a build
// without CUDA, or a communicator failure (the communicator is then broken).
TernaryResult ternary_aggregate(Communicator& comm, TernaryAlgorithm algorithm,
                                const uint8_t* codes, int workers, int64_t n,
                                tern::PackFormat format, int32_t* acc);

}  // namespace tg::comm
