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
#pragma omp parallel for schedule(static) if (full >= kParallelMinWords)
  for (int64_t j = 0; j < full; ++j) unpack_word(words[j], f, div, Scaled{out + j * f, off, scale});
  if (full * f < n) unpack_word(words[full], n - full * f, div, Scaled{out + full * f, off, scale});
}

}  // namespace tg::tern
