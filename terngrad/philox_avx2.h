// AVX2 Philox4x32-10 for the CPU kernels (ternary_cpu.cpp, grid_cpu.cpp): 16 consecutive
// blocks at a time, bit for bit philox_block of nn/core/philox.h (checked by the kernels' tests
// against references that call philox_block / philox_word per element). Internal to terngrad/.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>

#include <cstdint>

#include "nn/core/philox.h"

namespace tg::tern::philox_avx2 {

// 16 Philox blocks per batch as four sets of 4, one block per 64-bit lane: word k of block l is
// the low half of lane l of c[k]. _mm256_mul_epu32 reads only low halves and returns the full
// 64-bit product, so a round is 2 multiplies, 2 shifts and 4 XORs per set; the high halves
// collect garbage that is never read.
struct RoundKeys {  // the 10 round keys of philox4x32_10, broadcast once per tile
  __m256i k0[10], k1[10];
  explicit RoundKeys(uint64_t seed) {
    uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        a += philox_detail::kW0;
        b += philox_detail::kW1;
      }
      k0[r] = _mm256_set1_epi32(static_cast<int>(a));
      k1[r] = _mm256_set1_epi32(static_cast<int>(b));
    }
  }
};

// Philox of the blocks block0 + 4 * set + l (set < kSets, l = 0..3), transposed to block order:
// w[2 * set] holds the words of blocks +0, +1 of the set, w[2 * set + 1] those of +2, +3. A
// round is a dependency chain of ~6 cycles (multiply, shift, two XORs); kSets independent chains
// keep the multiply and shift pipes busy.
constexpr int kSets = 4;

inline void philox_sets(const RoundKeys& key, uint64_t block0, uint64_t stream,
                        __m256i w[2 * kSets]) {
  const uint32_t lo = static_cast<uint32_t>(block0);  // no carry: checked by the caller
  __m256i c0[kSets], c1[kSets], c2[kSets], c3[kSets];
  for (int t = 0; t < kSets; ++t) {
    c0[t] = _mm256_add_epi64(_mm256_set1_epi64x(lo + 4u * t), _mm256_setr_epi64x(0, 1, 2, 3));
    c1[t] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(block0 >> 32)));
    c2[t] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
    c3[t] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
  }
  const __m256i m0 = _mm256_set1_epi64x(philox_detail::kM0);
  const __m256i m1 = _mm256_set1_epi64x(philox_detail::kM1);
  for (int r = 0; r < 10; ++r) {
    for (int t = 0; t < kSets; ++t) {
      const __m256i p0 = _mm256_mul_epu32(c0[t], m0), p1 = _mm256_mul_epu32(c2[t], m1);
      c0[t] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[t]), key.k0[r]);
      c2[t] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[t]), key.k1[r]);
      c1[t] = p1;
      c3[t] = p0;
    }
  }
  for (int t = 0; t < kSets; ++t) {
    const __m256i w01 = _mm256_blend_epi32(c0[t], _mm256_slli_epi64(c1[t], 32), 0xAA);
    const __m256i w23 = _mm256_blend_epi32(c2[t], _mm256_slli_epi64(c3[t], 32), 0xAA);
    const __m256i lo_blocks = _mm256_unpacklo_epi64(w01, w23);  // blocks 0 | 2
    const __m256i hi_blocks = _mm256_unpackhi_epi64(w01, w23);  // blocks 1 | 3
    w[2 * t] = _mm256_permute2x128_si256(lo_blocks, hi_blocks, 0x20);
    w[2 * t + 1] = _mm256_permute2x128_si256(lo_blocks, hi_blocks, 0x31);
  }
}

}  // namespace tg::tern::philox_avx2
#endif
