// TernGrad's per-tensor kernels on the CPU; ternary_cuda.cu mirrors them bit for bit.
//
// n = number of elements of one gradient tensor g (f32, contiguous).
//
// tensor_stats: the tensor is cut into fixed chunks of kStatsChunk elements (independent of the
//   thread count); each chunk is reduced by one thread with 16 double accumulators per quantity
//   (AVX2: 4 vectors of 4 lanes, element i in lane i mod 16), lanes are combined in order, and
//   the chunk partials are combined in chunk order. The result therefore depends on
//   n and g only: the same bits for any OpenMP thread count.
//
// ternarize_pack: one fused pass per tile of kTile elements (a multiple of 64 = one AVX2 batch
//   of 16 Philox blocks, and of 20 = 4 base3 bytes, so tiles start on byte and Philox-block
//   boundaries in both formats). OpenMP hands whole tiles (i.e. output byte ranges) to threads.
//   Per tile: Philox words -> codes + 1 in {0, 1, 2} into a small L1 buffer -> packed bytes.
//   Element i uses word i % 4 of philox_block(seed, stream, i / 4) and is kept iff
//   uniform01(word) * s < |g_i| (one f32 multiply, one compare: no contraction can change it),
//   so the bytes depend on (g, s, seed, stream) only. The AVX2 path runs 16 Philox blocks per
//   batch (4 independent chains of 4 blocks, one block per 64-bit lane) and is checked bit for
//   bit against the scalar philox_block by the tests.
//
// unpack_accumulate: table-driven decode, one table row per byte value (two_bit: 4 codes,
//   base3: 5 codes). Byte values never written by the packer (two_bit digit 3, base3 bytes
//   243..255) decode as code 0.
//
// Napkin math: Philox4x32-10 costs 20 32x32->64 multiplies per 4 elements; on AVX2 that is
// >= ~1.25 cycles per element per core from the multiply/shift pipes alone, so the fused pass
// is compute-bound: measured ~2 cycles per element (1.3 G elements/s per core on a 2.6 GHz EPYC,
// 2.6 G/s = 11 GB/s on 2 cores), while a copy streams ~58 GB/s there (bench_ternary).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

namespace {

constexpr int64_t kStatsChunk = 1 << 14;   // elements per stats partial (64 KiB of f32)
constexpr int64_t kTile = 2560;            // elements per packing tile; % 64 == 0, % 20 == 0
constexpr int64_t kParallelMin = 1 << 16;  // below this many elements: one thread
static_assert(kTile % 64 == 0 && kTile % 20 == 0);

void check_format(PackFormat f, const char* fn) {
  TG_CHECK(f == PackFormat::two_bit || f == PackFormat::base3, fn, ": unknown PackFormat ",
           static_cast<int>(f), " (expected two_bit or base3)");
}

// ---- stats --------------------------------------------------------------------------------

struct Partial {
  double sum = 0, sum_sq = 0, l1 = 0;
  float max_abs = 0;
};

Partial stats_chunk(const float* x, int64_t len) {
  Partial p;
  int64_t i = 0;
#if defined(__AVX2__)
  // 16 elements per step into 4 double accumulators per quantity (independent add chains);
  // lanes are combined in a fixed order below.
  __m256d s[4], q[4], a[4];
  for (int k = 0; k < 4; ++k) s[k] = q[k] = a[k] = _mm256_setzero_pd();
  __m256 m = _mm256_setzero_ps();
  const __m256 abs_ps = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256d abs_pd = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFFFFFFFFFFFFFFLL));
  for (; i + 16 <= len; i += 16) {
    const __m256 f0 = _mm256_loadu_ps(x + i), f1 = _mm256_loadu_ps(x + i + 8);
    // max(|f|, m) keeps m when f is NaN, like std::max(m, |f|) below.
    m = _mm256_max_ps(_mm256_and_ps(f0, abs_ps), m);
    m = _mm256_max_ps(_mm256_and_ps(f1, abs_ps), m);
    const __m256d d[4] = {
        _mm256_cvtps_pd(_mm256_castps256_ps128(f0)), _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1)),
        _mm256_cvtps_pd(_mm256_castps256_ps128(f1)), _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1))};
    for (int k = 0; k < 4; ++k) {
      s[k] = _mm256_add_pd(s[k], d[k]);
      q[k] = _mm256_add_pd(q[k], _mm256_mul_pd(d[k], d[k]));
      a[k] = _mm256_add_pd(a[k], _mm256_and_pd(d[k], abs_pd));
    }
  }
  alignas(32) double sl[4][4], ql[4][4], al[4][4];
  alignas(32) float ml[8];
  for (int k = 0; k < 4; ++k) {
    _mm256_store_pd(sl[k], s[k]);
    _mm256_store_pd(ql[k], q[k]);
    _mm256_store_pd(al[k], a[k]);
  }
  _mm256_store_ps(ml, m);
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 4; ++l) {
      p.sum += sl[k][l];
      p.sum_sq += ql[k][l];
      p.l1 += al[k][l];
    }
  }
  for (float v : ml) p.max_abs = std::max(p.max_abs, v);
