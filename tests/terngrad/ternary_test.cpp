// TernGrad kernels on the CPU (terngrad/ternary_kernels.h) against naive loops and against the
// statistics of the paper's ternarize operator and gradient clipping.
//
// The naive loop is the specification: code_i = reference_code(...) of ternary_reference.h (the
// rule of terngrad/ternary_rule.h in exact arithmetic), packed element by element as the header
// documents. Statistical tests use fixed seeds; each one states its tolerance and its
// false-alarm rate (the probability that a correct implementation fails it on a fresh seed).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/ternary_kernels.h"
#include "tests/terngrad/ternary_reference.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

constexpr uint64_t kSeed = 20170517;
constexpr PackFormat kFormats[] = {PackFormat::two_bit, PackFormat::base3};

const char* name(PackFormat f) {
  return f == PackFormat::two_bit ? "two_bit" : "base3";
}

std::vector<float> gaussian(int64_t n, float sigma, uint64_t stream) {
  const Tensor t = testing::random_normal({n}, sigma, kSeed, stream);
  const float* p = t.data<float>();
  return std::vector<float>(p, p + n);
}

uint64_t tern_stream(uint64_t step, uint64_t worker = 0, uint64_t tensor = 0) {
  return rng_stream(RngPurpose::ternarize, step, worker, tensor);
}

// ---- naive reference ----------------------------------------------------------------------

std::vector<int> naive_codes(const std::vector<float>& g, float s, uint64_t seed, uint64_t stream) {
  std::vector<int> c(g.size(), 0);
  if (!(s > 0.0f)) return c;
  for (size_t i = 0; i < g.size(); ++i) {
    c[i] = reference_code(g[i], s, seed, stream, i);
  }
  return c;
}

std::vector<uint8_t> naive_pack(const std::vector<int>& c, PackFormat f) {
  const int64_t n = static_cast<int64_t>(c.size());
  std::vector<uint8_t> out(packed_bytes(f, n), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (f == PackFormat::two_bit) {
      out[i / 4] |= static_cast<uint8_t>((c[i] + 1) << (2 * (i % 4)));
    } else {
      int p = 1;
      for (int k = 0; k < i % 5; ++k) p *= 3;
      out[i / 5] += static_cast<uint8_t>((c[i] + 1) * p);
    }
  }
  if (f == PackFormat::base3) {  // missing elements of the last byte are code 0 (digit 1)
    for (int64_t i = n; i < static_cast<int64_t>(out.size()) * 5; ++i) {
      int p = 1;
      for (int k = 0; k < i % 5; ++k) p *= 3;
      out[i / 5] += static_cast<uint8_t>(p);
    }
  }
  return out;
}

std::vector<uint8_t> pack(const std::vector<float>& g, float s, uint64_t seed, uint64_t stream,
                          PackFormat f) {
  std::vector<uint8_t> out(packed_bytes(f, static_cast<int64_t>(g.size())), 0xEE);
  ternarize_pack_cpu(g.data(), static_cast<int64_t>(g.size()), s, seed, stream, f, out.data());
  return out;
}

std::vector<int32_t> unpack(const std::vector<uint8_t>& p, int64_t n, PackFormat f) {
  std::vector<int32_t> acc(n, 0);
  unpack_accumulate_cpu(p.data(), n, f, acc.data());
  return acc;
}

float max_abs(const std::vector<float>& g) {
  float m = 0;
  for (float v : g) m = std::max(m, std::fabs(v));
  return m;
}

// Sizes covering every n mod 4 and mod 5 (0..23), the AVX2 batch (32) and tile (2560) edges,
// and multi-tile, multi-thread sizes.
std::vector<int64_t> test_sizes() {
  std::vector<int64_t> n(24);
  std::iota(n.begin(), n.end(), 0);
  for (int64_t m :
       {31, 32, 33, 63, 64, 65, 255, 256, 257, 1000, 2559, 2560, 2561, 5121, 65536 + 7, 300001})
    n.push_back(m);
  return n;
}

