#include "nn/core/philox.h"

#include <cmath>
#include <set>

#include "nn/init/init.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Known-answer vectors of Philox4x32-10 published with Random123 (kat_vectors).
TEST(Philox, KnownAnswers) {
  struct Kat {
    Philox4 ctr;
    uint32_t k0, k1;
    Philox4 out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4 r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(r.v[j], k.out.v[j]) << "word " << j;
  }
}

TEST(Philox, ElementAddressingMatchesBlocks) {
  const uint64_t seed = 42, stream = rng_stream(RngPurpose::dropout, 3, 1, 7);
  for (uint64_t i = 0; i < 40; ++i)
    EXPECT_EQ(philox_word(seed, stream, i), philox_block(seed, stream, i / 4).v[i % 4]);
  EXPECT_NE(rng_stream(RngPurpose::dropout, 1, 2, 3), rng_stream(RngPurpose::dropout, 1, 3, 2));
  EXPECT_NE(rng_stream(RngPurpose::dropout, 1), rng_stream(RngPurpose::ternarize, 1));
}

TEST(Philox, Uniform01RangeAndMean) {
  // 2^16 draws: mean within 5 sigma of 1/2 (sigma = 1/sqrt(12 n) ~ 0.0011), false-alarm ~ 6e-7.
  const int n = 1 << 16;
  double sum = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    const float u = uniform01(philox_word(7, 1, i));
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_NEAR(sum / n, 0.5, 5 * 0.0011);
  EXPECT_EQ(uniform01(0u), 0.0f);
  EXPECT_LT(uniform01(0xffffffffu), 1.0f);
}

TEST(Init, TruncatedNormalMoments) {
  // TF truncated normal at 2 sigma has std 0.8796 sigma; mean 0. n = 2^16: standard error of the
  // mean 0.0034, of the std ~0.0025; tolerances are 5 standard errors (false-alarm ~ 1e-6).
  Tensor t = Tensor::empty({1 << 16});
  init::truncated_normal_(t, 0.0f, 1.0f, 123, rng_stream(RngPurpose::init, 0));
  double s = 0, s2 = 0, mx = 0;
  for (float v : t.to_vector<float>()) {
    s += v;
    s2 += v * v;
    mx = std::max(mx, std::fabs(double(v)));
  }
  const double n = t.numel(), mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
  EXPECT_LE(mx, 2.0);
  EXPECT_NEAR(mean, 0.0, 5 * 0.0034);
  EXPECT_NEAR(sd, 0.8796, 5 * 0.0025);
  // Deterministic: same seed and stream, same values; other stream, other values.
  Tensor u = Tensor::empty({1 << 16});
  init::truncated_normal_(u, 0.0f, 1.0f, 123, rng_stream(RngPurpose::init, 0));
  EXPECT_EQ(t.to_vector<float>(), u.to_vector<float>());
  init::truncated_normal_(u, 0.0f, 1.0f, 123, rng_stream(RngPurpose::init, 1));
  EXPECT_NE(t.to_vector<float>(), u.to_vector<float>());
}

TEST(Init, UniformRange) {
  Tensor t = Tensor::empty({1000});
  init::uniform_(t, -0.5f, 0.25f, 9, 0);
  for (float v : t.to_vector<float>()) {
    EXPECT_GE(v, -0.5f);
    EXPECT_LT(v, 0.25f);
  }
  EXPECT_THROW(init::uniform_(t, 1.0f, 1.0f, 9, 0), Error);
  Tensor i = Tensor::empty({4}, DType::i32);
  EXPECT_THROW(init::uniform_(i, 0.f, 1.f, 9, 0), Error);
}

}  // namespace
}  // namespace tg
