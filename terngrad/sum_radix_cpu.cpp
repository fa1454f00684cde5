// Radix-packed integer sums on the CPU (layout: terngrad/sum_radix.h). One OpenMP iteration per
// 64-bit word: a word's f digits are one contiguous run of elements, so threads never share a
// word or an accumulator. The full words run in the main loop, the last (partial) word apart, so
// the digit loops have no bounds test.
//   pack: Horner's rule from the top digit down, w = w * L + digit (unsigned, wrapping).
//   unpack_accumulate: f - 1 invariant divisions by L per word (RadixDivider: the first of the
//     full word, the others of quotients below 2^64 / L with one multiply-high each), the
//     remainder of each the next digit, the last quotient the top digit. Throughput-bound on
//     ~8 operations per digit; out-of-order execution already overlaps successive words'
//     dependency chains (decoding two words interleaved measured no faster).
// Measured on one core of a 2-core x86-64-v3 Xeon VM (n = 4M, L = 17, 33, 129): pack ~0.6-0.9 ns
// and unpack ~0.6-0.85 ns per element, no slower than the k-bit fields (~1.1-1.6 and ~0.6-1.1
// ns) that divide nothing; the general division for every digit took ~1.0-1.5 ns.
#include <bit>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "terngrad/sum_radix.h"

namespace tg::tern {

namespace {

constexpr int64_t kParallelMinWords = 1 << 14;  // below this a pass is too short to fork threads

// The word of the `count` digits v[0 .. count) + offset (count <= f; the missing top digits 0).
inline uint64_t pack_word(const int32_t* v, int64_t count, int32_t offset, uint64_t levels) {
  uint64_t w = 0;
  for (int64_t d = count - 1; d >= 0; --d) {
    w = w * levels + static_cast<uint64_t>(static_cast<int64_t>(v[d]) + offset);
  }
  return w;
}

// acc += digit - offset modulo 2^32: unsigned, so garbage digits cannot overflow a signed int.
struct Accumulate {
  int32_t* acc;
  uint32_t offset;
  void operator()(int64_t d, uint64_t digit) const {
    acc[d] =
        static_cast<int32_t>(static_cast<uint32_t>(acc[d]) + static_cast<uint32_t>(digit) - offset);
  }
};

// out = float(digit - offset) * scale: what Accumulate into a zero, then scale_accumulated,
// computes (the same wrapping int32, the same single rounding of the product).
struct Scaled {
  float* out;
  uint32_t offset;
  float scale;
  void operator()(int64_t d, uint64_t digit) const {
    out[d] =
        static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(digit) - offset)) * scale;
  }
};

// Digits 0 .. count - 1 of w handed to sink(d, digit) (1 <= count <= f; the quotient left after
// count - 1 divisions is the last digit, which for garbage words may exceed L - 1). Only the
// first division sees a full 64-bit w; every later dividend is a quotient, below 2^64 / L.
// `div` by value: a local copy that no store through the sink can alias.
template <class Sink>
inline void unpack_word(uint64_t w, int64_t count, RadixDivider div, const Sink& sink) {
  if (count > 1) {
    const uint64_t q = div.div(w);
    sink(0, w - q * div.d);
    w = q;
    for (int64_t d = 1; d < count - 1; ++d) {
      const uint64_t qd = div.div_small(w);
      sink(d, w - qd * div.d);
      w = qd;
    }
  }
  sink(count - 1, w);
}

#if defined(__AVX2__) && defined(__FMA__)
// unpack_sums_scaled four words at a time (AVX2), the bits of the scalar Scaled decode. Each
// word is cut into groups of g digits (L^g <= 2^32; one multiply-high per cut: two for L = 17's
// 15 digits), and the four words' groups are decoded together in double lanes, where every value
// is an integer below 2^32 and so exact: t_d = floor((x + 1/2) * (1/L^d)) is exactly
// floor(x / L^d) (the true (x + 1/2) / L^d is at least 1/(2 L^d) from an integer, the product's
// error below 2^-20 / L^d), and digit d = t_d - L t_(d+1) by one FMA is exact. Every t_d comes
// straight from x, so a group's digits are independent (successive divisions chain each digit on
// the last: latency-bound at ~16 cycles a digit in double lanes). The digits minus the offset
// (small integers) become floats exactly and are scaled by one float multiply, as the scalar code
// does. Four digit vectors at a time are transposed, so each word's run of elements is written with
// 16-byte stores. A block with a word whose top group is out of range (a garbage word: its last
// digit may exceed L - 1 and wrap int32) is left to the scalar path.
class ScaledDecoder4 {
 public:
  static constexpr int kMaxDigits = 64;  // f <= 64 (L >= 2)
  static constexpr int kMaxGroups = 32;  // ceil(f / g) with g >= 2
  // 2 <= L <= 2^16, so that g >= 2.
  static bool usable(uint64_t levels) { return levels >= 2 && levels <= (uint64_t{1} << 16); }

