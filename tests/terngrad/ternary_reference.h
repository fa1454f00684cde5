// The keep rule of stochastic ternarization written straight from its specification
// (terngrad/ternary_rule.h), independently of the kernels' two-stage evaluation: element i is
// kept iff |g| >= s, or U_i < x * 2^24 in exact arithmetic, where U_i = b_i * 2^24 + r_i is the
// element's full 32-bit uniform (both parts always drawn here) and x = f32(|g| * f32(256 / s)).
#pragma once

#include <cmath>
#include <cstdint>

#include "nn/core/philox.h"

namespace tg::tern {

inline bool reference_keep(float g, float s, uint64_t seed, uint64_t stream, uint64_t i) {
  if (!(s > 0.0f)) return false;
  const float a = std::fabs(g);
  if (a >= s) return true;
  if (!(a < s)) return false;
  const float c = 256.0f / s;
  const float x = a * c;
  if (std::isnan(x)) return false;
  const uint32_t word = philox_block(seed, stream, i / 16).v[(i / 4) % 4];
  const uint64_t b = (word >> (8 * (i % 4))) & 0xFF;
  const uint64_t r = philox_word(seed, stream, (1ULL << 62) + i) >> 8;
  const uint64_t u = b << 24 | r;
  return static_cast<double>(u) < static_cast<double>(x) * 16777216.0;  // both exact in double
}

// The code in {-1, 0, +1}.
inline int reference_code(float g, float s, uint64_t seed, uint64_t stream, uint64_t i) {
  if (!reference_keep(g, s, seed, stream, i)) return 0;
  return g > 0 ? 1 : -1;
}

}  // namespace tg::tern
