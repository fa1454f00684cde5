// TernGrad's finer relatives (CompressionOptions::levels): stochastic rounding onto a uniform
// grid of L = 4 or 5 levels spanning [-s, s], packed, with exact integer sums. CPU and CUDA with
// mirror-image signatures (raw pointers; device pointers for the _cuda variants); the CUDA
// kernels produce the same bytes (the rule below is one host/device function).
//
// Level j in 0 .. L-1 has the value (2j - (L-1)) * s / (L-1); its integer code v = 2j - (L-1):
//   L = 4: v in {-3, -1, 1, 3}, values {-s, -s/3, s/3, s}: every state of 2 bits used (TernGrad's
//          two_bit format leaves one unused), no zero level;
//   L = 5: v in {-4, -2, 0, 2, 4}, values {-s, -s/2, 0, s/2, s}.
// (L = 3 is TernGrad's own grid, v in {-2, 0, 2}; it has its own kernels, ternary_kernels.h.)
// The codes of N workers sharing s sum exactly to an integer in [-(L-1) N, (L-1) N]; the average
// is (s / ((L-1) N)) * sum.
//
//   grid_quantize_pack: x = (min(max(g_i, -s), s) + s) * k with k = (L-1) / (2s) (grid_scale,
//     one IEEE division per tensor on the host; then one add and one multiply, never fused),
//     j = floor(x), then j + 1 when u_i < x - j, u_i = uniform01(philox_word(seed, stream, i)):
//     E[value] = g_i clipped to [-s, s], up to the f32 rounding of x (and the 24-bit u_i).
//     s <= 0 (an all-zero gradient) or a NaN g_i: the middle level floor((L-1)/2).
//     Packing: L = 4: 4 levels per byte, element i at bits 2*(i % 4), the unused bits of the last
//     byte 0 (ceil(n / 4) bytes, 2 bits per element); L = 5: 3 per byte, byte = j_0 + 5 j_1 +
//     25 j_2 in 0 .. 124, missing elements of the last byte at level 2 (ceil(n / 3) bytes, 2.67
//     bits per element).
//   grid_unpack_accumulate: acc_i += v_i (int32); a byte never written (L = 5: above 124) adds 0.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "nn/core/error.h"
#include "nn/core/philox.h"

namespace tg::tern {

// Bytes of n elements' levels on the grid of L levels (4 or 5).
size_t grid_packed_bytes(int levels, int64_t n);

// k = (L - 1) / (2 s), on the host (s > 0).
inline float grid_scale(int levels, float s) {
  return static_cast<float>(levels - 1) / (2.0f * s);
}

// The level of an element (the rule above; s > 0, k = grid_scale(L, s)); `word` is its Philox
// word, philox_word(seed, stream, i) (callers may take it from a block shared by 4 elements).
TG_HOST_DEVICE int grid_level(float g, float s, float k, int levels, uint32_t word) {
  if (!(g == g)) return (levels - 1) / 2;  // NaN
  const float a = g < -s ? -s : (g > s ? s : g);
#if defined(__CUDA_ARCH__)
  const float x = __fmul_rn(__fadd_rn(a, s), k);
#else
  const float sum = a + s;  // separate statements: nothing to contract
  const float x = sum * k;
#endif
  int j = static_cast<int>(x);
  if (j >= levels - 1) return levels - 1;
  if (j < 0) j = 0;
  return uniform01(word) < x - static_cast<float>(j) ? j + 1 : j;
}

void grid_quantize_pack_cpu(const float* g, int64_t n, float s, int levels, uint64_t seed,
                            uint64_t stream, uint8_t* out);
void grid_unpack_accumulate_cpu(const uint8_t* packed, int64_t n, int levels, int32_t* acc);

void grid_quantize_pack_cuda(const float* g, int64_t n, float s, int levels, uint64_t seed,
                             uint64_t stream, uint8_t* out);
void grid_unpack_accumulate_cuda(const uint8_t* packed, int64_t n, int levels, int32_t* acc);

namespace detail {
inline void check_levels(int levels, const char* fn) {
  TG_CHECK(levels == 4 || levels == 5, fn, ": grid of ", levels, " levels (expected 4 or 5)");
}
}  // namespace detail

}  // namespace tg::tern