  ScaledDecoder4(uint64_t levels, int f, uint32_t offset, float scale)
      : f_(f), levels_(levels), scale_(scale), offset_(offset) {
    uint64_t p = levels;
    while (p * levels <= (uint64_t{1} << 32)) {
      p *= levels;
      ++g_;
    }
    group_ = RadixDivider::make(p);
    groups_ = (f + g_ - 1) / g_;
    last_count_ = f - (groups_ - 1) * g_;
    for (int d = 0; d < last_count_; ++d) last_limit_ *= levels;
    double power = 1.0;  // L^d < 2^32: exact, so 1 / L^d is correctly rounded
    for (int d = 0; d <= g_; ++d) {
      inv_pow_[d] = 1.0 / power;
      power *= static_cast<double>(levels);
    }
  }

  // Full words w[0 .. 4) into out[0 .. 4 f); false (nothing written) when one is out of range.
  bool decode(const uint64_t* w, float* out) const {
    alignas(32) uint64_t x[kMaxGroups][4];  // [group][word]
    for (int k = 0; k < 4; ++k) {
      uint64_t v = w[k];
      for (int c = 0; c + 1 < groups_; ++c) {
        const uint64_t q = c == 0 ? group_.div(v) : group_.div_small(v);
        x[c][k] = v - q * group_.d;
        v = q;
      }
      if (v >= last_limit_) return false;
      x[groups_ - 1][k] = v;
    }
    const __m256d lv = _mm256_set1_pd(static_cast<double>(levels_));
    const __m256d half = _mm256_set1_pd(0.5);
    const __m256d off = _mm256_set1_pd(static_cast<double>(offset_));
    const __m256i two52_bits = _mm256_set1_epi64x(0x4330000000000000LL);
    const __m256d two52 = _mm256_set1_pd(4503599627370496.0);
    const __m128 scale = _mm_set1_ps(scale_);
    __m128 digit[kMaxDigits];
    int at = 0;
    for (int c = 0; c < groups_; ++c) {
      // x < 2^32 as a double: its bits in 2^52's mantissa, minus 2^52.
      const __m256i xi = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[c]));
      const __m256d v = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(xi, two52_bits)), two52);
      const __m256d vh = _mm256_add_pd(v, half);
      const int count = c + 1 < groups_ ? g_ : last_count_;
      __m256d t = v;  // t_0 = x
      for (int d = 0; d < count; ++d) {
        __m256d value = t;  // the last digit: floor(x / L^(count - 1))
        if (d + 1 < count) {
          const __m256d next = _mm256_round_pd(_mm256_mul_pd(vh, _mm256_set1_pd(inv_pow_[d + 1])),
                                               _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
          value = _mm256_fnmadd_pd(next, lv, t);
          t = next;
        }
        digit[at++] = _mm_mul_ps(_mm256_cvtpd_ps(_mm256_sub_pd(value, off)), scale);
      }
    }
    // digit[d] holds digit d of the four words; word k's elements are out[k f .. (k + 1) f).
    int d = 0;
    for (; d + 4 <= f_; d += 4) {
      __m128 r0 = digit[d], r1 = digit[d + 1], r2 = digit[d + 2], r3 = digit[d + 3];
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(out + d, r0);
      _mm_storeu_ps(out + f_ + d, r1);
      _mm_storeu_ps(out + 2 * f_ + d, r2);
      _mm_storeu_ps(out + 3 * f_ + d, r3);
    }
    for (; d < f_; ++d) {
      alignas(16) float lanes[4];
      _mm_store_ps(lanes, digit[d]);
      for (int k = 0; k < 4; ++k) out[k * f_ + d] = lanes[k];
    }
    return true;
  }

 private:
  int f_, g_ = 1, groups_ = 1, last_count_ = 1;
  uint64_t levels_, last_limit_ = 1;
  float scale_;
  uint32_t offset_;
  RadixDivider group_;
  double inv_pow_[kMaxDigits + 1] = {};  // 1 / L^d, d = 0 .. g
};
#endif

}  // namespace

uint64_t sum_levels(int64_t workers_total) {
  TG_CHECK(workers_total >= 1 && workers_total <= (int64_t{1} << 30),
           "sum_levels: N = ", workers_total, " workers (expected 1 .. 2^30)");
  return 2 * static_cast<uint64_t>(workers_total) + 1;
}

