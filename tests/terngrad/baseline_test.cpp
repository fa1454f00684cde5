// Baseline compressors on the CPU (terngrad/baseline_cpu.cpp): fp16 against an independent
// nearest-half search, QSGD against the documented wire format and its statistics (unbiasedness,
// the variance bound of Alistarh et al.), 1-bit SGD against naive means and the error-feedback
// conservation law. All random inputs come from fixed seeds; the statistical checks state their
// false-alarm rates (with the fixed seeds they are deterministic).
#include "terngrad/baseline_kernels.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/philox.h"

namespace tg::tern {
namespace {

std::vector<float> normal_vec(int64_t n, uint64_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// ============================================ fp16 =============================================

// Exact value of a finite half.
double half_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

// Reference float -> half: binary search for the neighbouring halves, nearest wins, ties to the
// even mantissa; |x| >= 65520 (halfway between 65504 and 2^16, tie -> even = inf) -> inf.
uint16_t ref_float_to_half(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7E00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7C00;
  uint16_t lo = 0, hi = 0x7BFF;  // largest finite positive half with value <= a
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (half_value(mid) <= a)
      lo = mid;
    else
      hi = static_cast<uint16_t>(mid - 1);
  }
  if (half_value(lo) == a) return sign | lo;
  const uint16_t up = static_cast<uint16_t>(lo + 1);  // 0x7C00 (inf) only if a > 65504
  const double twice = 2 * a, mid = half_value(lo) + (up == 0x7C00 ? 65536.0 : half_value(up));
  if (twice < mid) return sign | lo;
  if (twice > mid) return sign | up;
  return sign | ((lo & 1) ? up : lo);
}

std::vector<uint16_t> pack_fp16(const std::vector<float>& x) {
  std::vector<uint8_t> out(fp16_packed_bytes(static_cast<int64_t>(x.size())));
  fp16_pack_cpu(x.data(), static_cast<int64_t>(x.size()), out.data());
  std::vector<uint16_t> h(x.size());
  std::memcpy(h.data(), out.data(), out.size());
  return h;
}

TEST(Fp16, PackedBytes) {
  EXPECT_EQ(fp16_packed_bytes(0), 0u);
  EXPECT_EQ(fp16_packed_bytes(5), 10u);
  EXPECT_EQ(fp16_packed_bytes(1 << 20), 2u << 20);
  EXPECT_THROW(fp16_packed_bytes(-1), Error);
}

TEST(Fp16, KnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    float x;
    uint16_t h;
  };
  const Case cases[] = {
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {65504.0f, 0x7BFF},           // largest finite half
      {65519.0f, 0x7BFF},           // below the halfway point to 2^16
      {65520.0f, 0x7C00},           // tie between 65504 (odd) and 2^16 -> even -> inf
      {1e5f, 0x7C00},               // overflow
      {6e-8f, 0x0001},              // nearest to 2^-24 = 5.96e-8, the smallest denormal
      {0x1p-25f, 0x0000},           // tie between 0 and 2^-24 -> even (0)
      {0x1.8p-24f, 0x0002},         // tie between 1 and 2 denormal steps -> even (2)
      {0x1.000002p-25f, 0x0001},    // just above the tie
      {0x1p-14f, 0x0400},           // smallest normal half
      {0x1.ffcp-15f, 0x0400},       // largest denormal + half a step: tie -> even (rounds up)
      {1e-40f, 0x0000},             // float denormal -> 0
      {1.0f + 0x1p-11f, 0x3C00},    // tie between 1 and 1 + 2^-10 -> even (1)
      {1.0f + 0x1.8p-10f, 0x3C02},  // tie between 1 + 2^-10 (odd) and 1 + 2^-9 -> even
      {inf, 0x7C00},
      {-inf, 0xFC00},
      {nan, 0x7E00},
      {-nan, 0xFE00},
      {std::bit_cast<float>(0x7F800001u), 0x7E00},  // signalling NaN: canonical quiet NaN
  };
  // The same values through the vector path (inside a group of 8) and the scalar tail.
  std::vector<float> xs;
  for (const Case& c : cases) xs.push_back(c.x);
  const std::vector<uint16_t> vec = pack_fp16(xs);
  for (size_t k = 0; k < xs.size(); ++k) {
    SCOPED_TRACE("x = " + std::to_string(cases[k].x) + " (case " + std::to_string(k) + ")");
    EXPECT_EQ(vec[k], cases[k].h);
    EXPECT_EQ(pack_fp16({cases[k].x})[0], cases[k].h);
    EXPECT_EQ(ref_float_to_half(cases[k].x), cases[k].h) << "the reference itself";
  }
}

// Every half, the midpoints between neighbours (exact ties), one float ulp either side of them,
// and random float bit patterns of every class: bytes equal the reference, vector and scalar.
TEST(Fp16, MatchesReferenceEverywhere) {
  std::vector<float> xs;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float v = static_cast<float>(half_value(static_cast<uint16_t>(h)));
    const float mid = static_cast<float>(
        (half_value(static_cast<uint16_t>(h)) +
         (h + 1 == 0x7C00 ? 65536.0 : half_value(static_cast<uint16_t>(h + 1)))) /
        2);
    for (float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 200000; ++k) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  xs.push_back(std::numeric_limits<float>::infinity());
  const std::vector<uint16_t> vec = pack_fp16(xs);
  int64_t bad = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const uint16_t want = ref_float_to_half(xs[k]);
    const uint16_t scalar = pack_fp16({xs[k]})[0];
    if (vec[k] != want || scalar != want) {
      if (++bad <= 10)
        ADD_FAILURE() << "x bits 0x" << std::hex << std::bit_cast<uint32_t>(xs[k]) << ": vector 0x"
                      << vec[k] << " scalar 0x" << scalar << " want 0x" << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Fp16, RoundTripEveryHalf) {
  std::vector<float> xs;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t hb = static_cast<uint16_t>(h);
    if (((hb >> 10) & 0x1F) == 0x1F) continue;  // inf / NaN: covered by KnownValues
    xs.push_back(static_cast<float>(half_value(hb)));
  }
  std::vector<uint8_t> packed(fp16_packed_bytes(static_cast<int64_t>(xs.size())));
  fp16_pack_cpu(xs.data(), static_cast<int64_t>(xs.size()), packed.data());
  std::vector<float> back(xs.size(), 0.0f);
  fp16_unpack_accumulate_cpu(packed.data(), static_cast<int64_t>(xs.size()), 1.0f, back.data());
  for (size_t k = 0; k < xs.size(); ++k) ASSERT_EQ(back[k], xs[k]) << "index " << k;  // -0 == +0
}

TEST(Fp16, UnpackAccumulatesWithScale) {
  const int64_t n = 8 * 1000 + 5;  // vector groups and a scalar tail
  const std::vector<float> g = normal_vec(n, 11, 0.0f, 3.0f);
  std::vector<float> acc = normal_vec(n, 12);
  const std::vector<float> acc0 = acc;
  std::vector<uint8_t> packed(fp16_packed_bytes(n));
  fp16_pack_cpu(g.data(), n, packed.data());
  const float scale = 0.25f;
  fp16_unpack_accumulate_cpu(packed.data(), n, scale, acc.data());
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, packed.data() + 2 * i, 2);
    const float want = std::fma(scale, static_cast<float>(half_value(h)), acc0[i]);
    ASSERT_TRUE(same_bits(acc[i], want)) << "index " << i;
  }
}

