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
// ternarize_pack: one fused pass per tile of kTile elements (a multiple of 256 = one AVX2 batch
//   of 16 Philox blocks, of 32 = one word of keep bits, and of 5 = one base3 byte, so tiles
//   start on byte, bit-word and Philox-block boundaries in both formats). OpenMP hands whole
//   tiles (i.e. output byte ranges) to threads. Per tile: the rule of ternary_rule.h gives a
//   keep bit and a sign bit per element (AVX2: primary bytes of 16 Philox blocks into an L1
//   buffer, then 8 elements per vector with one f32 multiply and integer compares; the rare
//   b == hi elements go through the scalar rule), then the bits are packed: two_bit by
//   spreading 32 keep/sign bits into 64 code bits (BMI2 pdep), base3 by a 1024-entry table per
//   5 elements. The AVX2 Philox is checked bit for bit against the scalar philox_block and the
//   whole kernel against a naive reference of the rule by the tests.
//
// unpack_accumulate: table-driven decode, one table row per byte value (two_bit: 4 codes,
//   base3: 5 codes). Byte values never written by the packer (two_bit digit 3, base3 bytes
//   243..255) decode as code 0.
//
// Napkin math: Philox4x32-10 costs 20 32x32->64 multiplies per block. Drawing a 32-bit word per
// element made the pass compute-bound at ~2 cycles per element (2.6 G elements/s on 2 Zen 4
// cores, 11 GB/s against a ~70 GB/s copy). One block per 16 elements cuts the Philox share to
// ~0.35 cycles per element; the rest is ~12 vector ops per 8 elements.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/philox_avx2.h"
#include "terngrad/ternary_kernels.h"
#include "terngrad/ternary_rule.h"

namespace tg::tern {

namespace {

constexpr int64_t kStatsChunk = 1 << 14;   // elements per stats partial (64 KiB of f32)
constexpr int64_t kTile = 2560;            // elements per packing tile; % 256 == 0, % 5 == 0
constexpr int64_t kParallelMin = 1 << 16;  // below this many elements: one thread
static_assert(kTile % 256 == 0 && kTile % 5 == 0);

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

// Keep and sign bits of one tile: bit k of keep[w] / neg[w] is element tile_start + 32 w + k.
// One spare zero word past the end lets the base3 packer read 64-bit windows.
struct TileBits {
  uint32_t keep[kTile / 32 + 2];
  uint32_t neg[kTile / 32 + 2];
};

// Elements [e, e1) of the tile starting at t0 by the rule of ternary_rule.h, one Philox block
// per 16 elements; e % 16 == 0.
void decide_scalar(const float* g, int64_t t0, int64_t e, int64_t e1, float s, float c,
                   uint64_t seed, uint64_t stream, TileBits& bits) {
  for (; e < e1; e += kCodesPerBlock) {
    const Philox4 r = philox_block(seed, stream, static_cast<uint64_t>(e / kCodesPerBlock));
    const int64_t end = std::min<int64_t>(e + kCodesPerBlock, e1);
    for (int64_t i = e; i < end; ++i) {
      const int64_t b = i - t0;
      const uint32_t bit = 1u << (b % 32);
      if (ternary_keep(g[i], s, c, primary_byte(r, static_cast<int>(i - e)), seed, stream,
                       static_cast<uint64_t>(i)))
        bits.keep[b / 32] |= bit;
      if (std::signbit(g[i])) bits.neg[b / 32] |= bit;
    }
  }
}

#if defined(__AVX2__)
using philox_avx2::kSets;
using philox_avx2::philox_sets;
using philox_avx2::RoundKeys;
constexpr int kBatchBlocks = 4 * kSets;                    // Philox blocks per AVX2 batch
constexpr int64_t kBatch = kBatchBlocks * kCodesPerBlock;  // elements per AVX2 batch
static_assert(kTile % kBatch == 0);

// 32 lanes of -1/0 (four vectors of 8 x i32, or the sign of 8 x f32 read as i32) -> 32 bits in
// element order: signed saturating packs keep the sign, the permute undoes their per-128-bit-lane
// interleave.
inline uint32_t sign_bits_32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
  return static_cast<uint32_t>(_mm256_movemask_epi8(
      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))));
}