int digits_per_word(uint64_t levels) {
  TG_CHECK(levels >= 2 && levels <= (uint64_t{1} << 32), "digits_per_word: levels = ", levels,
           " (expected 2 .. 2^32)");
  // levels^f <= 2^64 < levels^(f + 1); the power stays below 2^96 in 128 bits.
  const unsigned __int128 limit = static_cast<unsigned __int128>(1) << 64;
  unsigned __int128 power = levels;
  int f = 1;
  while (power * levels <= limit) {
    power *= levels;
    ++f;
  }
  return f;
}

int64_t sum_words(int64_t n, uint64_t levels) {
  TG_CHECK(n >= 0, "sum_words: n = ", n, " elements (expected >= 0)");
  const int64_t f = digits_per_word(levels);
  return n / f + (n % f != 0);
}

RadixDivider RadixDivider::make(uint64_t d) {
  TG_CHECK(d >= 2 && d <= (uint64_t{1} << 32), "RadixDivider: d = ", d, " (expected 2 .. 2^32)");
  RadixDivider r;
  r.d = d;
  const uint32_t l = static_cast<uint32_t>(std::bit_width(d)) - 1;  // floor(log2 d)
  if ((d & (d - 1)) == 0) {
    r.magic = 0;  // div: t = 0, ((x >> 1) >> (l - 1)) = x >> l
    r.shift = l - 1;
  } else {
    // floor(2^(65 + l) / d) lies in [2^64, 2^65) since 2^l < d < 2^(l + 1); the implicit 2^64
    // is the "+ t" of div. l <= 31 here, so 2^(65 + l) fits in 128 bits.
    const unsigned __int128 m = (static_cast<unsigned __int128>(1) << (65 + l)) / d + 1;
    r.magic = static_cast<uint64_t>(m);
    r.shift = l;
  }
  // ceil(2^64 / d) <= 2^63 for d >= 2.
  r.small_magic = static_cast<uint64_t>(((static_cast<unsigned __int128>(1) << 64) + d - 1) / d);
  return r;
}

void pack_sums_cpu(const int32_t* v, int64_t n, int32_t offset, uint64_t levels, uint64_t* words) {
  detail::check_sum_radix_args("pack_sums_cpu", v, words, n, levels, offset);
  const int64_t f = digits_per_word(levels);
  const int64_t full = n / f;
#pragma omp parallel for schedule(static) if (full >= kParallelMinWords)
  for (int64_t j = 0; j < full; ++j) words[j] = pack_word(v + j * f, f, offset, levels);
  if (full * f < n) words[full] = pack_word(v + full * f, n - full * f, offset, levels);
}

void unpack_sums_accumulate_cpu(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                                int32_t* acc) {
  detail::check_sum_radix_args("unpack_sums_accumulate_cpu", words, acc, n, levels, offset);
  const int64_t f = digits_per_word(levels);
  const RadixDivider div = RadixDivider::make(levels);
  const uint32_t off = static_cast<uint32_t>(offset);
  const int64_t full = n / f;
#pragma omp parallel for schedule(static) if (full >= kParallelMinWords)
  for (int64_t j = 0; j < full; ++j) unpack_word(words[j], f, div, Accumulate{acc + j * f, off});
  if (full * f < n) unpack_word(words[full], n - full * f, div, Accumulate{acc + full * f, off});
}

void unpack_sums_scaled_cpu(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                            float scale, float* out) {
  detail::check_sum_radix_args("unpack_sums_scaled_cpu", words, out, n, levels, offset);
  const int64_t f = digits_per_word(levels);
  const RadixDivider div = RadixDivider::make(levels);
  const uint32_t off = static_cast<uint32_t>(offset);
  const int64_t full = n / f;
  int64_t vectored = 0;  // words [0, vectored) went four at a time
#if defined(__AVX2__) && defined(__FMA__)
  if (ScaledDecoder4::usable(levels)) {
    const ScaledDecoder4 dec(levels, static_cast<int>(f), off, scale);
    const int64_t blocks = full / 4;
#pragma omp parallel for schedule(static) if (full >= kParallelMinWords)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = 4 * b;
      if (dec.decode(words + j0, out + j0 * f)) continue;
      for (int64_t j = j0; j < j0 + 4; ++j)
        unpack_word(words[j], f, div, Scaled{out + j * f, off, scale});
    }
    vectored = 4 * blocks;
  }
#endif
  for (int64_t j = vectored; j < full; ++j)
    unpack_word(words[j], f, div, Scaled{out + j * f, off, scale});
  if (full * f < n) unpack_word(words[full], n - full * f, div, Scaled{out + full * f, off, scale});
}

}  // namespace tg::tern
