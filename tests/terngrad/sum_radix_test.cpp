// Radix-packed integer sums (terngrad/sum_radix.h): the invariant divider against `/` for every
// class of divisor and dividend; digits per word against hand values and its defining inequality;
// pack against a naive digit-by-digit reference (itself checked by decoding with plain % and /);
// unpack as pack's inverse and, on garbage words, against the same plain-division decode; the
// carry-free sum of P ranks' words; and the argument checks. Everything is exact integer
// arithmetic: no tolerances.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nn/core/error.h"
#include "terngrad/sum_radix.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {
namespace {

using u128 = unsigned __int128;

constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kTwo32 = uint64_t{1} << 32;

// The levels the layout tests sweep: the smallest, the sums of N = 1, 2, 4, 8, 16, 64, 512 and
// 2^15 workers, powers of two, and the largest (2^31 + 1 = sum_levels(2^30), 2^32).
const std::vector<uint64_t> kLevels = {
    2, 3, 5, 9, 17, 33, 129, 1025, 65537, 4, 256, kTwo32 / 2 + 1, kTwo32 - 1, kTwo32};

// `fn` throws a tg::Error whose message contains `needle`.
template <typename Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// --- RadixDivider -----------------------------------------------------------------------------

// Dividends around the interesting points of d: 0, 1, d - 1, d, d + 1, multiples of d +- 1 (the
// largest below 2^64 included), 2^63, 2^64 - 1, and random values of random bit length.
std::vector<uint64_t> dividends(uint64_t d, std::mt19937_64& rng, int random_count) {
  std::vector<uint64_t> x = {0,
                             1,
                             d - 1,
                             d,
                             d + 1,
                             2 * d - 1,
                             2 * d,
                             2 * d + 1,
                             uint64_t{1} << 63,
                             (uint64_t{1} << 63) - 1,
                             kMaxU64,
                             kMaxU64 - 1};
  const uint64_t top = kMaxU64 / d * d;  // the largest multiple of d
  for (uint64_t t : {top, top - d}) {
    x.push_back(t - 1);
    x.push_back(t);
    if (t != kMaxU64) x.push_back(t + 1);
  }
  for (int i = 0; i < random_count; ++i) {
    const uint64_t k = (rng() >> (rng() % 64)) % (kMaxU64 / d + 1);  // k d: a random multiple
    x.push_back(k * d);
    x.push_back(k * d - 1);
    x.push_back(k * d + 1);
    x.push_back(rng() >> (rng() % 64));
  }
  return x;
}

// Checks div against x / d for all dividends, and div_small on those below 2^64 / d plus the
// largest such (the largest possible quotient of a 64-bit number by d).
void expect_divides(uint64_t d, std::mt19937_64& rng, int random_count) {
  const RadixDivider div = RadixDivider::make(d);
  ASSERT_EQ(div.d, d);
  const uint64_t small_limit = kMaxU64 / d;  // x <= this  <=>  x < 2^64 / d
  std::vector<uint64_t> x = dividends(d, rng, random_count);
  x.push_back(small_limit);
  x.push_back(small_limit - 1);
  for (uint64_t xi : x) {
    ASSERT_EQ(div.div(xi), xi / d) << "d=" << d << " x=" << xi;
    if (xi <= small_limit) {
      ASSERT_EQ(div.div_small(xi), xi / d) << "d=" << d << " x=" << xi;
    }
  }
  for (int i = 0; i < random_count; ++i) {
    const uint64_t xi = rng() % (small_limit + 1);
    ASSERT_EQ(div.div_small(xi), xi / d) << "d=" << d << " x=" << xi;
  }
}

TEST(RadixDivider, EveryDivisorUpTo5000) {
  std::mt19937_64 rng(1);
  for (uint64_t d = 2; d <= 5000; ++d) expect_divides(d, rng, 200);
}

TEST(RadixDivider, RandomDivisorsUpTo2Pow32) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t d = 2 + rng() % (kTwo32 - 1);  // 2 .. 2^32
    expect_divides(d, rng, 10);
  }
}