// The kBatch elements e .. e + kBatch - 1 (all < n) of the tile starting at t0: primary bytes
// of 16 blocks into an L1 buffer, then 8 elements per vector: x = |g| * c, hi = trunc(min(256,
// x)) (NaN stays NaN through min and truncates to INT_MIN: dropped), keep iff b < hi; b == hi
// (probability <= 1/256) goes to the scalar rule. No |g| >= s test is needed here: such an
// element has x >= 256 (hi = 256: kept) or x a rounding below 256 (hi = 255: kept unless
// b == 255, which the scalar rule keeps). Requires (uint32_t)(e / 16) <= UINT32_MAX - 15.
inline void decide_batch_avx2(const RoundKeys& key, const float* g, int64_t t0, int64_t e, float s,
                              float c, uint64_t seed, uint64_t stream, TileBits& bits) {
  alignas(32) uint8_t bytes[kBatch];
  {
    __m256i w[2 * kSets];
    philox_sets(key, static_cast<uint64_t>(e / kCodesPerBlock), stream, w);
    for (int t = 0; t < 2 * kSets; ++t)
      _mm256_store_si256(reinterpret_cast<__m256i*>(bytes + 32 * t), w[t]);
  }
  const __m256 cv = _mm256_set1_ps(c), v256 = _mm256_set1_ps(256.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int q = 0; q < kBatch / 32; ++q) {
    __m256i gi[4], lt[4], same[4];
    for (int j = 0; j < 4; ++j) {
      const int o = 32 * q + 8 * j;
      const __m256 gv = _mm256_loadu_ps(g + e + o);
      const __m256i hi =
          _mm256_cvttps_epi32(_mm256_min_ps(v256, _mm256_mul_ps(_mm256_and_ps(gv, abs_mask), cv)));
      const __m256i b =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + o)));
      gi[j] = _mm256_castps_si256(gv);
      lt[j] = _mm256_cmpgt_epi32(hi, b);
      same[j] = _mm256_cmpeq_epi32(hi, b);
    }
    uint32_t keep = sign_bits_32(lt[0], lt[1], lt[2], lt[3]);
    const __m256i any_same =
        _mm256_or_si256(_mm256_or_si256(same[0], same[1]), _mm256_or_si256(same[2], same[3]));
    const int64_t base = e + 32 * q;
    if (!_mm256_testz_si256(any_same, any_same)) {  // b == hi: the scalar rule decides
      uint32_t eq = sign_bits_32(same[0], same[1], same[2], same[3]);
      while (eq != 0) {
        const int k = __builtin_ctz(eq);
        eq &= eq - 1;
        const int64_t i = base + k;
        if (ternary_keep(g[i], s, c, bytes[32 * q + k], seed, stream, static_cast<uint64_t>(i)))
          keep |= 1u << k;
      }
    }
    const int64_t w = (base - t0) / 32;
    bits.keep[w] = keep;
    bits.neg[w] = sign_bits_32(gi[0], gi[1], gi[2], gi[3]);
  }
}
#endif

// Keep/sign bits of the tile [t0, t1) (t0 % kTile == 0); the words past t1 are zero.
void decide_tile(const float* g, int64_t t0, int64_t t1, float s, float c, uint64_t seed,
                 uint64_t stream, TileBits& bits) {
  std::memset(&bits, 0, sizeof bits);
  int64_t e = t0;
#if defined(__AVX2__)
  if (e + kBatch <= t1) {
    const RoundKeys key(seed);
    for (; e + kBatch <= t1; e += kBatch) {
      const uint64_t b = static_cast<uint64_t>(e / kCodesPerBlock);
      if (static_cast<uint32_t>(b) > 0xFFFFFFFFu - (kBatchBlocks - 1)) break;  // carry: scalar
      decide_batch_avx2(key, g, t0, e, s, c, seed, stream, bits);
    }
  }
#endif
  decide_scalar(g, t0, e, t1, s, c, seed, stream, bits);
}

