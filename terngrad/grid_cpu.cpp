// CPU kernels of grid_kernels.h: a byte at a time, the levels by the shared rule.
#include <algorithm>

#include "terngrad/grid_kernels.h"

namespace tg::tern {

size_t grid_packed_bytes(int levels, int64_t n) {
  detail::check_levels(levels, "grid_packed_bytes");
  TG_CHECK(n >= 0, "grid_packed_bytes: element count ", n, " is negative");
  const int64_t per = levels == 4 ? 4 : 3;
  return static_cast<size_t>((n + per - 1) / per);
}

void grid_quantize_pack_cpu(const float* g, int64_t n, float s, int levels, uint64_t seed,
                            uint64_t stream, uint8_t* out) {
  const size_t bytes = grid_packed_bytes(levels, n);
  if (n == 0) return;
  TG_CHECK(g != nullptr && out != nullptr, "grid_quantize_pack_cpu: null pointer for n = ", n);
  const bool zero = !(s > 0);
  const float k = zero ? 0.0f : grid_scale(levels, s);
  const int middle = (levels - 1) / 2;
  // One Philox block serves 4 consecutive elements (philox_word's layout): computed once.
  uint64_t have = ~uint64_t{0};
  Philox4 block{};
  auto level = [&](int64_t i) {
    if (zero) return middle;
    const auto u = static_cast<uint64_t>(i);
    if ((u >> 2) != have) {
      have = u >> 2;
      block = philox_block(seed, stream, have);
    }
    return grid_level(g[i], s, k, levels, block.v[u & 3]);
  };
  for (size_t b = 0; b < bytes; ++b) {
    const auto i0 = static_cast<int64_t>(b) * (levels == 4 ? 4 : 3);
    uint32_t v = 0;
    if (levels == 4) {
      for (int t = 0; t < 4 && i0 + t < n; ++t)
        v |= static_cast<uint32_t>(level(i0 + t)) << (2 * t);
    } else {
      uint32_t mul = 1;
      for (int t = 0; t < 3; ++t, mul *= 5)
        v += mul * static_cast<uint32_t>(i0 + t < n ? level(i0 + t) : 2);
    }
    out[b] = static_cast<uint8_t>(v);
  }
}

void grid_unpack_accumulate_cpu(const uint8_t* packed, int64_t n, int levels, int32_t* acc) {
  const size_t bytes = grid_packed_bytes(levels, n);
  if (n == 0) return;
  TG_CHECK(packed != nullptr && acc != nullptr,
           "grid_unpack_accumulate_cpu: null pointer for n = ", n);
  for (size_t b = 0; b < bytes; ++b) {
    uint32_t v = packed[b];
    const auto i0 = static_cast<int64_t>(b) * (levels == 4 ? 4 : 3);
    if (levels == 4) {
      for (int t = 0; t < 4 && i0 + t < n; ++t)
        acc[i0 + t] += 2 * static_cast<int32_t>((v >> (2 * t)) & 3) - 3;
    } else if (v <= 124) {
      for (int t = 0; t < 3 && i0 + t < n; ++t, v /= 5)
        acc[i0 + t] += 2 * static_cast<int32_t>(v % 5) - 4;
    }
  }
}

}  // namespace tg::tern