// ---- sizes, formats, round trips ----------------------------------------------------------

TEST(Ternary, PackedBytes) {
  for (int64_t n = 0; n <= 23; ++n) {
    EXPECT_EQ(packed_bytes(PackFormat::two_bit, n), static_cast<size_t>((n + 3) / 4)) << n;
    EXPECT_EQ(packed_bytes(PackFormat::base3, n), static_cast<size_t>((n + 4) / 5)) << n;
  }
  EXPECT_EQ(packed_bytes(PackFormat::two_bit, 10000000), 2500000u);
  EXPECT_EQ(packed_bytes(PackFormat::base3, 10000001), 2000001u);
  EXPECT_THROW(packed_bytes(PackFormat::two_bit, -1), Error);
  EXPECT_THROW(packed_bytes(static_cast<PackFormat>(7), 4), Error);
}

TEST(Ternary, PackMatchesNaiveLoop) {
  // Several (seed, stream) pairs, including high bits set in both, and scalers below and above
  // max|g| (the first clips part of the tensor).
  const uint64_t seeds[] = {kSeed, 0xDEADBEEFCAFEBABEULL};
  for (int64_t n : test_sizes()) {
    std::vector<float> g = gaussian(n, 1.0f, 100 + n);
    if (n > 8) g[3] = 0.0f, g[n - 2] = -0.0f;  // exact zeros are never kept
    const float m = max_abs(g);
    for (PackFormat f : kFormats) {
      for (uint64_t seed : seeds) {
        for (float s : {0.7f * m, m, 3.0f * m}) {
          SCOPED_TRACE(std::string(name(f)) + " n=" + std::to_string(n) +
                       " s=" + std::to_string(s));
          const uint64_t stream = tern_stream(7, 3, static_cast<uint64_t>(n));
          const std::vector<int> c = naive_codes(g, s, seed, stream);
          ASSERT_EQ(pack(g, s, seed, stream, f), naive_pack(c, f));
          const std::vector<int32_t> back = unpack(pack(g, s, seed, stream, f), n, f);
          ASSERT_TRUE(std::equal(back.begin(), back.end(), c.begin()));
        }
      }
    }
  }
}

TEST(Ternary, KeepProbabilityResolvesBelowOneIn256) {
  // |g| / s = q / 256 with q < 1: the primary byte alone cannot keep the element (b < floor(x) =
  // 0 never holds), so every kept element went through the 24-bit refinement: P(keep) = q / 256
  // exactly (x = q is exact here). n = 2^21 elements per case: kept ~ Binomial(n, q / 256), sd
  // <= 64; tolerance 5 sd (false alarm 6e-7 per case). With the old 24-bit uniform the same
  // test holds; with 8-bit uniforms alone P would be 0.
  const int64_t n = 1 << 21;
  for (double q : {0.5, 0.125, 0.9}) {
    const float s = 1.0f;
    const std::vector<float> g(n, static_cast<float>(q / 256.0));
    for (PackFormat f : kFormats) {
      SCOPED_TRACE(std::string(name(f)) + " q=" + std::to_string(q));
      const std::vector<int32_t> c = unpack(pack(g, s, kSeed, tern_stream(1, 0, 4), f), n, f);
      const double kept = std::count(c.begin(), c.end(), 1);
      EXPECT_EQ(std::count(c.begin(), c.end(), -1), 0);
      const double mean = n * q / 256.0, sd = std::sqrt(mean * (1 - q / 256.0));
      EXPECT_NEAR(kept, mean, 5 * sd);
    }
  }
  // Edge values: NaN is dropped, +-inf and |g| >= s are kept with their sign, zero is dropped.
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> edge = {nan, -nan, inf, -inf, 1.0f, -1.0f, 2.0f, 0.0f};
  for (PackFormat f : kFormats) {
    const std::vector<int32_t> c = unpack(pack(edge, 1.0f, kSeed, 3, f), 8, f);
    EXPECT_EQ(c, (std::vector<int32_t>{0, 0, 1, -1, 1, -1, 1, 0})) << name(f);
  }
}