#endif
  for (; i < len; ++i) {
    const float f = x[i];
    const double d = f;
    p.sum += d;
    p.sum_sq += d * d;
    p.l1 += std::fabs(d);
    p.max_abs = std::max(p.max_abs, std::fabs(f));
  }
  return p;
}

// ---- ternarize ----------------------------------------------------------------------------

// code + 1 of one element: 2 (kept, g > 0), 0 (kept, g < 0), 1 (dropped). A kept element has
// |g| > u * s >= 0, so it is never zero; NaN is never kept. Mirrors ternary_cuda.cu.
inline uint8_t code_plus_one(float g, float u, float s) {
  if (!(u * s < std::fabs(g))) return 1;
  return g > 0.0f ? 2 : 0;
}

#if defined(__AVX2__)
// 8 Philox blocks per batch as two sets of 4, one block per 64-bit lane: word k of block l is
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

// Philox of the blocks block0 + 4 * set + l (set < kSets, l = 0..3), transposed to element
// order: w[2 * set] holds the elements of blocks +0, +1 of the set, w[2 * set + 1] those of +2,
// +3. A round is a dependency chain of ~6 cycles (multiply, shift, two XORs); kSets independent
// chains keep the multiply and shift pipes busy.
constexpr int kSets = 4;
constexpr int kBatch = 16 * kSets;  // elements per AVX2 batch

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

// codes + 1 of the kBatch elements 4*block0 .. 4*block0 + kBatch - 1 (all < n) into v.
// Requires (uint32_t)block0 <= UINT32_MAX - (kBatch / 4 - 1): the counters share a high word.
inline void codes_batch_avx2(const RoundKeys& key, const float* g, uint64_t block0, __m256 sv,
                             uint64_t stream, uint8_t* v) {
  __m256i w[2 * kSets];
  philox_sets(key, block0, stream, w);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 inv24 = _mm256_set1_ps(1.0f / 16777216.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i one = _mm256_set1_epi32(1);
  for (int q = 0; q < kSets / 2; ++q) {  // 32 elements at a time
    __m256i code[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 gv = _mm256_loadu_ps(g + 32 * q + 8 * j);
      // uniform01: the top 24 bits, converted exactly and scaled by a power of two: exact.
      const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w[4 * q + j], 8)), inv24);
      const __m256 keep =
          _mm256_cmp_ps(_mm256_mul_ps(u, sv), _mm256_and_ps(gv, abs_mask), _CMP_LT_OQ);
      const __m256i kp =
          _mm256_castps_si256(_mm256_and_ps(keep, _mm256_cmp_ps(gv, zero, _CMP_GT_OQ)));
      const __m256i kn =
          _mm256_castps_si256(_mm256_and_ps(keep, _mm256_cmp_ps(gv, zero, _CMP_LT_OQ)));
      code[j] = _mm256_add_epi32(_mm256_sub_epi32(one, kp), kn);  // masks are -1: 1+1 / 1-1
    }
    // 32 x i32 -> 32 x u8 in element order (packs work per 128-bit lane; the permute fixes it).
    const __m256i p01 = _mm256_packs_epi32(code[0], code[1]);
    const __m256i p23 = _mm256_packs_epi32(code[2], code[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 32 * q), bytes);
  }
}
#endif