TEST(RadixDivider, PowersOfTwoAndTheirNeighbours) {
  std::mt19937_64 rng(3);
  for (int b = 1; b <= 32; ++b) {
    const uint64_t p = uint64_t{1} << b;
    expect_divides(p, rng, 2000);
    if (p - 1 >= 2) expect_divides(p - 1, rng, 2000);
    if (p + 1 <= kTwo32) expect_divides(p + 1, rng, 2000);
  }
  expect_divides(kTwo32, rng, 100000);
  expect_divides(kTwo32 / 2 - 1, rng, 100000);
  expect_divides(kTwo32 / 2 + 1, rng, 100000);
  EXPECT_EQ(RadixDivider::make(kTwo32).magic, 0u);
  EXPECT_EQ(RadixDivider::make(2).shift, 0u);
}

// --- digits per word, levels, words ------------------------------------------------------------

TEST(SumRadix, DigitsPerWordHandValues) {
  const std::vector<std::pair<uint64_t, int>> hand = {
      {3, 40},  {5, 27},   {9, 20}, {17, 15}, {33, 12},    {65, 10},
      {129, 9}, {1025, 6}, {2, 64}, {4, 32},  {kTwo32, 2}, {kTwo32 / 2 + 1, 2}};
  for (auto [levels, f] : hand) EXPECT_EQ(digits_per_word(levels), f) << "levels=" << levels;
}

// levels^f <= 2^64 < levels^(f + 1), by repeated multiplication in 128 bits.
void expect_defining_inequality(uint64_t levels) {
  const int f = digits_per_word(levels);
  u128 power = 1;
  for (int i = 0; i < f; ++i) power *= levels;
  const u128 two64 = u128{1} << 64;
  ASSERT_LE(power, two64) << "levels=" << levels;
  ASSERT_GT(power * levels, two64) << "levels=" << levels;
}

TEST(SumRadix, DigitsPerWordIsTheLargestThatFits) {
  for (uint64_t levels = 2; levels <= 70000; ++levels) expect_defining_inequality(levels);
  std::mt19937_64 rng(4);
  for (int i = 0; i < 100000; ++i) expect_defining_inequality(2 + rng() % (kTwo32 - 1));
  for (int b = 1; b <= 32; ++b) {
    expect_defining_inequality(uint64_t{1} << b);
    if (b < 32) expect_defining_inequality((uint64_t{1} << b) + 1);
    if (b > 1) expect_defining_inequality((uint64_t{1} << b) - 1);
  }
}

TEST(SumRadix, LevelsAndWords) {
  EXPECT_EQ(sum_levels(1), 3u);
  EXPECT_EQ(sum_levels(16), 33u);
  EXPECT_EQ(sum_levels(int64_t{1} << 30), (uint64_t{1} << 31) + 1);
  for (int64_t bad : {int64_t{0}, int64_t{-1}, (int64_t{1} << 30) + 1}) {
    EXPECT_THROW(sum_levels(bad), Error) << bad;
  }
  expect_error([] { sum_levels(0); }, "sum_levels: N = 0");
  EXPECT_EQ(sum_words(0, 33), 0);
  EXPECT_EQ(sum_words(1, 33), 1);
  EXPECT_EQ(sum_words(12, 33), 1);
  EXPECT_EQ(sum_words(13, 33), 2);
  EXPECT_EQ(sum_words(40 * 1000 + 1, 3), 1001);
  EXPECT_THROW(sum_words(-1, 33), Error);
  EXPECT_THROW(sum_words(5, 1), Error);
}

// --- pack and unpack ---------------------------------------------------------------------------

// The specification: word j = sum_d digit(j f + d) L^d, summed digit by digit in 128 bits (and
// checked to stay below 2^64), missing digits of the last word 0.
std::vector<uint64_t> naive_pack(const std::vector<int32_t>& v, int32_t offset, uint64_t levels) {
  const int64_t n = static_cast<int64_t>(v.size());
  const int64_t f = digits_per_word(levels);
  std::vector<uint64_t> words((n + f - 1) / f);
  for (size_t j = 0; j < words.size(); ++j) {
    u128 w = 0, power = 1;
    for (int64_t d = 0; d < f; ++d) {
      const int64_t i = static_cast<int64_t>(j) * f + d;
      const int64_t digit = i < n ? int64_t{v[i]} + offset : 0;
      EXPECT_TRUE(digit >= 0 && static_cast<uint64_t>(digit) < levels) << "test input " << i;
      w += static_cast<u128>(digit) * power;
      power *= levels;
    }
    EXPECT_LE(w, u128{kMaxU64});
    words[j] = static_cast<uint64_t>(w);
  }
  return words;
}

