// Baseline compressors on the CPU: fp16, QSGD and 1-bit SGD with error feedback (formats and
// semantics in baseline_kernels.h); mirrors baseline_cuda.cu bit for bit.
//
//   fp16:   F16C (_mm256_cvtps_ph / _mm256_cvtph_ps) 8 elements at a time, a portable scalar
//           conversion for the tail (and for builds without F16C); NaNs are canonicalized after
//           the vector conversion. OpenMP over 8-element groups.
//   qsgd:   one bucket per iteration, OpenMP over buckets. The norm follows the canonical order
//           of baseline_kernels.h (T lanes in double, then the warp-shuffle tree replayed on the
//           host); codes go through a 64-bit LSB-first bit writer.
//   onebit: pass 1 over chunks of kOnebitChunk (OpenMP): v = g + residual stored into residual,
//           per-chunk sums in the canonical order; pass 2 folds the chunk sums; pass 3 writes the
//           bits and subtracts the reconstruction, one output byte per iteration.
// GCC contracts a * b + c into an FMA in C++ mode, so every multiply-add whose rounding matters
// is written as an explicit std::fma (the CUDA side uses __fmaf_rn), and the remaining products
// are exact (float x float or float x level in double).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/baseline_kernels.h"

#if defined(__F16C__) && defined(__AVX__) && defined(__FMA__)
#include <immintrin.h>
#define TG_BASELINE_F16C 1
#else
#define TG_BASELINE_F16C 0
#endif

static_assert(std::endian::native == std::endian::little, "wire formats are little-endian");

namespace tg::tern {

namespace {

constexpr int64_t kOmpMinElements = 1
                                    << 15;  // below this, thread start-up costs more than it saves

using detail::check_n;
using detail::check_qsgd;

// ---- fp16 scalar conversions (the reference for the F16C path) ------------------------------

uint16_t float_to_half(float x) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;    // NaN: canonical quiet NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;   // >= 65520 (halfway to 2^16, tie -> even): inf
  if (a >= 0x38800000u) {                        // >= 2^-14: normal half
    const uint32_t rebiased = a - (112u << 23);  // exponent bias 127 -> 15
    // Round to nearest even at bit 13; a carry into the exponent is the right answer.
    return sign | static_cast<uint16_t>((rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13);
  }
  // Half denormal or zero: adding 0.5 aligns the float's ulp (2^-24) with the half denormal step,
  // so the float addition itself rounds to nearest even; the low bits are the half's bits.
  const float shifted = std::bit_cast<float>(a) + 0.5f;
  return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) - 0x3F000000u);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1p-24f;  // exact
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(v));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline void store_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_f32(uint8_t* p, float v) {
  std::memcpy(p, &v, 4);
}
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- canonical block sum (mirror of tg::cuda::block_reduce with +) ----------------------------

template <typename T>
T warp_fold(const T* in) {
  T a[32];
  for (int l = 0; l < 32; ++l) a[l] = in[l];
  // Lane l of the butterfly adds lane l ^ o; lane 0's result only needs lanes l < o, l ^ o = l + o.
  for (int o = 16; o > 0; o >>= 1)
    for (int l = 0; l < o; ++l) a[l] = a[l] + a[l + o];
  return a[0];
}

template <typename T>
T block_fold(const T* lanes, int threads) {
  const int nwarps = threads / 32;
  T w[32];
  for (int l = 0; l < 32; ++l) w[l] = l < nwarps ? warp_fold(lanes + 32 * l) : T(0);
  return warp_fold(w);
}

// ---- qsgd element code / value (mirrored in baseline_cuda.cu) --------------------------------

inline uint32_t qsgd_code(float v, float norm, int levels, uint32_t word) {
  if (!(norm > 0.0f) || !std::isfinite(norm)) return 0;
  const double s = levels;
  double r = std::fabs(static_cast<double>(v)) * s / static_cast<double>(norm);  // |v| s exact
  if (!(r >= 0.0)) r = 0.0;
  if (r > s) r = s;
  const double fl = std::floor(r);
  uint32_t level = static_cast<uint32_t>(fl);
  if (level < static_cast<uint32_t>(levels) && static_cast<double>(uniform01(word)) < r - fl)
    ++level;
  return level == 0 ? 0u : (level << 1) | (v < 0.0f ? 1u : 0u);
}

inline float qsgd_value(uint32_t code, float norm, int levels) {
  const double d = static_cast<double>(norm) * static_cast<double>(code >> 1) / levels;
  const float f = static_cast<float>(d);
  return (code & 1u) ? -f : f;
}

}  // namespace