TEST(Ternary, RoundTripEveryCodePattern) {
  // g in {-1, 0, +1} with s = 1: u * 1 < 1 always, so code = g exactly and every code pattern can
  // be written and read back. Padding: two_bit bits above element n-1 are 0; base3 missing digits
  // are 1 (code 0).
  for (int64_t n : test_sizes()) {
    std::vector<float> g(n);
    std::vector<int> c(n);
    for (int64_t i = 0; i < n; ++i) {
      c[i] = static_cast<int>(philox_word(kSeed, 9, i) % 3) - 1;
      g[i] = static_cast<float>(c[i]);
    }
    for (PackFormat f : kFormats) {
      SCOPED_TRACE(std::string(name(f)) + " n=" + std::to_string(n));
      const std::vector<uint8_t> p = pack(g, 1.0f, kSeed, 1, f);
      ASSERT_EQ(p.size(), packed_bytes(f, n));
      ASSERT_EQ(p, naive_pack(c, f));
      if (!p.empty() && f == PackFormat::two_bit && n % 4 != 0) {
        EXPECT_EQ(p.back() >> (2 * (n % 4)), 0) << "two_bit padding bits must be 0";
      }
      if (!p.empty() && f == PackFormat::base3) {
        int last = p.back();
        for (int64_t i = 5 * (n / 5); i < 5 * static_cast<int64_t>(p.size()); ++i, last /= 3)
          if (i >= n) {
            EXPECT_EQ(last % 3, 1) << "base3 padding digit of element " << i;
          }
      }
      // Accumulate twice onto a non-zero accumulator: acc = start + 2 * code.
      std::vector<int32_t> acc(n);
      for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<int32_t>(i % 7) - 3;
      unpack_accumulate_cpu(p.data(), n, f, acc.data());
      unpack_accumulate_cpu(p.data(), n, f, acc.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(acc[i], static_cast<int32_t>(i % 7) - 3 + 2 * c[i]) << "element " << i;
    }
  }
}

TEST(Ternary, UnpackManyEqualsTheSumOfDecodedVectors) {
  // Every byte value (random bytes, including ones the packer never writes: they decode as
  // code 0), vectors `stride` bytes apart with a gap, 0..5 vectors: acc = start + the sum of the
  // vectors' codes decoded by hand from the documented layouts.
  for (int64_t n : test_sizes()) {
    for (PackFormat f : kFormats) {
      const size_t bytes = packed_bytes(f, n), stride = bytes + 5;
      for (int64_t count : {0, 1, 2, 5}) {
        SCOPED_TRACE(std::string(name(f)) + " n=" + std::to_string(n) +
                     " count=" + std::to_string(count));
        std::vector<uint8_t> p(count * stride);
        for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<uint8_t>(philox_word(kSeed, 8, j));
        std::vector<int32_t> want(n), acc(n);
        for (int64_t i = 0; i < n; ++i) want[i] = acc[i] = static_cast<int32_t>(i % 5) - 2;
        for (int64_t v = 0; v < count; ++v) {
          for (int64_t i = 0; i < n; ++i) {
            const int b = p[v * stride + (f == PackFormat::two_bit ? i / 4 : i / 5)];
            int code = 0;
            if (f == PackFormat::two_bit) {
              const int d = (b >> (2 * (i % 4))) & 3;
              code = d == 3 ? 0 : d - 1;
            } else if (b < 243) {
              int d = b;
              for (int k = 0; k < i % 5; ++k) d /= 3;
              code = d % 3 - 1;
            }
            want[i] += code;
          }
        }
        unpack_accumulate_many_cpu(p.data(), count, stride, n, f, acc.data());
        ASSERT_EQ(acc, want);
      }
    }
  }
}

TEST(Ternary, ZeroScalerAndZeroElements) {
  for (int64_t n : {1, 4, 5, 13, 1000, 70001}) {
    const std::vector<float> g = gaussian(n, 1.0f, 5);
    for (PackFormat f : kFormats) {
      for (float s : {0.0f, -1.0f, std::nanf("")}) {
        const std::vector<uint8_t> p = pack(g, s, kSeed, 2, f);
        EXPECT_EQ(p, naive_pack(std::vector<int>(n, 0), f)) << name(f) << " n=" << n;
      }
    }
  }
  // Exact zeros (+0 and -0) are never kept, whatever the scaler.
  std::vector<float> g = gaussian(4096, 1.0f, 6);
  for (size_t i = 0; i < g.size(); i += 3) g[i] = (i % 2) ? -0.0f : 0.0f;
  for (PackFormat f : kFormats) {
    for (float s : {1e-30f, 1.0f, 100.0f}) {
      const std::vector<int32_t> c = unpack(pack(g, s, kSeed, 3, f), 4096, f);
      for (size_t i = 0; i < g.size(); i += 3) ASSERT_EQ(c[i], 0) << "element " << i;
    }
  }
}

TEST(Ternary, RejectsBadArguments) {
  float g[4] = {};
  uint8_t out[2];
  int32_t acc[4] = {};
  EXPECT_THROW(ternarize_pack_cpu(g, -1, 1.0f, 0, 0, PackFormat::two_bit, out), Error);
  EXPECT_THROW(ternarize_pack_cpu(g, 4, 1.0f, 0, 0, static_cast<PackFormat>(9), out), Error);
  EXPECT_THROW(unpack_accumulate_cpu(out, 4, static_cast<PackFormat>(9), acc), Error);
  EXPECT_THROW(ternarize_pack_cpu(nullptr, 4, 1.0f, 0, 0, PackFormat::two_bit, out), Error);
}

// ---- stats --------------------------------------------------------------------------------

TEST(Ternary, StatsMatchNaiveDoubleLoop) {
  // Relative tolerance 1e-12: both sides sum in double, only the order differs (error ~n*eps).
  constexpr double kRel = 1e-12;
  for (int64_t n : {0, 1, 7, 8, 9, 1000, 16384, 16385, 300001, 1000003}) {
    std::vector<float> g = gaussian(n, 0.3f, 11 + n);
    for (float& v : g) v += 0.05f;  // non-zero mean
    TensorStats st;
    tensor_stats_cpu(g.data(), n, &st);
    double s = 0, q = 0, a = 0, m = 0;
    for (float v : g) {
      s += v;
      q += double(v) * v;
      a += std::fabs(double(v));
      m = std::max(m, std::fabs(double(v)));
    }
    EXPECT_EQ(st.n, n);
    EXPECT_EQ(st.max_abs, m) << n;
    EXPECT_NEAR(st.sum, s, kRel * a + 1e-300) << n;
    EXPECT_NEAR(st.sum_sq, q, kRel * q) << n;
    EXPECT_NEAR(st.l1, a, kRel * a) << n;
    double var = 0;  // two-pass population variance
    for (float v : g) var += (v - s / n) * (v - s / n);
    if (n > 0) {
      EXPECT_NEAR(st.sigma(), std::sqrt(var / n), 1e-9) << n;
    }
    EXPECT_NEAR(st.mean(), n ? s / n : 0.0, 1e-12) << n;
  }
  TensorStats constant;  // E[g^2] - E[g]^2 may round below 0: sigma clamps to 0
  const std::vector<float> c(1001, 0.1f);
  tensor_stats_cpu(c.data(), 1001, &constant);
  EXPECT_GE(constant.sigma(), 0.0);
  EXPECT_LT(constant.sigma(), 1e-6);
}

// ---- determinism --------------------------------------------------------------------------

struct OmpThreads {  // sets the OpenMP thread count for a scope
  explicit OmpThreads(int n) : old(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(old); }
  int old;
};

TEST(Ternary, Determinism) {
  const int64_t n = 1000003;
  const std::vector<float> g = gaussian(n, 1.0f, 21);
  const float s = 2.5f;
  for (PackFormat f : kFormats) {
    SCOPED_TRACE(name(f));
    const std::vector<uint8_t> a = pack(g, s, kSeed, tern_stream(5, 1, 2), f);
    EXPECT_EQ(a, pack(g, s, kSeed, tern_stream(5, 1, 2), f)) << "same (seed, stream)";
    EXPECT_NE(a, pack(g, s, kSeed, tern_stream(5, 2, 2), f)) << "other worker";
    EXPECT_NE(a, pack(g, s, kSeed, tern_stream(6, 1, 2), f)) << "other step";
    EXPECT_NE(a, pack(g, s, kSeed, tern_stream(5, 1, 3), f)) << "other tensor";
    EXPECT_NE(a, pack(g, s, kSeed + 1, tern_stream(5, 1, 2), f)) << "other seed";
    // Different streams must be (nearly) independent, not merely different: agreement of the
    // codes of two streams is ~ sum_i p_i^2 + (1-p_i)^2 per element; compare it with the same
    // tensor under one stream's expected self-agreement by a loose bound.
    const std::vector<int32_t> ca = unpack(a, n, f);
    const std::vector<int32_t> cb = unpack(pack(g, s, kSeed, tern_stream(5, 2, 2), f), n, f);
    double agree = 0, expect = 0;
    for (int64_t i = 0; i < n; ++i) {
      agree += ca[i] == cb[i];
      const double p = std::min(1.0, std::fabs(double(g[i])) / s);
      expect += p * p + (1 - p) * (1 - p);
    }
    // sd of `agree` < sqrt(n)/2 = 500; 5000 is 10 sd (false alarm < 1e-20).
    EXPECT_NEAR(agree, expect, 5000.0);

    std::vector<uint8_t> t1, t2;
    {
      OmpThreads one(1);
      t1 = pack(g, s, kSeed, 77, f);
    }
    {
      OmpThreads two(2);
      t2 = pack(g, s, kSeed, 77, f);
    }
    EXPECT_EQ(t1, t2) << "packed bytes depend on the thread count";
  }
  TensorStats s1, s2;
  {
    OmpThreads one(1);
    tensor_stats_cpu(g.data(), n, &s1);
  }
  {
    OmpThreads two(2);
    tensor_stats_cpu(g.data(), n, &s2);
  }
  EXPECT_EQ(std::memcmp(&s1, &s2, sizeof(s1)), 0) << "stats depend on the thread count";
}

// ---- statistics of the ternary estimator --------------------------------------------------

// T ternarizations of g (one step of the stream each) accumulated: acc_i = sum_t code_i^t and
// nz_t = number of non-zero codes of trial t.
struct Trials {
  std::vector<int32_t> acc;
  std::vector<int64_t> nonzeros;
};

Trials run_trials(const std::vector<float>& g, float s, PackFormat f, int trials) {
  const int64_t n = static_cast<int64_t>(g.size());
  Trials r{std::vector<int32_t>(n, 0), {}};
  std::vector<uint8_t> p(packed_bytes(f, n));
  int nz_of_byte[256];  // number of non-zero codes in a fully used byte
  for (int b = 0; b < 256; ++b) {
    nz_of_byte[b] = 0;
    int x = b;
    for (int k = 0; k < (f == PackFormat::two_bit ? 4 : 5); ++k) {
      const int d = f == PackFormat::two_bit ? x & 3 : x % 3;
      x = f == PackFormat::two_bit ? x >> 2 : x / 3;
      nz_of_byte[b] += d == 0 || d == 2;
    }
  }
  for (int t = 0; t < trials; ++t) {
    ternarize_pack_cpu(g.data(), n, s, kSeed, tern_stream(t, 0, 42), f, p.data());
    unpack_accumulate_cpu(p.data(), n, f, r.acc.data());
    int64_t nz = 0;  // padding decodes to 0 in both formats
    for (uint8_t b : p) nz += nz_of_byte[b];
    r.nonzeros.push_back(nz);
  }
  return r;
}

// Checks unbiasedness of the T-trial mean against f = clip(g, -s, s), per element and in
// aggregate; returns nothing, reports through gtest.
void check_unbiased(const std::vector<float>& g, float s, const Trials& r, int T) {
  const int64_t n = static_cast<int64_t>(g.size());
  // Per element (in units of s, code b_i in {0, 1} with sign fixed): Bernstein's inequality
  // P(|mean - p| >= t) <= 2 exp(-T t^2 / (2 p (1-p) + 2t/3)). With delta = 1e-10 per element
  // the whole test's false-alarm rate is <= n * delta = 1e-5.
  const double L = std::log(2.0 / 1e-10);
  double zsum = 0, vsum = 0, z2 = 0;
  int64_t z2_count = 0, clipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = std::min(1.0, std::fabs(double(g[i])) / s);
    const double f = (g[i] > 0 ? 1.0 : -1.0) * p;  // clip(g, -s, s) / s
    const double mean = double(r.acc[i]) / T;
    if (p == 1.0) {  // clipped: kept every time, exactly
      ++clipped;
      ASSERT_EQ(r.acc[i], (g[i] > 0 ? T : -T)) << "clipped element " << i;
      continue;
    }
    const double var = p * (1 - p);
    const double tol = (L / 3 + std::sqrt(L * L / 9 + 2.0 * T * var * L)) / T;
    ASSERT_LE(std::fabs(mean - f), tol) << "element " << i << " g=" << g[i] << " p=" << p;
    zsum += (mean - f) * T;
    vsum += var * T;
    if (T * var >= 25) {
      z2 += (mean - f) * (mean - f) * T / var;
      ++z2_count;
    }
  }
  // Aggregate bias: Z = sum_i (sum_t code - T f_i) / sqrt(sum_i T p(1-p)) is a sum of ~n*T
  // independent bounded terms, N(0, 1) to high accuracy: |Z| < 5 (false alarm 6e-7).
  EXPECT_LT(std::fabs(zsum / std::sqrt(vsum)), 5.0) << "aggregate bias";
  // The Monte-Carlo error has the predicted size: mean of z_i^2 over elements with
  // T p(1-p) >= 25 is 1 with sd sqrt((2 + 1/25) / m); tolerance 6 sd (false alarm 2e-9).
  ASSERT_GT(z2_count, 1000);
  EXPECT_NEAR(z2 / z2_count, 1.0, 6.0 * std::sqrt(2.04 / z2_count)) << "MC error size";
  if (s < max_abs(g)) {
    EXPECT_GT(clipped, 0);
  }
}