// 32 bits -> 64 bits, bit k to bit 2k.
inline uint64_t spread_bits(uint32_t v) {
#if defined(__BMI2__)
  return _pdep_u64(v, 0x5555555555555555ULL);
#else
  uint64_t x = v;
  x = (x | x << 16) & 0x0000FFFF0000FFFFULL;
  x = (x | x << 8) & 0x00FF00FF00FF00FFULL;
  x = (x | x << 4) & 0x0F0F0F0F0F0F0F0FULL;
  x = (x | x << 2) & 0x3333333333333333ULL;
  return (x | x << 1) & 0x5555555555555555ULL;
#endif
}

// two_bit bytes of a tile of len elements: per 32 elements, code + 1 = 2 (kept, positive),
// 0 (kept, negative), 1 (dropped) is low bit = dropped, high bit = kept and positive.
void pack_two_bit(const TileBits& bits, int64_t len, uint8_t* out) {
  const int64_t words = (len + 31) / 32;
  for (int64_t w = 0; w < words; ++w) {
    const int64_t valid = std::min<int64_t>(32, len - 32 * w);
    const uint32_t live = valid == 32 ? 0xFFFFFFFFu : (1u << valid) - 1;  // padding bits: 0
    const uint32_t k = bits.keep[w];
    const uint64_t x = spread_bits(~k & live) | spread_bits(k & ~bits.neg[w] & live) << 1;
    if (valid == 32) {
      std::memcpy(out + 8 * w, &x, 8);
    } else {
      for (int64_t b = 0; b < (valid + 3) / 4; ++b)
        out[8 * w + b] = static_cast<uint8_t>(x >> (8 * b));
    }
  }
}

// base3 byte of five (keep, sign) pairs: index keep bits | sign bits << 5.
struct Base3Table {
  uint8_t byte[1024];
  Base3Table() {
    for (int idx = 0; idx < 1024; ++idx) {
      int v = 0, p = 1;
      for (int k = 0; k < 5; ++k, p *= 3) {
        const bool kept = (idx >> k) & 1, negative = (idx >> (5 + k)) & 1;
        v += (kept ? (negative ? 0 : 2) : 1) * p;
      }
      byte[idx] = static_cast<uint8_t>(v);
    }
  }
};

// base3 bytes of a tile of len elements (missing elements of the last byte: keep bit 0 = code 0).
void pack_base3(const TileBits& bits, int64_t len, uint8_t* out) {
  static const Base3Table table;
  const int64_t bytes = (len + 4) / 5;
  for (int64_t j = 0; j < bytes; j += 6) {  // 6 bytes = 30 bits from one 64-bit window
    const int64_t p = 5 * j, w = p / 32, sh = p % 32;
    const uint64_t kw = (bits.keep[w] | static_cast<uint64_t>(bits.keep[w + 1]) << 32) >> sh;
    const uint64_t nw = (bits.neg[w] | static_cast<uint64_t>(bits.neg[w + 1]) << 32) >> sh;
    const int64_t m_end = std::min<int64_t>(6, bytes - j);
    for (int64_t m = 0; m < m_end; ++m)
      out[j + m] = table.byte[((kw >> (5 * m)) & 31) | ((nw >> (5 * m)) & 31) << 5];
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

// acc[per * j + k] += rows[byte j of vector v][k] for every vector v, in chunks of kRowChunk
// bytes so that the chunk's accumulators stay in L1 while all vectors are added to them.
// Integer adds: the order of vectors and chunks does not change the result.
template <int Per>
void accumulate_rows(const int32_t (*rows)[Per], const uint8_t* packed, int64_t count,
                     size_t stride, int64_t n, int32_t* acc) {
  constexpr int64_t kRowChunk = 1024;  // 4-5 K accumulators = 16-20 KiB
  const int64_t full = n / Per, rest = n % Per;
  const int64_t chunks = (full + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static) if (full * count >= kParallelMin / Per)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t j0 = c * kRowChunk, j1 = std::min(full, j0 + kRowChunk);
    for (int64_t v = 0; v < count; ++v) {
      const uint8_t* p = packed + v * stride;
      for (int64_t j = j0; j < j1; ++j) {
        const int32_t* r = rows[p[j]];
        int32_t* a = acc + Per * j;
        for (int k = 0; k < Per; ++k) a[k] += r[k];
      }
    }
  }
  for (int64_t v = 0; v < count && rest > 0; ++v)
    for (int k = 0; k < rest; ++k) acc[Per * full + k] += rows[packed[v * stride + full]][k];
}

}  // namespace