// ============================================ sizes ============================================

size_t fp16_packed_bytes(int64_t n) {
  check_n(n, "fp16_packed_bytes");
  return 2 * static_cast<size_t>(n);
}

size_t qsgd_packed_bytes(int64_t n, int levels, int64_t bucket) {
  check_qsgd(n, levels, bucket, "qsgd_packed_bytes");
  const int64_t w = qsgd_code_bits(levels);
  const int64_t full = n / bucket, rem = n % bucket;
  size_t bytes = static_cast<size_t>(full) * static_cast<size_t>(4 + (bucket * w + 7) / 8);
  if (rem > 0) bytes += static_cast<size_t>(4 + (rem * w + 7) / 8);
  return bytes;
}

size_t onebit_packed_bytes(int64_t n) {
  check_n(n, "onebit_packed_bytes");
  return 8 + static_cast<size_t>((n + 7) / 8);
}

// ============================================ fp16 =============================================

void fp16_pack_cpu(const float* g, int64_t n, uint8_t* out) {
  check_n(n, "fp16_pack_cpu");
  const int64_t groups = n / 8;
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t k = 0; k < groups; ++k) {
    const int64_t i = 8 * k;
#if TG_BASELINE_F16C
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)  // rare: canonical NaNs
      for (int64_t j = i; j < i + 8; ++j) store_u16(out + 2 * j, float_to_half(g[j]));
#else
    for (int64_t j = i; j < i + 8; ++j) store_u16(out + 2 * j, float_to_half(g[j]));
#endif
  }
  for (int64_t j = 8 * groups; j < n; ++j) store_u16(out + 2 * j, float_to_half(g[j]));
}

void fp16_unpack_accumulate_cpu(const uint8_t* in, int64_t n, float scale, float* acc) {
  check_n(n, "fp16_unpack_accumulate_cpu");
  const int64_t groups = n / 8;
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t k = 0; k < groups; ++k) {
    const int64_t i = 8 * k;
#if TG_BASELINE_F16C
    const __m256 h = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_set1_ps(scale), h, _mm256_loadu_ps(acc + i)));
#else
    for (int64_t j = i; j < i + 8; ++j)
      acc[j] = std::fma(scale, half_to_float(load_u16(in + 2 * j)), acc[j]);
#endif
  }
  for (int64_t j = 8 * groups; j < n; ++j)
    acc[j] = std::fma(scale, half_to_float(load_u16(in + 2 * j)), acc[j]);
}

// ============================================ qsgd =============================================

void qsgd_pack_cpu(const float* g, int64_t n, int levels, int64_t bucket, uint64_t seed,
                   uint64_t stream, uint8_t* out) {
  check_qsgd(n, levels, bucket, "qsgd_pack_cpu");
  const int w = qsgd_code_bits(levels);
  const int threads = detail::qsgd_reduce_threads(bucket);
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int64_t stride = 4 + (bucket * w + 7) / 8;
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t b = 0; b < buckets; ++b) {
    const int64_t start = b * bucket, len = std::min(bucket, n - start);
    const float* v = g + start;
    uint8_t* o = out + b * stride;

    double lanes[detail::kReduceThreads] = {};
    for (int64_t base = 0; base < len; base += threads) {
      const int m = static_cast<int>(std::min<int64_t>(threads, len - base));
      for (int t = 0; t < m; ++t) {
        const double x = v[base + t];
        lanes[t] += x * x;  // exact square: contraction cannot change it
      }
    }
    const float norm = static_cast<float>(std::sqrt(block_fold(lanes, threads)));
    store_f32(o, norm);

    uint8_t* codes = o + 4;
    uint64_t bits = 0;
    int nbits = 0;
    Philox4 r{};
    uint64_t cur_block = ~0ull;
    for (int64_t j = 0; j < len; ++j) {
      const uint64_t i = static_cast<uint64_t>(start + j);
      if ((i >> 2) != cur_block) {
        cur_block = i >> 2;
        r = philox_block(seed, stream, cur_block);
      }
      bits |= static_cast<uint64_t>(qsgd_code(v[j], norm, levels, r.v[i & 3])) << nbits;
      nbits += w;
      while (nbits >= 8) {
        *codes++ = static_cast<uint8_t>(bits);
        bits >>= 8;
        nbits -= 8;
      }
    }
    if (nbits > 0) *codes = static_cast<uint8_t>(bits);  // zero padding
  }
}