struct OnebitStepLite {
  float pos, neg;
};
OnebitStepLite onebit_lite(const std::vector<float>& g, std::vector<float>& residual) {
  std::vector<uint8_t> p(onebit_packed_bytes(static_cast<int64_t>(g.size())));
  onebit_pack_cpu(g.data(), residual.data(), static_cast<int64_t>(g.size()), p.data());
  return {load_f32(p.data()), load_f32(p.data() + 4)};
}

// ============================================ qsgd =============================================

struct QsgdCase {
  int64_t n;
  int levels;
  int64_t bucket;
};

std::vector<uint8_t> qsgd_pack(const std::vector<float>& g, int levels, int64_t bucket,
                               uint64_t seed, uint64_t stream, uint8_t fill = 0) {
  std::vector<uint8_t> out(qsgd_packed_bytes(static_cast<int64_t>(g.size()), levels, bucket), fill);
  qsgd_pack_cpu(g.data(), static_cast<int64_t>(g.size()), levels, bucket, seed, stream, out.data());
  return out;
}

std::vector<float> qsgd_decode(const std::vector<uint8_t>& packed, int64_t n, int levels,
                               int64_t bucket) {
  std::vector<float> out(n, 0.0f);
  qsgd_unpack_accumulate_cpu(packed.data(), n, levels, bucket, 1.0f, out.data());
  return out;
}