// ---- public -------------------------------------------------------------------------------

size_t packed_bytes(PackFormat f, int64_t n) {
  TG_CHECK(n >= 0, "packed_bytes: element count ", n, " is negative (expected n >= 0)");
  detail::check_format(f, "packed_bytes");
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

double clipped_sum_sq_cpu(const float* g, int64_t n, float s) {
  TG_CHECK(n >= 0, "clipped_sum_sq_cpu: element count ", n, " is negative (expected n >= 0)");
  TG_CHECK(n == 0 || g != nullptr, "clipped_sum_sq_cpu: g is null for n = ", n);
  const double cap = static_cast<double>(s) * s;
  double q = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(g[i]) * g[i];
    q += d < cap ? d : cap;
  }
  return q;
}

void ternarize_pack_cpu(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                        PackFormat f, uint8_t* out) {
  if (!detail::ternarize_args(g, n, f, out, "ternarize_pack_cpu")) return;
  const size_t bytes = packed_bytes(f, n);
  if (!(s > 0.0f)) {  // s <= 0 (all-zero gradient): every code is 0
    const uint8_t zero_byte = f == PackFormat::two_bit ? 0x55 : 121;  // digits 1: 1+3+9+27+81
    std::memset(out, zero_byte, bytes);
    // The padding of the last two_bit byte is 0, not digit 1.
    if (f == PackFormat::two_bit && n % 4 != 0)
      out[bytes - 1] = static_cast<uint8_t>(0x55 & ((1u << (2 * (n % 4))) - 1));
    return;
  }
  TG_CHECK(static_cast<uint64_t>(n) <= kMaxTernaryElements, "ternarize_pack_cpu: ", n,
           " elements exceed the limit of the random-number layout (", kMaxTernaryElements, ")");
  const float c = keep_scale(s);
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t t = 0; t < tiles; ++t) {
    TileBits bits;
    const int64_t e0 = t * kTile, e1 = std::min(n, e0 + kTile);
    decide_tile(g, e0, e1, s, c, seed, stream, bits);
    if (f == PackFormat::two_bit)
      pack_two_bit(bits, e1 - e0, out + e0 / 4);
    else
      pack_base3(bits, e1 - e0, out + e0 / 5);
  }
}

void unpack_accumulate_cpu(const uint8_t* packed, int64_t n, PackFormat f, int32_t* acc) {
  unpack_accumulate_many_cpu(packed, 1, 0, n, f, acc);
}

void unpack_accumulate_many_cpu(const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                                PackFormat f, int32_t* acc) {
  if (!detail::unpack_args(packed, count, stride, n, f, acc, "unpack_accumulate_cpu")) return;
  const Tables& tab = tables();
  if (f == PackFormat::two_bit)
    accumulate_rows(tab.two_bit, packed, count, stride, n, acc);
  else
    accumulate_rows(tab.base3, packed, count, stride, n, acc);
}

void scale_accumulated_cpu(const int32_t* acc, int64_t n, float scale, float* out) {
  if (!detail::scale_args(acc, n, out, "scale_accumulated_cpu")) return;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i]) * scale;
}

