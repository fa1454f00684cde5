// The per-rank wire bytes of Gloo's stock algorithms, as the Gloo communicator (comm/gloo_comm.h)
// counts them and the cost model of terngrad/exchange/ternary_collectives.h predicts them. Plain
// arithmetic on Gloo's schedules: it needs no Gloo, so the exchange algorithms build without that
// backend (python/terngrad_torch links them with torch's ProcessGroup as the transport).
//
// B = bytes per rank, P ranks, this rank r; TCP/IP and Gloo message headers are not counted:
//   allreduce  ring (gloo::allreduce, RING): reduce-scatter then allgather over P chunks, each
//              chunk a whole number of segments of ceil(B / S) bytes rounded up to the element
//              size (S = segment count: a multiple of P, at least 2P, segments <= 1 MiB), the last
//              chunks short or empty. Rank r sends every chunk but its own in the first phase and
//              every chunk but chunk r - 1 in the second; receives all but chunk r + 1, then all
//              but chunk r. With C(c) the size of chunk c:
//                sent = 2B - C(r) - C(r - 1),   received = 2B - C(r + 1) - C(r)
//              = 2 (P - 1) B / P each way when the chunks come out equal (B a multiple of
//              P * element size * segments per chunk; always for P = 2 where it is B).
//   allgather  ring with the block halved: sent = received = (P - 1) B.
//   alltoall   pairwise (gloo::alltoall): one block to and from each peer, sent = received =
//              (P - 1) B (B = one block).
//   gather     flat: a non-root sends B to the root; the root receives (P - 1) B.
//   broadcast  binomial tree from the root: a non-root receives B once; virtual rank
//              v = (r - root) mod P sends B to v + 2^i for every i with 2^i > v and v + 2^i < P
//              (the root sends ceil(log2 P) copies when P is a power of two, not P - 1).
//   barrier    dissemination barrier of empty messages: 0.
// Summed over ranks every collective moves what comm/wire_model.h says (up to its rounding); per
// rank the allreduce (uneven chunks) and the broadcast (tree vs flat) can differ from that model.
// Checked once against the bytes each rank's process actually wrote (/proc/self/io wchar): equal
// up to Gloo's fixed 48-byte header per message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace tg::comm::gloo_wire {

// Gloo's largest allreduce segment (gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize in
// gloo/allreduce.h; comm/gloo_comm.cpp asserts at compile time that the two agree).
inline constexpr uint64_t kMaxSegmentBytes = 1024 * 1024;

// The bytes of each of the P chunks Gloo's ring allreduce cuts B bytes (elements of `element_size`
// bytes) into: chunk c is reduced by rank c's neighbours and passed on whole, the last ones short
// or empty. Empty for P <= 1.
std::vector<uint64_t> allreduce_chunks(uint64_t bytes, size_t element_size, int p);

// All are {0, 0} for P = 1 (and allreduce for B = 0).
WireBytes allreduce(uint64_t bytes, size_t element_size, int p, int rank);
WireBytes allgather(uint64_t bytes, int p);
WireBytes alltoall(uint64_t bytes, int p);
WireBytes gather(uint64_t bytes, int p, int rank, int root);
WireBytes broadcast(uint64_t bytes, int p, int rank, int root);

}  // namespace tg::comm::gloo_wire