// Second moment, variance and sparsity of the estimator from the same trials, with
// f = clip(g, -s, s): E||g~||^2 = s ||f||_1, E||g~ - f||^2 = s ||f||_1 - ||f||^2,
// E[zeros] / n = 1 - ||f||_1 / (n s).
void check_moments(const std::vector<float>& g, float s, const Trials& r, int T) {
  const int64_t n = static_cast<int64_t>(g.size());
  double f1 = 0, f2 = 0, sum_p = 0, var_nz = 0, f_dot_acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::min(std::fabs(double(g[i])), double(s));
    const double f = g[i] > 0 ? a : -a;
    f1 += a;
    f2 += a * a;
    sum_p += a / s;
    var_nz += (a / s) * (1 - a / s);
    f_dot_acc += f * r.acc[i];
  }
  double nz_total = 0;
  for (int64_t v : r.nonzeros) nz_total += double(v);
  const double mean_nz = nz_total / T;
  // ||g~||^2 = s^2 * nonzeros. Digest criterion: within 1% (sd here is ~1e-4 relative, so the
  // false-alarm rate is nil); plus a 6-sd check of the mean count (false alarm 2e-9).
  const double second = double(s) * s * mean_nz;
  EXPECT_NEAR(second, double(s) * f1, 0.01 * double(s) * f1) << "E||g~||^2 = s ||f||_1";
  EXPECT_NEAR(mean_nz, sum_p, 6.0 * std::sqrt(var_nz / T)) << "mean non-zero count";
  // E||g~ - f||^2 averaged over trials = (s^2 sum nz - 2 s f.acc + T ||f||^2) / T; within 1%.
  const double var_emp = (double(s) * s * nz_total - 2.0 * s * f_dot_acc + T * f2) / T;
  const double var_th = double(s) * f1 - f2;
  EXPECT_NEAR(var_emp, var_th, 0.01 * var_th) << "variance s||f||_1 - ||f||^2";
  // Sparsity: 6 sd of the mean zero fraction.
  const double zeros = 1.0 - mean_nz / n, zeros_th = 1.0 - f1 / (n * double(s));
  EXPECT_NEAR(zeros, zeros_th, 6.0 * std::sqrt(var_nz / T) / n) << "sparsity";
}