// ---- batches: the per-tensor kernels in order -----------------------------------------------

namespace {
// Error feedback of one task: v = residual + g in place, the codes of v, then residual = v - s *
// code, the codes decoded kResidualChunk at a time. Element-wise: the same bits for any thread
// count.
void pack_with_residual(const PackTask& t, uint64_t seed, PackFormat f) {
  TG_CHECK(t.n >= 0, "ternarize_pack_cpu: element count ", t.n, " is negative (expected n >= 0)");
  if (t.n == 0) return;
  TG_CHECK(t.g != nullptr, "ternarize_pack_cpu: null pointer for n = ", t.n);
  float* r = t.residual;
  const float* g = t.g;
#pragma omp parallel for schedule(static) if (t.n >= kParallelMin)
  for (int64_t i = 0; i < t.n; ++i) r[i] = r[i] + g[i];
  ternarize_pack_cpu(r, t.n, t.s, seed, t.stream, f, t.out);
  std::vector<int32_t> code(static_cast<size_t>(std::min(kResidualChunk, t.n)));
  for (int64_t c0 = 0; c0 < t.n; c0 += kResidualChunk) {
    const int64_t len = std::min(kResidualChunk, t.n - c0);
    std::fill(code.begin(), code.begin() + len, 0);
    unpack_accumulate_cpu(t.out + packed_bytes(f, c0), len, f, code.data());
    for (int64_t i = 0; i < len; ++i) r[c0 + i] = r[c0 + i] - static_cast<float>(code[i]) * t.s;
  }
}
}  // namespace

void ternarize_pack_batch_cpu(const PackTask* tasks, size_t count, uint64_t seed, PackFormat f) {
  TG_CHECK(count == 0 || tasks != nullptr, "ternarize_pack_batch_cpu: tasks is null");
  for (size_t i = 0; i < count; ++i) {
    const PackTask& t = tasks[i];
    if (t.residual != nullptr)
      pack_with_residual(t, seed, f);
    else
      ternarize_pack_cpu(t.g, t.n, t.s, seed, t.stream, f, t.out);
    if (t.scaler_out != nullptr) std::memcpy(t.scaler_out, &t.s, sizeof t.s);
  }
}

void tensor_stats_batch_cpu(const StatsTask* tasks, size_t count, TensorStats* out) {
  TG_CHECK(count == 0 || (tasks != nullptr && out != nullptr),
           "tensor_stats_batch_cpu: tasks or out is null");
  for (size_t i = 0; i < count; ++i) tensor_stats_cpu(tasks[i].g, tasks[i].n, out + i);
}

void clipped_sum_sq_batch_cpu(const StatsTask* tasks, size_t count, const float* scalers,
                              double* out) {
  TG_CHECK(count == 0 || (tasks != nullptr && scalers != nullptr && out != nullptr),
           "clipped_sum_sq_batch_cpu: tasks, scalers or out is null");
  for (size_t i = 0; i < count; ++i)
    out[i] = clipped_sum_sq_cpu(tasks[i].g, tasks[i].n, scalers[i]);
}

void scale_accumulated_batch_cpu(const ScaleTask* tasks, size_t count) {
  TG_CHECK(count == 0 || tasks != nullptr, "scale_accumulated_batch_cpu: tasks is null");
  for (size_t i = 0; i < count; ++i) {
    const ScaleTask& t = tasks[i];
    scale_accumulated_cpu(t.acc, t.n, t.scale, t.out);
  }
}

void unpack_accumulate_batch_cpu(const UnpackTask* tasks, size_t count, PackFormat f) {
  TG_CHECK(count == 0 || tasks != nullptr, "unpack_accumulate_batch_cpu: tasks is null");
  for (size_t i = 0; i < count; ++i) {
    const UnpackTask& t = tasks[i];
    unpack_accumulate_many_cpu(t.packed, t.count, t.stride, t.n, f, t.acc);
  }
}

}  // namespace tg::tern
