// The keep rule of stochastic ternarization, one element at a time, compiled for host and
// device: the definition the CPU and CUDA kernels implement (ternary_cpu.cpp vectorizes it,
// ternary_cuda.cu calls it) and the tests check against.
//
// Element i of a tensor g with scaler s > 0 is kept (code sign(g_i)) with probability
// min(|g_i| / s, 1), using a 32-bit uniform U_i = b_i * 2^24 + r_i drawn lazily in two parts:
//   b_i  (8 bits):  byte i % 16 of Philox block i / 16 of the tensor's stream, the block's four
//                   32-bit words taken little-endian (word (i / 4) % 4, bits 8 * (i % 4) ..);
//                   one Philox block decides 16 elements.
//   r_i (24 bits):  the top 24 bits of philox_word(seed, stream, kRefineWord0 + i), computed only
//                   when b_i alone cannot decide (probability <= 1/256 per element).
// With a = |g_i|, c = 256 / s (one IEEE division per tensor) and x = a * c (one IEEE multiply,
// round to nearest), hi = floor(x):
//   a >= s                -> keep  (clipped elements are kept with probability exactly 1)
//   a NaN, or x NaN       -> drop
//   x >= 256              -> keep
//   b_i < hi              -> keep  (U_i < hi * 2^24 <= x * 2^24)
//   b_i > hi              -> drop
//   b_i == hi             -> keep iff r_i * 2^-24 < x - hi   (both sides exact in f32)
// i.e. keep iff U_i < x * 2^24 in exact arithmetic, so P(keep) = x / 256 exactly when x >= 1 and
// within 2^-32 of it below: unbiased up to the f32 rounding of x (relative 2^-23), with 8x less
// Philox work per element than drawing a 32-bit word for each.
#pragma once

#include <cmath>
#include <cstdint>

#include "nn/core/philox.h"

namespace tg::tern {

constexpr int kCodesPerBlock = 16;                    // elements decided by one Philox block
constexpr uint64_t kRefineWord0 = 1ULL << 62;         // philox_word index of element 0's r_i
constexpr uint64_t kMaxTernaryElements = 1ULL << 61;  // so that refine words never wrap

// c = 256 / s, computed once per tensor on the host (IEEE division on every device).
inline float keep_scale(float s) {
  return 256.0f / s;
}

// b_i of element k (0..15) of a Philox block.
TG_HOST_DEVICE uint32_t primary_byte(const Philox4& r, int k) {
  return (r.v[k >> 2] >> (8 * (k & 3))) & 0xFFu;
}

// r_i as the f32 r_i * 2^-24 in [0, 1) (exact).
TG_HOST_DEVICE float refine_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return uniform01(philox_word(seed, stream, kRefineWord0 + i));
}

// The rule above for the element with primary byte b (requires s > 0, c = keep_scale(s)).
TG_HOST_DEVICE bool ternary_keep(float g, float s, float c, uint32_t b, uint64_t seed,
                                 uint64_t stream, uint64_t i) {
#if defined(__CUDA_ARCH__)
  const float a = fabsf(g);
  const float x = __fmul_rn(a, c);
#else
  const float a = std::fabs(g);
  const float x = a * c;  // a single multiply: nothing to contract
#endif
  if (a >= s) return true;
  if (!(a < s)) return false;  // NaN
  if (!(x < 256.0f)) return x >= 256.0f;
  const int hi = static_cast<int>(x);
  const int bi = static_cast<int>(b);
  if (bi != hi) return bi < hi;
  return refine_uniform(seed, stream, i) < x - static_cast<float>(hi);
}

}  // namespace tg::tern