// Digit d of a word by plain division: (w / L^d) % L.
uint64_t digit_of(uint64_t w, int64_t d, uint64_t levels) {
  for (int64_t i = 0; i < d; ++i) w /= levels;
  return w % levels;
}

// Random int32 values whose digits v + offset cover [0, levels) (all of it that int32 reaches),
// each extreme digit (0, levels - 1) with probability 1/8.
std::vector<int32_t> random_values(int64_t n, int32_t offset, uint64_t levels,
                                   std::mt19937_64& rng) {
  const int64_t hi = std::min<int64_t>(static_cast<int64_t>(levels) - 1,
                                       int64_t{offset} + std::numeric_limits<int32_t>::max());
  std::vector<int32_t> v(n);
  for (auto& x : v) {
    const uint64_t r = rng();
    const int64_t digit = r % 8 == 0   ? 0
                          : r % 8 == 1 ? hi
                                       : static_cast<int64_t>((r >> 3) % (hi + 1));
    x = static_cast<int32_t>(digit - offset);
  }
  return v;
}

std::vector<int64_t> sizes_for(int64_t f) {
  // Words in pairs, an odd full word, a partial word; the last size on the OpenMP path.
  return {0, 1, f - 1, f, f + 1, 2 * f, 2 * f + 1, 3 * f + 5, 1000, f * 20000 + 7};
}

TEST(SumRadix, PackMatchesNaiveReference) {
  std::mt19937_64 rng(5);
  for (uint64_t levels : kLevels) {
    const int64_t f = digits_per_word(levels);
    for (int32_t offset : {int32_t{0}, static_cast<int32_t>((levels - 1) / 2),
                           static_cast<int32_t>(std::min<uint64_t>(levels - 1, 0x7fffffff))}) {
      for (int64_t n : sizes_for(f)) {
        const std::vector<int32_t> v = random_values(n, offset, levels, rng);
        const int64_t m = sum_words(n, levels);
        std::vector<uint64_t> words(m + 1, 0xDEADBEEFull);  // one guard word
        pack_sums_cpu(v.data(), n, offset, levels, words.data());
        ASSERT_EQ(words[m], 0xDEADBEEFull) << "wrote past the last word";
        words.resize(m);
        const std::vector<uint64_t> want = naive_pack(v, offset, levels);
        ASSERT_EQ(words, want) << "levels=" << levels << " offset=" << offset << " n=" << n;
        // The reference, read back with plain % and /; the unused digits of the last word are 0.
        for (int64_t i = 0; i < std::min<int64_t>(n, 5000); ++i) {
          ASSERT_EQ(digit_of(words[i / f], i % f, levels),
                    static_cast<uint64_t>(v[i] + int64_t{offset}))
              << "levels=" << levels << " n=" << n << " i=" << i;
        }
        for (int64_t i = n; i < m * f; ++i) {
          ASSERT_EQ(digit_of(words[i / f], i % f, levels), 0u) << "levels=" << levels << " i=" << i;
        }
      }
    }
  }
}

TEST(SumRadix, UnpackAccumulatesWhatPackStored) {
  std::mt19937_64 rng(6);
  for (uint64_t levels : kLevels) {
    const int64_t f = digits_per_word(levels);
    const int32_t offset = static_cast<int32_t>(std::min<uint64_t>(levels / 3, 0x7fffffff));
    for (int64_t n : sizes_for(f)) {
      const std::vector<int32_t> v = random_values(n, offset, levels, rng);
      std::vector<uint64_t> words(sum_words(n, levels));
      pack_sums_cpu(v.data(), n, offset, levels, words.data());
      std::vector<int32_t> acc(n + 1), want(n + 1);
      for (int64_t i = 0; i <= n; ++i) acc[i] = want[i] = static_cast<int32_t>(i % 201) - 100;
      // Sums that still fit in int32 are exact.
      for (int64_t i = 0; i < n; ++i) {
        want[i] =
            static_cast<int32_t>(static_cast<uint32_t>(want[i]) + static_cast<uint32_t>(v[i]));
      }
      unpack_sums_accumulate_cpu(words.data(), n, levels, offset, acc.data());
      ASSERT_EQ(acc, want) << "levels=" << levels << " n=" << n;  // acc[n]: untouched
    }
  }
}