// n = 10^5 Gaussian elements, T = 10^4 ternarizations (one stream step each); ~1 s per case.
constexpr int64_t kN = 100000;
constexpr int kT = 10000;

TEST(TernaryStats, UnbiasedAndMomentsWithMaxScaler) {
  const std::vector<float> g = gaussian(kN, 1.0f, 31);
  const float s = max_abs(g);  // the paper's s = ||g||_inf: nothing clipped except argmax
  const Trials r = run_trials(g, s, PackFormat::two_bit, kT);
  check_unbiased(g, s, r, kT);
  check_moments(g, s, r, kT);
}

TEST(TernaryStats, UnbiasedForClippedGradientAndSparsity) {
  const std::vector<float> g = gaussian(kN, 1.0f, 32);
  TensorStats st;
  tensor_stats_cpu(g.data(), kN, &st);
  const float s = static_cast<float>(2.5 * st.sigma());  // the reference code's s = c * sigma
  const Trials r = run_trials(g, s, PackFormat::base3, kT);
  check_unbiased(g, s, r, kT);  // mean -> clip(g, -s, s)
  check_moments(g, s, r, kT);
  // Gaussian with s = 2.5 sigma: expected zero fraction 1 - E[min(|x|, 2.5)] / 2.5 = 0.68245
  // (~0.68, cf. the paper's ~70% on AlexNet fc6). The sample of 10^5 elements moves it by sd ~7e-4;
  // tolerance 0.005 (7 sd, false alarm ~1e-12).
  double nz = 0;
  for (int64_t v : r.nonzeros) nz += double(v);
  EXPECT_NEAR(1.0 - nz / (double(kT) * kN), 0.6824495, 0.005);
}