// codes + 1 of elements [e0, e1) into v[0 .. e1 - e0); e0 % 4 == 0.
void codes_range(const float* g, int64_t e0, int64_t e1, float s, uint64_t seed, uint64_t stream,
                 uint8_t* v) {
  int64_t e = e0;
#if defined(__AVX2__)
  if (e + kBatch <= e1) {
    const RoundKeys key(seed);
    const __m256 sv = _mm256_set1_ps(s);
    for (; e + kBatch <= e1; e += kBatch) {
      const uint64_t b = static_cast<uint64_t>(e) / 4;
      if (static_cast<uint32_t>(b) > 0xFFFFFFFFu - (kBatch / 4 - 1)) break;  // carry: scalar
      codes_batch_avx2(key, g + e, b, sv, stream, v + (e - e0));
    }
  }
#endif
  for (; e < e1; e += 4) {
    const Philox4 r = philox_block(seed, stream, static_cast<uint64_t>(e) / 4);
    const int64_t end = std::min<int64_t>(e + 4, e1);
    for (int64_t i = e; i < end; ++i) v[i - e0] = code_plus_one(g[i], uniform01(r.v[i - e]), s);
  }
}

// Packs v[0 .. len) (len rounded up to whole bytes, padding already in v) into out.
void pack_two_bit(const uint8_t* v, int64_t len, uint8_t* out) {
  const int64_t bytes = (len + 3) / 4;
  int64_t j = 0;
  for (; 2 * j + 2 <= bytes; j += 1) {  // 8 codes -> 2 bytes with 64-bit SWAR
    uint64_t x;
    std::memcpy(&x, v + 8 * j, 8);
    x = (x | (x >> 6)) & 0x000F000F000F000FULL;   // pairs: c0 | c1 << 2 in each 16-bit unit
    x = (x | (x >> 12)) & 0x000000FF000000FFULL;  // quads: c0 | c1 << 2 | c2 << 4 | c3 << 6
    out[2 * j] = static_cast<uint8_t>(x);
    out[2 * j + 1] = static_cast<uint8_t>(x >> 32);
  }
  for (int64_t b = 2 * j; b < bytes; ++b)
    out[b] =
        static_cast<uint8_t>(v[4 * b] | v[4 * b + 1] << 2 | v[4 * b + 2] << 4 | v[4 * b + 3] << 6);
}

void pack_base3(const uint8_t* v, int64_t len, uint8_t* out) {
  const int64_t bytes = (len + 4) / 5;
  for (int64_t b = 0; b < bytes; ++b) {
    const uint8_t* c = v + 5 * b;
    out[b] = static_cast<uint8_t>(c[0] + 3 * (c[1] + 3 * (c[2] + 3 * (c[3] + 3 * c[4]))));
  }
}

// ---- decode tables ------------------------------------------------------------------------