void qsgd_unpack_accumulate_cpu(const uint8_t* in, int64_t n, int levels, int64_t bucket,
                                float scale, float* acc) {
  check_qsgd(n, levels, bucket, "qsgd_unpack_accumulate_cpu");
  const int w = qsgd_code_bits(levels);
  const uint32_t mask = (1u << w) - 1u;
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int64_t stride = 4 + (bucket * w + 7) / 8;
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t b = 0; b < buckets; ++b) {
    const int64_t start = b * bucket, len = std::min(bucket, n - start);
    const uint8_t* o = in + b * stride;
    const float norm = load_f32(o);
    const uint8_t* codes = o + 4;
    float* a = acc + start;
    uint64_t bits = 0;
    int nbits = 0;
    for (int64_t j = 0; j < len; ++j) {
      while (nbits < w) {
        bits |= static_cast<uint64_t>(*codes++) << nbits;
        nbits += 8;
      }
      const uint32_t code = static_cast<uint32_t>(bits) & mask;
      bits >>= w;
      nbits -= w;
      a[j] = std::fma(scale, qsgd_value(code, norm, levels), a[j]);
    }
  }
}

// =========================================== onebit ============================================

void onebit_pack_cpu(const float* g, float* residual, int64_t n, uint8_t* out) {
  check_n(n, "onebit_pack_cpu");
  constexpr int T = detail::kReduceThreads;
  const int64_t chunks = (n + detail::kOnebitChunk - 1) / detail::kOnebitChunk;
  std::vector<double> pos_part(chunks), neg_part(chunks);
  std::vector<long long> cnt_part(chunks);

  // Pass 1: v = g + residual (kept in residual), canonical per-chunk sums.
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = c * detail::kOnebitChunk;
    const int64_t len = std::min(detail::kOnebitChunk, n - start);
    double pos[T] = {}, neg[T] = {};
    long long cnt = 0;
    for (int64_t base = 0; base < len; base += T) {
      const int m = static_cast<int>(std::min<int64_t>(T, len - base));
      for (int t = 0; t < m; ++t) {
        const int64_t i = start + base + t;
        const float v = g[i] + residual[i];
        residual[i] = v;
        const bool ge = v >= 0.0f;
        pos[t] += ge ? static_cast<double>(v) : 0.0;
        neg[t] += ge ? 0.0 : static_cast<double>(v);
        cnt += ge;
      }
    }
    pos_part[c] = block_fold(pos, T);
    neg_part[c] = block_fold(neg, T);
    cnt_part[c] = cnt;
  }

  // Pass 2: fold the chunk sums in the order of the single-block CUDA pass.
  double pos[T] = {}, neg[T] = {};
  long long cnt = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    pos[c % T] += pos_part[c];
    neg[c % T] += neg_part[c];
    cnt += cnt_part[c];
  }
  const double pos_sum = block_fold(pos, T), neg_sum = block_fold(neg, T);
  const long long neg_cnt = n - cnt;
  const float pos_mean = cnt > 0 ? static_cast<float>(pos_sum / static_cast<double>(cnt)) : 0.0f;
  const float neg_mean =
      neg_cnt > 0 ? static_cast<float>(neg_sum / static_cast<double>(neg_cnt)) : 0.0f;
  store_f32(out, pos_mean);
  store_f32(out + 4, neg_mean);

  // Pass 3: bits and the new residual, one output byte per iteration.
  uint8_t* bits = out + 8;
  const int64_t nbytes = (n + 7) / 8;
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t k = 0; k < nbytes; ++k) {
    const int64_t end = std::min(8 * k + 8, n);
    uint8_t byte = 0;
    for (int64_t i = 8 * k; i < end; ++i) {
      const float v = residual[i];
      const bool ge = v >= 0.0f;
      byte |= static_cast<uint8_t>(ge) << (i & 7);
      residual[i] = v - (ge ? pos_mean : neg_mean);
    }
    bits[k] = byte;
  }
}

void onebit_unpack_accumulate_cpu(const uint8_t* in, int64_t n, float scale, float* acc) {
  check_n(n, "onebit_unpack_accumulate_cpu");
  const float pos = load_f32(in), neg = load_f32(in + 4);
  const uint8_t* bits = in + 8;
#pragma omp parallel for schedule(static) if (n > kOmpMinElements)
  for (int64_t i = 0; i < n; ++i)
    acc[i] = std::fma(scale, ((bits[i >> 3] >> (i & 7)) & 1) ? pos : neg, acc[i]);
}

}  // namespace tg::tern