TEST(TernaryStats, ClippingStatisticsOnGaussian) {
  // Derived: clipping a Gaussian at c = 2.5 sigma clips 2(1 - Phi(2.5)) = 1.2419% of
  // the elements, keeps 0.988716 of the length and turns it by 2.7464 degrees. n = 10^6; the
  // sampling sd of the three statistics is ~1.1e-4, ~1.5e-4 and ~0.02 degrees; tolerances are
  // >= 6 sd (false alarm < 1e-8).
  const int64_t n = 1000000;
  const std::vector<float> g = gaussian(n, 0.01f, 33);
  TensorStats st;
  tensor_stats_cpu(g.data(), n, &st);
  const double c = 2.5 * st.sigma();
  double dot = 0, ff = 0, gg = 0;
  int64_t clipped = 0;
  for (float v : g) {
    const double x = v, f = std::clamp(x, -c, c);
    clipped += std::fabs(x) > c;
    dot += f * x;
    ff += f * f;
    gg += x * x;
  }
  const double frac = double(clipped) / n, len = std::sqrt(ff / gg);
  const double angle = std::acos(dot / std::sqrt(ff * gg)) * 180.0 / M_PI;
  const double exact_frac = std::erfc(2.5 / std::sqrt(2.0));
  EXPECT_NEAR(frac, exact_frac, 0.0008);
  EXPECT_NEAR(len, 0.9887163, 0.0015);
  EXPECT_NEAR(angle, 2.746426, 0.15);
  // The same figures, rounded.
  EXPECT_NEAR(frac * 100, 1.24, 0.08);
  EXPECT_NEAR(len, 0.989, 0.002);
  EXPECT_NEAR(angle, 2.7, 0.2);
}