TEST(Qsgd, PackedBytesFormula) {
  EXPECT_EQ(qsgd_code_bits(1), 2);
  EXPECT_EQ(qsgd_code_bits(3), 3);
  EXPECT_EQ(qsgd_code_bits(4), 4);
  EXPECT_EQ(qsgd_code_bits(255), 9);
  EXPECT_EQ(qsgd_code_bits(256), 10);
  EXPECT_EQ(qsgd_code_bits(65535), 17);
  // n = 10, s = 1 (2 bits), bucket 4: two full buckets of 4 + 1 bytes, one of 2 elements 4 + 1.
  EXPECT_EQ(qsgd_packed_bytes(10, 1, 4), 15u);
  // s = 255 (9 bits), bucket 512: 4 + 576 bytes per bucket; 1000 = 512 + 488 (4 + 549).
  EXPECT_EQ(qsgd_packed_bytes(1000, 255, 512), 580u + 553u);
  EXPECT_EQ(qsgd_packed_bytes(0, 4, 512), 0u);
  for (int levels : {1, 2, 4, 15, 255, 65535})
    for (int64_t bucket : {1, 3, 8, 100, 512})
      for (int64_t n : {1, 7, 99, 1024, 1025}) {
        const int64_t w = qsgd_code_bits(levels), full = n / bucket, rem = n % bucket;
        const size_t want = full * (4 + (bucket * w + 7) / 8) + (rem ? 4 + (rem * w + 7) / 8 : 0);
        EXPECT_EQ(qsgd_packed_bytes(n, levels, bucket), want);
      }
  EXPECT_THROW(qsgd_packed_bytes(10, 0, 4), Error);
  EXPECT_THROW(qsgd_packed_bytes(10, kQsgdMaxLevels + 1, 4), Error);
  EXPECT_THROW(qsgd_packed_bytes(10, 4, 0), Error);
  EXPECT_THROW(qsgd_packed_bytes(-1, 4, 4), Error);
}

// Parses the wire independently (bit k = bit k % 8 of byte k / 8, code = level << 1 | sign) and
// checks every code against the documented formula with the documented Philox word, the norm
// against a naive double sum, the padding, the decoded values and the exact byte count.
TEST(Qsgd, WireFormatMatchesSpecification) {
  const QsgdCase cases[] = {{1000, 4, 128}, {5, 4, 512},       {513, 1, 512},  {1000, 255, 512},
                            {333, 7, 1},    {1024, 65535, 64}, {2049, 2, 300}, {77, 16, 8}};
  uint64_t seed = 100;
  for (const QsgdCase& c : cases) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " s " + std::to_string(c.levels) + " bucket " +
                 std::to_string(c.bucket));
    std::vector<float> g = normal_vec(c.n, seed++);
    g[0] = 0.0f;
    if (c.n > 3) g[3] = -0.0f;
    const uint64_t stream = rng_stream(RngPurpose::test, 9, 2, 1);
    const size_t bytes = qsgd_packed_bytes(c.n, c.levels, c.bucket);
    // Every byte written (0x00 and 0xFF fills agree), nothing beyond `bytes`.
    std::vector<uint8_t> a(bytes + 16, 0x00), b(bytes + 16, 0xFF);
    qsgd_pack_cpu(g.data(), c.n, c.levels, c.bucket, seed, stream, a.data());
    qsgd_pack_cpu(g.data(), c.n, c.levels, c.bucket, seed, stream, b.data());
    for (size_t k = 0; k < bytes; ++k) ASSERT_EQ(a[k], b[k]) << "byte " << k << " not written";
    for (size_t k = bytes; k < bytes + 16; ++k) ASSERT_EQ(b[k], 0xFF) << "wrote past the end";
    a.resize(bytes);

    const std::vector<float> dec = qsgd_decode(a, c.n, c.levels, c.bucket);
    const int w = qsgd_code_bits(c.levels);
    const int64_t stride = 4 + (c.bucket * w + 7) / 8;
    for (int64_t start = 0, bi = 0; start < c.n; start += c.bucket, ++bi) {
      const int64_t len = std::min(c.bucket, c.n - start);
      const uint8_t* o = a.data() + bi * stride;
      const float norm = load_f32(o);
      double sq = 0;
      for (int64_t j = 0; j < len; ++j) sq += double(g[start + j]) * g[start + j];
      const float naive = static_cast<float>(std::sqrt(sq));
      ASSERT_LE(std::fabs(norm - naive), std::nextafter(naive, 1e30f) - naive) << "bucket " << bi;
      const uint8_t* codes = o + 4;
      auto bit = [&](int64_t k) { return (codes[k / 8] >> (k % 8)) & 1; };
      for (int64_t j = 0; j < len; ++j) {
        uint32_t code = 0;
        for (int t = 0; t < w; ++t) code |= static_cast<uint32_t>(bit(j * w + t)) << t;
        const int64_t i = start + j;
        const double r = std::fabs(double(g[i])) * c.levels / double(norm);
        const double fl = std::floor(r);
        uint32_t level = static_cast<uint32_t>(fl);
        const float u = uniform01(philox_word(seed, stream, static_cast<uint64_t>(i)));
        if (norm > 0 && level < uint32_t(c.levels) && double(u) < r - fl) ++level;
        if (!(norm > 0)) level = 0;
        const uint32_t want = level == 0 ? 0 : (level << 1) | (g[i] < 0 ? 1u : 0u);
        ASSERT_EQ(code, want) << "element " << i;
        // Decoded value on the grid ||v|| l / s with l within one level of |v| / ||v|| s.
        const float grid = static_cast<float>(double(norm) * level / c.levels);
        ASSERT_TRUE(same_bits(dec[i], (code & 1) ? -grid : grid) || (level == 0 && dec[i] == 0))
            << "element " << i;
        if (norm > 0) {
          ASSERT_TRUE(level == fl || level == fl + 1) << "element " << i;
        }
      }
      for (int64_t k = len * w; k < ((len * w + 7) / 8) * 8; ++k) ASSERT_EQ(bit(k), 0) << "pad";
    }
  }
}

