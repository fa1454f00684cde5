// The wire-byte model of each collective: what one rank sends and receives, in payload bytes, when
// the collective runs as the message-passing algorithm named below over P ranks on a buffer of B
// bytes (per rank). The local backend reports exactly these figures; the NCCL backend reports them
// too (NCCL exposes no byte counters and may pick tree or NVLS algorithms, so for it they are the
// ring/flat model, not a measurement); the cost model of terngrad/exchange/ternary_collectives.h is
// built on them.
//
//   allreduce   ring (reduce-scatter then allgather, P - 1 steps each, chunks of B / P):
//               sent = received = 2 (P - 1) B / P, rounded down
//   allgather   ring: sent = received = (P - 1) B          (B = one rank's contribution)
//   alltoall    pairwise: sent = received = (P - 1) B      (B = one block; P blocks per rank)
//   gather      flat: every non-root sends B to the root, the root receives (P - 1) B
//   broadcast   flat: the root sends B to each other rank ((P - 1) B), a non-root receives B
//   exchange    point-to-point: exactly the bytes listed (sent: the sends, received: the receives)
//   barrier     0 (control traffic is not counted)
// With P = 1 every figure is 0.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"

namespace tg::comm::wire_model {

inline WireBytes allreduce(uint64_t bytes, int p) {
  const uint64_t b = 2 * static_cast<uint64_t>(p - 1) * bytes / static_cast<uint64_t>(p);
  return {b, b};
}
inline WireBytes allgather(uint64_t bytes, int p) {
  const uint64_t b = static_cast<uint64_t>(p - 1) * bytes;
  return {b, b};
}
inline WireBytes alltoall(uint64_t bytes, int p) {
  const uint64_t b = static_cast<uint64_t>(p - 1) * bytes;
  return {b, b};
}
inline WireBytes gather(uint64_t bytes, int p, int rank, int root) {
  if (p == 1) return {};
  if (rank == root) return {0, static_cast<uint64_t>(p - 1) * bytes};
  return {bytes, 0};
}
inline WireBytes broadcast(uint64_t bytes, int p, int rank, int root) {
  if (p == 1) return {};
  if (rank == root) return {static_cast<uint64_t>(p - 1) * bytes, 0};
  return {0, bytes};
}

inline WireBytes exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) {
  WireBytes w;
  for (const SendSpec& s : sends) w.sent += s.bytes;
  for (const RecvSpec& r : recvs) w.received += r.bytes;
  return w;
}

inline void add(WireBytes& total, const WireBytes& w) {
  total.sent += w.sent;
  total.received += w.received;
}

}  // namespace tg::comm::wire_model
