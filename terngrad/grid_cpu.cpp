// CPU kernels of grid_kernels.h: the levels by the shared rule (grid_level), Philox words drawn
// 16 blocks at a time with AVX2 (philox_avx2.h), spans of elements packed independently.
#include <algorithm>
#include <cstdint>

#if defined(__AVX2__)
#include "terngrad/philox_avx2.h"
#endif

#include "terngrad/grid_kernels.h"

namespace tg::tern {

size_t grid_packed_bytes(int levels, int64_t n) {
  detail::check_levels(levels, "grid_packed_bytes");
  TG_CHECK(n >= 0, "grid_packed_bytes: element count ", n, " is negative");
  const int64_t per = levels == 4 ? 4 : 3;
  return static_cast<size_t>((n + per - 1) / per);
}

namespace {

// Spans of kSpan elements: a multiple of 64 (one AVX2 batch of 16 Philox blocks, 4 elements a
// block), of 4 and of 3 (one byte of either grid), so every span starts on a Philox-batch and a
// byte boundary and spans can be packed independently (by any thread).
constexpr int64_t kSpan = 192;
constexpr int64_t kParallelMin = 1 << 16;  // below this many elements: one thread

// The Philox round keys of a seed, computed once per call: AVX2's, or none for the scalar path.
#if defined(__AVX2__)
using Keys = philox_avx2::RoundKeys;
#else
struct Keys {
  explicit Keys(uint64_t /*seed*/) {}
};
#endif

// Philox words of the elements [e0, e0 + len) of the stream, words[j] that of element e0 + j
// (philox_word's layout: word i & 3 of block i >> 2); e0 % 64 == 0.
void span_words(uint64_t seed, uint64_t stream, int64_t e0, int64_t len,
                [[maybe_unused]] const Keys& keys, uint32_t* words) {
  int64_t j = 0;
#if defined(__AVX2__)
  for (; j + 64 <= len; j += 64) {
    const auto block0 = static_cast<uint64_t>(e0 + j) >> 2;
    if (static_cast<uint32_t>(block0) > UINT32_MAX - 15) break;  // the batch's low word carries
    __m256i w[2 * philox_avx2::kSets];
    philox_avx2::philox_sets(keys, block0, stream, w);
    for (int t = 0; t < 2 * philox_avx2::kSets; ++t)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + j + 8 * t), w[t]);
  }
#endif
  for (; j < len; j += 4) {
    const Philox4 b = philox_block(seed, stream, static_cast<uint64_t>(e0 + j) >> 2);
    for (int t = 0; t < 4 && j + t < len; ++t) words[j + t] = b.v[t];
  }
}

#if defined(__AVX2__)
// grid_level of 8 elements, the same operations in the same order (so the same bits): NaN ->
// the middle level; a = clamp(g, -s, s); x = (a + s) * k (two roundings, no FMA); j = trunc(x);
// j >= levels - 1 -> levels - 1; else j = max(j, 0) and j + 1 when uniform01(word) < x - j.
inline void levels_8(const float* g, float s, float k, int levels, const uint32_t* words,
                     uint8_t* lv) {
  const __m256 gv = _mm256_loadu_ps(g);
  const __m256 sv = _mm256_set1_ps(s);
  const __m256 a = _mm256_min_ps(_mm256_max_ps(gv, _mm256_set1_ps(-s)), sv);
  const __m256 x = _mm256_mul_ps(_mm256_add_ps(a, sv), _mm256_set1_ps(k));
  __m256i j = _mm256_cvttps_epi32(x);
  const __m256i top = _mm256_cmpgt_epi32(j, _mm256_set1_epi32(levels - 2));
  j = _mm256_max_epi32(j, _mm256_setzero_si256());
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8)),
                                 _mm256_set1_ps(1.0f / 16777216.0f));
  const __m256 up = _mm256_cmp_ps(u, _mm256_sub_ps(x, _mm256_cvtepi32_ps(j)), _CMP_LT_OQ);
  __m256i l = _mm256_sub_epi32(j, _mm256_castps_si256(up));  // + 1 where up (all ones = -1)
  l = _mm256_blendv_epi8(l, _mm256_set1_epi32(levels - 1), top);
  const __m256 nan = _mm256_cmp_ps(gv, gv, _CMP_UNORD_Q);
  l = _mm256_blendv_epi8(l, _mm256_set1_epi32((levels - 1) / 2), _mm256_castps_si256(nan));
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), l);
  for (int t = 0; t < 8; ++t) lv[t] = static_cast<uint8_t>(out[t]);
}
#endif

}  // namespace

// One span at a time: the Philox words of its elements (AVX2: 16 blocks per batch), the level of
// each by grid_level, then its bytes. The bytes are those of the rule evaluated element by
// element with philox_word (the tests check this), for any thread count.
void grid_quantize_pack_cpu(const float* g, int64_t n, float s, int levels, uint64_t seed,
                            uint64_t stream, uint8_t* out) {
  detail::check_levels(levels, "grid_quantize_pack_cpu");
  if (n <= 0) return;
  TG_CHECK(g != nullptr && out != nullptr, "grid_quantize_pack_cpu: null pointer for n = ", n);
  const bool zero = !(s > 0);
  const float k = zero ? 0.0f : grid_scale(levels, s);
  const int middle = (levels - 1) / 2;
  const int64_t per = levels == 4 ? 4 : 3;
  const Keys keys(seed);
  const int64_t spans = (n + kSpan - 1) / kSpan;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t sp = 0; sp < spans; ++sp) {
    const int64_t e0 = sp * kSpan, len = std::min(kSpan, n - e0);
    alignas(32) uint32_t words[kSpan];
    uint8_t lv[kSpan];
    if (zero) {
      std::fill(lv, lv + len, static_cast<uint8_t>(middle));
    } else {
      span_words(seed, stream, e0, len, keys, words);
      int64_t j = 0;
#if defined(__AVX2__)
      for (; j + 8 <= len; j += 8) levels_8(g + e0 + j, s, k, levels, words + j, lv + j);
#endif
      for (; j < len; ++j)
        lv[j] = static_cast<uint8_t>(grid_level(g[e0 + j], s, k, levels, words[j]));
    }
    uint8_t* o = out + e0 / per;
    const int64_t span_bytes = (len + per - 1) / per;
    for (int64_t b = 0; b < span_bytes; ++b) {
      const int64_t j0 = b * per;
      uint32_t v = 0;
      if (levels == 4) {
        for (int t = 0; t < 4 && j0 + t < len; ++t)
          v |= static_cast<uint32_t>(lv[j0 + t]) << (2 * t);
      } else {
        uint32_t mul = 1;
        for (int t = 0; t < 3; ++t, mul *= 5)
          v += mul * static_cast<uint32_t>(j0 + t < len ? lv[j0 + t] : 2);
      }
      o[b] = static_cast<uint8_t>(v);
    }
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