TEST(Qsgd, ZeroNormBucketsDecodeToZero) {
  const int64_t bucket = 16;
  std::vector<float> g = normal_vec(64, 5);
  for (int64_t j = 16; j < 32; ++j) g[j] = (j % 2) ? -0.0f : 0.0f;  // bucket 1 is all zeros
  const std::vector<uint8_t> p = qsgd_pack(g, 4, bucket, 1, 2);
  const int64_t stride = 4 + (bucket * qsgd_code_bits(4) + 7) / 8;
  EXPECT_EQ(load_f32(p.data() + stride), 0.0f);
  for (int64_t k = stride + 4; k < 2 * stride; ++k) EXPECT_EQ(p[k], 0) << "byte " << k;
  const std::vector<float> dec = qsgd_decode(p, 64, 4, bucket);
  for (int64_t j = 16; j < 32; ++j) EXPECT_EQ(dec[j], 0.0f);

  const std::vector<float> zeros(100, 0.0f);
  for (float x : qsgd_decode(qsgd_pack(zeros, 8, 32, 3, 4), 100, 8, 32)) EXPECT_EQ(x, 0.0f);
}

// A non-finite gradient must not vanish silently: its bucket (only) decodes to NaN, and in
// onebit the negative mean (where NaN is counted) becomes NaN.
TEST(Qsgd, NonFiniteInputIsLoud) {
  std::vector<float> g = normal_vec(48, 6);
  g[20] = std::numeric_limits<float>::infinity();
  g[40] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> dec = qsgd_decode(qsgd_pack(g, 4, 16, 1, 2), 48, 4, 16);
  for (int64_t i = 0; i < 48; ++i) EXPECT_EQ(std::isnan(dec[i]), i >= 16) << i;
  std::vector<float> r(48, 0.0f);
  const OnebitStepLite s = onebit_lite(g, r);
  EXPECT_TRUE(std::isnan(s.neg));
}