struct Tables {
  alignas(64) int32_t two_bit[256][4];
  alignas(64) int32_t base3[256][5];
  Tables() {
    for (int b = 0; b < 256; ++b) {
      for (int k = 0; k < 4; ++k) {
        const int d = (b >> (2 * k)) & 3;
        two_bit[b][k] = d == 3 ? 0 : d - 1;
      }
      int r = b;
      for (int k = 0; k < 5; ++k) {
        base3[b][k] = b < 243 ? r % 3 - 1 : 0;
        r /= 3;
      }
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

// ---- public -------------------------------------------------------------------------------

size_t packed_bytes(PackFormat f, int64_t n) {
  TG_CHECK(n >= 0, "packed_bytes: element count ", n, " is negative (expected n >= 0)");
  check_format(f, "packed_bytes");
  return f == PackFormat::two_bit ? static_cast<size_t>((n + 3) / 4)
                                  : static_cast<size_t>((n + 4) / 5);
}

double TensorStats::sigma() const {
  if (n <= 0) return 0.0;
  const double m = sum / static_cast<double>(n);
  const double var = sum_sq / static_cast<double>(n) - m * m;
  return var > 0.0 ? std::sqrt(var) : 0.0;
}

void tensor_stats_cpu(const float* g, int64_t n, TensorStats* out) {
  TG_CHECK(n >= 0, "tensor_stats_cpu: element count ", n, " is negative (expected n >= 0)");
  TG_CHECK(out != nullptr, "tensor_stats_cpu: out is null");
  TG_CHECK(n == 0 || g != nullptr, "tensor_stats_cpu: g is null for n = ", n);
  const int64_t chunks = (n + kStatsChunk - 1) / kStatsChunk;
  Partial total;
  if (chunks <= 1) {
    total = stats_chunk(g, n);
  } else {
    std::vector<Partial> part(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = c * kStatsChunk;
      part[c] = stats_chunk(g + b, std::min(kStatsChunk, n - b));
    }
    for (const Partial& p : part) {  // fixed order: the result does not depend on threads
      total.sum += p.sum;
      total.sum_sq += p.sum_sq;
      total.l1 += p.l1;
      total.max_abs = std::max(total.max_abs, p.max_abs);
    }
  }
  out->n = n;
  out->max_abs = total.max_abs;
  out->sum = total.sum;
  out->sum_sq = total.sum_sq;
  out->l1 = total.l1;
}

void ternarize_pack_cpu(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                        PackFormat f, uint8_t* out) {
  TG_CHECK(n >= 0, "ternarize_pack_cpu: element count ", n, " is negative (expected n >= 0)");
  check_format(f, "ternarize_pack_cpu");
  if (n == 0) return;
  TG_CHECK(g != nullptr && out != nullptr, "ternarize_pack_cpu: null pointer for n = ", n);
  const size_t bytes = packed_bytes(f, n);
  if (!(s > 0.0f)) {  // s <= 0 (all-zero gradient): every code is 0
    const uint8_t zero_byte = f == PackFormat::two_bit ? 0x55 : 121;  // digits 1: 1+3+9+27+81
    std::memset(out, zero_byte, bytes);
    // The padding of the last two_bit byte is 0, not digit 1.
    if (f == PackFormat::two_bit && n % 4 != 0)
      out[bytes - 1] = static_cast<uint8_t>(0x55 & ((1u << (2 * (n % 4))) - 1));
    return;
  }
  const int64_t tiles = (n + kTile - 1) / kTile;
  const uint8_t pad = f == PackFormat::two_bit ? 0 : 1;  // two_bit: zero bits; base3: code 0
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t t = 0; t < tiles; ++t) {
    alignas(32) uint8_t v[kTile + 8];
    const int64_t e0 = t * kTile, e1 = std::min(n, e0 + kTile), len = e1 - e0;
    codes_range(g, e0, e1, s, seed, stream, v);
    for (int64_t i = len; i < len + 8; ++i) v[i] = pad;
    if (f == PackFormat::two_bit)
      pack_two_bit(v, len, out + e0 / 4);
    else
      pack_base3(v, len, out + e0 / 5);
  }
}

void unpack_accumulate_cpu(const uint8_t* packed, int64_t n, PackFormat f, int32_t* acc) {
  TG_CHECK(n >= 0, "unpack_accumulate_cpu: element count ", n, " is negative (expected n >= 0)");
  check_format(f, "unpack_accumulate_cpu");
  if (n == 0) return;
  TG_CHECK(packed != nullptr && acc != nullptr, "unpack_accumulate_cpu: null pointer for n = ", n);
  const Tables& tab = tables();
  const int per = f == PackFormat::two_bit ? 4 : 5;
  const int64_t full = n / per, rest = n % per;
  if (f == PackFormat::two_bit) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t j = 0; j < full; ++j) {
      const int32_t* c = tab.two_bit[packed[j]];
      int32_t* a = acc + 4 * j;
      for (int k = 0; k < 4; ++k) a[k] += c[k];
    }
    for (int k = 0; k < rest; ++k) acc[4 * full + k] += tab.two_bit[packed[full]][k];
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t j = 0; j < full; ++j) {
      const int32_t* c = tab.base3[packed[j]];
      int32_t* a = acc + 5 * j;
      for (int k = 0; k < 5; ++k) a[k] += c[k];
    }
    for (int k = 0; k < rest; ++k) acc[5 * full + k] += tab.base3[packed[full]][k];
  }
}

void scale_accumulated_cpu(const int32_t* acc, int64_t n, float scale, float* out) {
  TG_CHECK(n >= 0, "scale_accumulated_cpu: element count ", n, " is negative (expected n >= 0)");
  if (n == 0) return;
  TG_CHECK(acc != nullptr && out != nullptr, "scale_accumulated_cpu: null pointer for n = ", n);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i]) * scale;
}

}  // namespace tg::tern