// Any word value decodes without undefined behaviour (UBSan builds check that) to what plain
// division gives: the remainders of count - 1 divisions by L, then the quotient left (which may
// exceed L - 1), each added to acc modulo 2^32.
TEST(SumRadix, GarbageWordsDecodeAsPlainDivision) {
  std::mt19937_64 rng(7);
  for (uint64_t levels : kLevels) {
    const int64_t f = digits_per_word(levels);
    for (int64_t n : {int64_t{1}, f - 1, f + 2, 2 * f, 50 * f + 3, 51 * f}) {
      if (n < 1) continue;
      const int64_t m = sum_words(n, levels);
      std::vector<uint64_t> words(m);
      for (auto& w : words) w = rng() % 4 == 0 ? kMaxU64 - rng() % 3 : rng();
      for (int32_t offset :
           {int32_t{0}, static_cast<int32_t>(std::min<uint64_t>(levels - 1, 0x7fffffff))}) {
        std::vector<int32_t> acc(n), want(n);
        for (int64_t i = 0; i < n; ++i) {
          acc[i] = want[i] = i % 2 ? std::numeric_limits<int32_t>::max() - 1
                                   : std::numeric_limits<int32_t>::min() + 1;
        }
        for (int64_t j = 0; j < m; ++j) {
          uint64_t w = words[j];
          const int64_t count = std::min(f, n - j * f);
          for (int64_t d = 0; d < count; ++d) {
            const uint64_t digit = d + 1 < count ? w % levels : w;
            w /= levels;
            int32_t& a = want[j * f + d];
            a = static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(digit) -
                                     static_cast<uint32_t>(offset));
          }
        }
        unpack_sums_accumulate_cpu(words.data(), n, levels, offset, acc.data());
        ASSERT_EQ(acc, want) << "levels=" << levels << " n=" << n << " offset=" << offset;
      }
    }
  }
}

// unpack_sums_scaled gives, bit for bit, what unpack_sums_accumulate into a zeroed accumulator
// followed by scale_accumulated gives: for packed words (the exchange's case) and for garbage
// words, whose digits wrap int32, with scales of every kind (negative, tiny, huge, zero). Levels
// up to 2^16 take the four-word AVX2 path in an x86-64-v3 build (blocks of four full words, the
// rest scalar; a block holding a garbage word out of its range falls back to the scalar path),
// 65536 is its edge; the last size runs on the OpenMP path.
TEST(SumRadix, ScaledDecodeIsAccumulateIntoZeroThenScale) {
  std::mt19937_64 rng(9);
  std::vector<uint64_t> levels_list = kLevels;
  levels_list.insert(levels_list.end(), {65535, 65536, 7, 11});
  for (uint64_t levels : levels_list) {
    const int64_t f = digits_per_word(levels);
    const int32_t offset = static_cast<int32_t>(std::min<uint64_t>(levels / 3, 0x7fffffff));
    for (int64_t n : {int64_t{1}, f - 1, f + 2, 2 * f, 4 * f, 50 * f + 3, 20000 * f + 7}) {
      if (n < 1) continue;
      const int64_t m = sum_words(n, levels);
      std::vector<uint64_t> packed(m), garbage(m);
      pack_sums_cpu(random_values(n, offset, levels, rng).data(), n, offset, levels, packed.data());
      for (auto& w : garbage) w = rng() % 4 == 0 ? kMaxU64 - rng() % 3 : rng();
      for (const std::vector<uint64_t>* words : {&packed, &garbage}) {
        for (float scale : {0.0123f / 17.0f, -3.5f, 1e-30f, 3e30f, 0.0f}) {
          std::vector<int32_t> acc(n, 0);
          std::vector<float> want(n + 1, -7.0f), got(n + 1, -7.0f);
          unpack_sums_accumulate_cpu(words->data(), n, levels, offset, acc.data());
          scale_accumulated_cpu(acc.data(), n, scale, want.data());
          unpack_sums_scaled_cpu(words->data(), n, levels, offset, scale, got.data());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), (n + 1) * sizeof(float)))
              << "levels=" << levels << " n=" << n << " scale=" << scale
              << (words == &garbage ? " (garbage words)" : "");  // got[n]: untouched
        }
      }
    }
  }
}