// Monte Carlo over K seeds. Unbiasedness: element i's decoded value is norm/s * (l or l+1), so
// its per-draw standard deviation is sigma_i = norm/s * sqrt(f_i (1 - f_i)) (f_i the fractional
// part); the mean of K draws must be within 5 sigma_i / sqrt(K) of v_i (CLT; two-sided false
// alarm 5.7e-7 per element, < 1e-3 over all elements checked). Variance: the exact expectation
// E||Q(v) - v||^2 = sum_i (norm/s)^2 f_i (1 - f_i) is checked against the Monte-Carlo mean (5%:
// its relative standard error here is < 0.5%) and against the QSGD bound
// min(n/s^2, sqrt(n)/s) ||v||^2 per bucket (Alistarh et al., Lemma 3.1).
TEST(Qsgd, UnbiasedAndWithinTheVarianceBound) {
  constexpr int kDraws = 3000;
  constexpr double kSigmas = 5.0;
  constexpr double kVarianceRtol = 0.05;
  const int64_t n = 1000, bucket = 128;  // last bucket 104 elements
  std::vector<float> g = normal_vec(n, 21);
  for (int64_t i = 500; i < 520; ++i) g[i] *= 30.0f;  // a few spikes: levels far from uniform
  for (int levels : {1, 2, 4, 16}) {
    SCOPED_TRACE("levels " + std::to_string(levels));
    std::vector<double> sum(n, 0.0);
    const int64_t buckets = (n + bucket - 1) / bucket;
    std::vector<double> sq_err(buckets, 0.0);
    std::vector<float> norms(buckets);
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<uint8_t> p = qsgd_pack(g, levels, bucket, 1000 + d, 77);
      const std::vector<float> dec = qsgd_decode(p, n, levels, bucket);
      for (int64_t i = 0; i < n; ++i) {
        sum[i] += dec[i];
        const double e = double(dec[i]) - g[i];
        sq_err[i / bucket] += e * e;
      }
      if (d == 0) {
        const int64_t stride = 4 + (bucket * qsgd_code_bits(levels) + 7) / 8;
        for (int64_t b = 0; b < buckets; ++b) norms[b] = load_f32(p.data() + b * stride);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const double unit = double(norms[i / bucket]) / levels;
      const double r = std::fabs(double(g[i])) / unit;
      const double f = r - std::floor(r);
      const double sigma = unit * std::sqrt(f * (1 - f));
      const double tol = kSigmas * sigma / std::sqrt(double(kDraws)) + 1e-6 * unit;
      ASSERT_NEAR(sum[i] / kDraws, g[i], tol) << "element " << i;
    }
    for (int64_t b = 0; b < buckets; ++b) {
      const int64_t start = b * bucket, len = std::min(bucket, n - start);
      double exact = 0, norm_sq = 0;
      const double unit = double(norms[b]) / levels;
      for (int64_t i = start; i < start + len; ++i) {
        const double r = std::fabs(double(g[i])) / unit, f = r - std::floor(r);
        exact += unit * unit * f * (1 - f);
        norm_sq += double(g[i]) * g[i];
      }
      const double s = levels, m = static_cast<double>(len);
      const double bound = std::min(m / (s * s), std::sqrt(m) / s) * norm_sq;
      EXPECT_NEAR(sq_err[b] / kDraws, exact, kVarianceRtol * exact) << "bucket " << b;
      EXPECT_LE(exact, bound) << "bucket " << b;
      EXPECT_LE(sq_err[b] / kDraws, bound) << "bucket " << b;
    }
  }
}

TEST(Qsgd, DeterministicInSeedStreamAndThreads) {
  const int64_t n = 200000;  // above the OpenMP threshold
  const std::vector<float> g = normal_vec(n, 31);
  const std::vector<uint8_t> ref = qsgd_pack(g, 4, 512, 5, 6);
  EXPECT_EQ(qsgd_pack(g, 4, 512, 5, 6), ref);
  EXPECT_NE(qsgd_pack(g, 4, 512, 5, 7), ref);
  EXPECT_NE(qsgd_pack(g, 4, 512, 6, 6), ref);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(qsgd_pack(g, 4, 512, 5, 6), ref) << threads << " threads";
    EXPECT_EQ(qsgd_decode(ref, n, 4, 512), qsgd_decode(ref, n, 4, 512));
  }
  omp_set_num_threads(saved);
}

