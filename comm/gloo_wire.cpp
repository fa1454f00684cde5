// The wire bytes of Gloo's algorithms (formulas in comm/gloo_wire.h).
#include "comm/gloo_wire.h"

#include <algorithm>

namespace tg::comm::gloo_wire {

std::vector<uint64_t> allreduce_chunks(uint64_t bytes, size_t element_size, int p) {
  if (p <= 1) return {};
  const uint64_t P = static_cast<uint64_t>(p), e = element_size;
  // Gloo's ring (gloo/allreduce.cc): segments of at most kMaxSegmentBytes rounded down to whole
  // elements; a multiple of P segments, at least 2P; segment size rounded up to whole elements.
  const uint64_t max_segment = e * std::max<uint64_t>(1, kMaxSegmentBytes / e);
  const uint64_t min_segments = std::max<uint64_t>((bytes + max_segment - 1) / max_segment, 2 * P);
  const uint64_t segments = (min_segments + P - 1) / P * P;
  const uint64_t per_chunk = segments / P;
  const uint64_t segment = ((bytes + segments - 1) / segments + e - 1) / e * e;
  std::vector<uint64_t> out(P);
  for (uint64_t c = 0; c < P; ++c)
    out[c] =
        std::min(bytes, (c + 1) * per_chunk * segment) - std::min(bytes, c * per_chunk * segment);
  return out;
}

WireBytes allreduce(uint64_t bytes, size_t element_size, int p, int rank) {
  if (p <= 1 || bytes == 0) return {};
  const std::vector<uint64_t> chunk = allreduce_chunks(bytes, element_size, p);
  const auto P = static_cast<size_t>(p), r = static_cast<size_t>(rank);
  const uint64_t own = chunk[r], prev = chunk[(r + P - 1) % P], next = chunk[(r + 1) % P];
  return {2 * bytes - own - prev, 2 * bytes - next - own};
}

WireBytes allgather(uint64_t bytes, int p) {
  if (p <= 1) return {};
  const uint64_t b = static_cast<uint64_t>(p - 1) * bytes;
  return {b, b};
}

WireBytes alltoall(uint64_t bytes, int p) {  // gloo/alltoall.cc: one send to each peer
  if (p <= 1) return {};
  const uint64_t b = static_cast<uint64_t>(p - 1) * bytes;
  return {b, b};
}

WireBytes gather(uint64_t bytes, int p, int rank, int root) {
  if (p <= 1) return {};
  if (rank == root) return {0, static_cast<uint64_t>(p - 1) * bytes};
  return {bytes, 0};
}

WireBytes broadcast(uint64_t bytes, int p, int rank, int root) {
  if (p <= 1) return {};
  // Gloo's binomial tree (gloo/broadcast.cc) on virtual ranks v = (rank - root) mod P: in round i,
  // every v < 2^i that already holds the data sends it to v + 2^i.
  const int64_t v = ((rank - root) % p + p) % p;
  uint64_t sends = 0;
  for (int64_t step = 1; step < p; step <<= 1) {
    if (v < step && v + step < p) ++sends;
  }
  return {sends * bytes, v == 0 ? 0 : bytes};
}

}  // namespace tg::comm::gloo_wire