TEST(TernaryStats, SharedScalerAggregateOnGridAndOrderFree) {
  const int64_t n = 10007;
  for (int N : {2, 4, 8}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    std::vector<std::vector<float>> g(N);
    double s_shared = 0;
    // Workers' gradients: a common part (so all N may agree and reach the extreme levels +-s)
    // scaled differently per worker plus worker noise: different gradients and sigmas.
    const std::vector<float> common = gaussian(n, 1.0f, 39);
    for (int w = 0; w < N; ++w) {
      g[w] = gaussian(n, 0.2f, 40 + w);
      for (int64_t i = 0; i < n; ++i) g[w][i] += (0.5f + 0.25f * w) * common[i];
      TensorStats st;
      tensor_stats_cpu(g[w].data(), n, &st);
      s_shared = std::max(s_shared, 2.5 * st.sigma());
    }
    const float s = static_cast<float>(s_shared);
    // The shared scaler is the largest worker's: c * sigma of the worker with sigma_max.
    TensorStats last;
    tensor_stats_cpu(g[N - 1].data(), n, &last);
    EXPECT_EQ(s, static_cast<float>(2.5 * last.sigma()));
    for (PackFormat f : kFormats) {
      std::vector<std::vector<uint8_t>> p(N);
      for (int w = 0; w < N; ++w) p[w] = pack(g[w], s, kSeed, tern_stream(3, w, 0), f);
      const float scale = s / N;
      auto aggregate = [&](const std::vector<int>& order) {
        std::vector<int32_t> acc(n, 0);
        for (int w : order) unpack_accumulate_cpu(p[w].data(), n, f, acc.data());
        std::vector<float> out(n);
        scale_accumulated_cpu(acc.data(), n, scale, out.data());
        return std::make_pair(acc, out);
      };
      std::vector<int> order(N);
      std::iota(order.begin(), order.end(), 0);
      const auto [acc, out] = aggregate(order);
      std::vector<float> grid;  // (s / N) * {-N .. N}: 2N + 1 levels
      for (int k = -N; k <= N; ++k) grid.push_back(static_cast<float>(k) * scale);
      std::vector<int> seen(2 * N + 1, 0);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LE(std::abs(acc[i]), N);
        ASSERT_EQ(out[i], grid[acc[i] + N]) << "element " << i << " off the grid";
        ++seen[acc[i] + N];
      }
      EXPECT_GT(seen[0] + seen[2 * N], 0) << "extreme levels reached";
      std::reverse(order.begin(), order.end());
      const auto rev = aggregate(order);
      std::mt19937 rng(N);
      std::shuffle(order.begin(), order.end(), rng);
      const auto shuf = aggregate(order);
      EXPECT_EQ(std::memcmp(rev.second.data(), out.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(shuf.second.data(), out.data(), n * sizeof(float)), 0);
      EXPECT_EQ(rev.first, acc);
    }
  }
}

}  // namespace
}  // namespace tg::tern