TEST(Qsgd, UnpackScalesAndAccumulates) {
  const int64_t n = 300;
  const std::vector<float> g = normal_vec(n, 41);
  const std::vector<uint8_t> p = qsgd_pack(g, 8, 64, 1, 1);
  const std::vector<float> dec = qsgd_decode(p, n, 8, 64);
  std::vector<float> acc = normal_vec(n, 42);
  const std::vector<float> acc0 = acc;
  qsgd_unpack_accumulate_cpu(p.data(), n, 8, 64, 1.0f / 3.0f, acc.data());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_bits(acc[i], std::fma(1.0f / 3.0f, dec[i], acc0[i]))) << i;
}

// =========================================== onebit ============================================

struct OnebitStep {
  std::vector<uint8_t> packed;
  std::vector<float> decoded;  // scale 1 into zeros
};

OnebitStep onebit_step(const std::vector<float>& g, std::vector<float>& residual) {
  const int64_t n = static_cast<int64_t>(g.size());
  OnebitStep s;
  s.packed.assign(onebit_packed_bytes(n), 0xAB);
  onebit_pack_cpu(g.data(), residual.data(), n, s.packed.data());
  s.decoded.assign(n, 0.0f);
  onebit_unpack_accumulate_cpu(s.packed.data(), n, 1.0f, s.decoded.data());
  return s;
}

TEST(Onebit, PackedBytes) {
  EXPECT_EQ(onebit_packed_bytes(0), 8u);
  EXPECT_EQ(onebit_packed_bytes(1), 9u);
  EXPECT_EQ(onebit_packed_bytes(8), 9u);
  EXPECT_EQ(onebit_packed_bytes(9), 10u);
  EXPECT_THROW(onebit_packed_bytes(-3), Error);
}

// Header = the two means (naive double means, rounded to float: may differ by 1 ulp from the
// canonical order in principle), bits = (v >= 0), decoded = the mean of the element's side,
// new residual = v - decoded exactly. Sizes span several chunks and a partial last byte.
TEST(Onebit, DecodesToTheTwoMeans) {
  for (int64_t n : {1, 7, 8, 100, 4096, 3 * 4096 + 17}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> g = normal_vec(n, 50 + n, 0.2f);
    std::vector<float> residual = normal_vec(n, 60 + n, 0.0f, 0.1f);
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = g[i] + residual[i];
    const OnebitStep s = onebit_step(g, residual);
    double ps = 0, ns = 0;
    int64_t pc = 0;
    for (float x : v) {
      if (x >= 0)
        ps += x, ++pc;
      else
        ns += x;
    }
    const float pm = pc ? float(ps / pc) : 0.0f, nm = pc < n ? float(ns / (n - pc)) : 0.0f;
    const float pos = load_f32(s.packed.data()), neg = load_f32(s.packed.data() + 4);
    EXPECT_LE(std::fabs(pos - pm), std::fabs(std::nextafter(pm, 1e30f) - pm));
    EXPECT_LE(std::fabs(neg - nm), std::fabs(std::nextafter(nm, -1e30f) - nm));
    for (int64_t i = 0; i < n; ++i) {
      const bool ge = v[i] >= 0;
      ASSERT_EQ((s.packed[8 + i / 8] >> (i % 8)) & 1, ge ? 1 : 0) << i;
      ASSERT_EQ(s.decoded[i], ge ? pos : neg) << i;
      ASSERT_TRUE(same_bits(residual[i], v[i] - (ge ? pos : neg))) << i;
    }
    for (int64_t i = n; i < 8 * ((n + 7) / 8); ++i)
      ASSERT_EQ((s.packed[8 + i / 8] >> (i % 8)) & 1, 0) << "padding bit " << i;
  }
}

TEST(Onebit, EmptySideHasMeanZero) {
  std::vector<float> g(20, 0.5f), r(20, 0.0f);
  g[3] = 0.0f;
  OnebitStep s = onebit_step(g, r);
  EXPECT_EQ(load_f32(s.packed.data() + 4), 0.0f);
  EXPECT_FLOAT_EQ(load_f32(s.packed.data()), (19 * 0.5f) / 20);
  std::vector<float> h(9, -2.0f), r2(9, 0.0f);
  s = onebit_step(h, r2);
  EXPECT_EQ(load_f32(s.packed.data()), 0.0f);
  EXPECT_EQ(load_f32(s.packed.data() + 4), -2.0f);
  for (float x : r2) EXPECT_EQ(x, 0.0f);
  std::vector<uint8_t> empty(8, 0xEE);
  onebit_pack_cpu(nullptr, nullptr, 0, empty.data());
  EXPECT_EQ(load_f32(empty.data()), 0.0f);
  EXPECT_EQ(load_f32(empty.data() + 4), 0.0f);
}