// P ranks, each holding the code sums of W workers (values in [-W, W]), pack with offset W and
// L = sum_levels(P W); the u64 sum of their words, decoded with offset P W, is the total integer
// sum: no digit carries into the next.
TEST(SumRadix, WordSumsAreCarryFree) {
  std::mt19937_64 rng(8);
  const std::vector<std::pair<int64_t, int64_t>> ranks_workers = {
      {2, 1},
      {3, 5},
      {16, 1},
      {4, 4},
      {2, int64_t{1} << 29},
      {1024, 1024},
      {4, int64_t{1} << 28},
      {int64_t{1} << 15, int64_t{1} << 15},
      {7, 3}};
  for (auto [P, W] : ranks_workers) {
    const uint64_t levels = sum_levels(P * W);
    const int64_t f = digits_per_word(levels);
    for (int64_t n : {int64_t{1}, f, 3 * f + 1}) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        const int64_t m = sum_words(n, levels);
        std::vector<uint64_t> total_words(m, 0);
        std::vector<int64_t> total(n, 0);
        std::vector<uint64_t> words(m);
        std::vector<int32_t> v(n);
        // Every rank at +W (pattern 0: each digit sum is L - 1) or -W (pattern 1: 0), or random
        // with the extremes often (pattern 2).
        for (int64_t r = 0; r < P; ++r) {
          for (int64_t i = 0; i < n; ++i) {
            const uint64_t x = rng();
            int64_t value = static_cast<int64_t>(x % (2 * W + 1)) - W;
            if (pattern == 0) value = W;
            if (pattern == 1) value = -W;
            if (pattern == 2 && x % 4 == 0) value = (x >> 2) % 2 ? W : -W;
            v[i] = static_cast<int32_t>(value);
            total[i] += value;
          }
          pack_sums_cpu(v.data(), n, static_cast<int32_t>(W), levels, words.data());
          for (int64_t j = 0; j < m; ++j) total_words[j] += words[j];
        }
        std::vector<int32_t> acc(n, 0);
        unpack_sums_accumulate_cpu(total_words.data(), n, levels, static_cast<int32_t>(P * W),
                                   acc.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(acc[i], total[i])
              << "P=" << P << " W=" << W << " n=" << n << " pattern=" << pattern << " i=" << i;
        }
      }
    }
  }
}

// --- argument checks ---------------------------------------------------------------------------

TEST(SumRadix, BadArgumentsThrow) {
  std::vector<int32_t> v(8, 0);
  std::vector<uint64_t> words(8, 0);
  std::vector<int32_t> acc(8, 0);
  for (uint64_t levels : {uint64_t{0}, uint64_t{1}, kTwo32 + 1, kMaxU64}) {
    const std::string l = "levels = " + std::to_string(levels);
    expect_error([&] { digits_per_word(levels); }, l);
    expect_error([&] { pack_sums_cpu(v.data(), 8, 0, levels, words.data()); }, l);
    expect_error([&] { unpack_sums_accumulate_cpu(words.data(), 8, levels, 0, acc.data()); }, l);
    expect_error([&] { RadixDivider::make(levels); }, "d = " + std::to_string(levels));
  }
  expect_error([&] { pack_sums_cpu(v.data(), -1, 0, 3, words.data()); }, "pack_sums_cpu: n = -1");
  expect_error([&] { unpack_sums_accumulate_cpu(words.data(), -1, 3, 0, acc.data()); },
               "unpack_sums_accumulate_cpu: n = -1");
  expect_error([&] { pack_sums_cpu(nullptr, 8, 0, 3, words.data()); }, "null");
  expect_error([&] { pack_sums_cpu(v.data(), 8, 0, 3, nullptr); }, "null");
  expect_error([&] { unpack_sums_accumulate_cpu(nullptr, 8, 3, 0, acc.data()); }, "null");
  expect_error([&] { unpack_sums_accumulate_cpu(words.data(), 8, 3, 0, nullptr); }, "null");
  expect_error([&] { pack_sums_cpu(v.data(), 8, -1, 3, words.data()); }, "offset = -1");
  expect_error([&] { unpack_sums_accumulate_cpu(words.data(), 8, 3, 3, acc.data()); },
               "offset = 3");
  // Nothing to touch: null pointers are fine for n = 0.
  EXPECT_NO_THROW(pack_sums_cpu(nullptr, 0, 0, 3, nullptr));
  EXPECT_NO_THROW(unpack_sums_accumulate_cpu(nullptr, 0, 3, 0, nullptr));
}

}  // namespace
}  // namespace tg::tern