// Error feedback loses nothing: with r_0 = 0, sum_t decoded_t + r_T = sum_t g_t. Each step
// rounds twice (v = g + r, r' = v - d), each error <= FLT_EPSILON / 2 * max(|v|, |r'|), so the
// per-element tolerance is T * FLT_EPSILON * max |v| (bookkeeping in double is exact).
// Boundedness: the residual stays below kResidualBound * max |g| over all steps (it would grow
// like sqrt(t) or t if the feedback were broken; the measured ratio here is 1.4).
TEST(Onebit, ErrorFeedbackConservesTheGradientSum) {
  constexpr int kSteps = 300;
  constexpr double kResidualBound = 3.0;
  const int64_t n = 5000;
  std::vector<float> residual(n, 0.0f);
  std::vector<double> sum_g(n, 0.0), sum_d(n, 0.0);
  double max_v = 0, max_g = 0, max_r = 0;
  for (int t = 0; t < kSteps; ++t) {
    // Gradients with a per-element drift (as in training) plus noise.
    std::vector<float> g = normal_vec(n, 1000 + t);
    for (int64_t i = 0; i < n; ++i) g[i] += 0.3f * std::sin(0.01f * i);
    for (int64_t i = 0; i < n; ++i) {
      max_v = std::max(max_v, std::fabs(double(g[i]) + residual[i]) * (1 + FLT_EPSILON));
      max_g = std::max(max_g, std::fabs(double(g[i])));
      sum_g[i] += g[i];
    }
    const OnebitStep s = onebit_step(g, residual);
    for (int64_t i = 0; i < n; ++i) {
      sum_d[i] += s.decoded[i];
      max_r = std::max(max_r, std::fabs(double(residual[i])));
    }
  }
  const double tol = kSteps * FLT_EPSILON * max_v;
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(sum_d[i] + residual[i], sum_g[i], tol) << i;
  EXPECT_LE(max_r, kResidualBound * max_g);
}

// Averaging N workers: unpack-accumulate with scale 1/N into one buffer = sum_w fma(1/N, d_w, .)
// in worker order, bit for bit, and close to the exact average.
TEST(Onebit, ScaleAveragesWorkers) {
  constexpr int kWorkers = 4;
  const int64_t n = 1001;
  const float scale = 1.0f / kWorkers;
  std::vector<float> acc(n, 0.0f), want(n, 0.0f);
  std::vector<double> exact(n, 0.0);
  for (int w = 0; w < kWorkers; ++w) {
    const std::vector<float> g = normal_vec(n, 70 + w);
    std::vector<float> residual(n, 0.0f);
    const OnebitStep s = onebit_step(g, residual);
    onebit_unpack_accumulate_cpu(s.packed.data(), n, scale, acc.data());
    for (int64_t i = 0; i < n; ++i) {
      want[i] = std::fma(scale, s.decoded[i], want[i]);
      exact[i] += double(s.decoded[i]) / kWorkers;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(same_bits(acc[i], want[i])) << i;
    ASSERT_NEAR(acc[i], exact[i], 4 * FLT_EPSILON * 2.0) << i;  // |decoded| < 2 here
  }
}

TEST(Onebit, IndependentOfThreadCount) {
  const int64_t n = 100003;  // above the OpenMP threshold, many chunks
  const std::vector<float> g = normal_vec(n, 80);
  const std::vector<float> r0 = normal_vec(n, 81, 0.0f, 0.5f);
  std::vector<float> r_ref = r0;
  const OnebitStep ref = onebit_step(g, r_ref);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> r = r0;
    const OnebitStep s = onebit_step(g, r);
    EXPECT_EQ(s.packed, ref.packed) << threads << " threads";
    EXPECT_EQ(0, std::memcmp(r.data(), r_ref.data(), n * sizeof(float))) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Fp16, IndependentOfThreadCount) {
  const int64_t n = 100003;
  const std::vector<float> g = normal_vec(n, 90, 0.0f, 100.0f);
  const std::vector<uint16_t> ref = pack_fp16(g);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(pack_fp16(g), ref) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace tg::tern
