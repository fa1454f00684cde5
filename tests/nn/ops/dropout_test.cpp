// dropout: the mask is exactly the Philox rule, the keep fraction and the mean are preserved
// within stated statistical tolerances, backward reuses the mask, streams decorrelate, errors.
#include "nn/ops/dropout.h"

#include <cmath>
#include <limits>

#include "nn/autograd/tape.h"
#include "nn/core/philox.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;

constexpr uint64_t kSeed = 20170517;  // fixed: the statistical tests below are deterministic
// Keep-fraction and mean tolerances are kSigmas standard deviations of a binomial(n, 1-ratio)
// proportion; two-sided false-alarm rate per check ~2e-9 (only relevant if the seed changes).
constexpr double kSigmas = 6.0;

// Naive reference: element i of the row-major order kept iff its Philox uniform >= ratio.
std::vector<double> reference(const Tensor& x, float ratio, uint64_t seed, uint64_t stream) {
  const auto xv = testing::to_doubles(x);
  const float scale = 1.0f / (1.0f - ratio);
  std::vector<double> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool keep = uniform01(philox_word(seed, stream, i)) >= ratio;
    y[i] = keep ? static_cast<double>(static_cast<float>(xv[i]) * scale) : 0.0;
  }
  return y;
}

TEST(Dropout, MaskFollowsPhiloxRuleExactly) {
  const uint64_t stream = rng_stream(RngPurpose::dropout, 3, 0, 7);
  uint64_t seed = 1;
  for (float ratio : {0.1f, 0.5f, 0.75f}) {
    for (const Shape& s : {Shape{1}, Shape{3}, Shape{5}, Shape{2, 3, 7, 5}, Shape{64, 1001}}) {
      SCOPED_TRACE(shape_str(s) + " ratio " + std::to_string(ratio));
      const Tensor x = testing::random_uniform(s, -2, 2, seed++);
      expect_close(dropout(x, ratio, true, kSeed, stream), reference(x, ratio, kSeed, stream), 0, 0,
                   "forward (exact)");
    }
  }
}

TEST(Dropout, KeepFractionAndMeanArePreserved) {
  constexpr int64_t kN = 1 << 20;
  const Tensor ones = Tensor::full({kN}, 1.0);
  const Tensor x = testing::random_uniform({kN}, 0.5f, 1.5f, 3);
  const std::vector<float> xv = x.to_vector<float>();
  double sum_x = 0, sum_x2 = 0;
  for (float v : xv) {
    sum_x += v;
    sum_x2 += static_cast<double>(v) * v;
  }
  for (float ratio : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    const uint64_t stream = rng_stream(RngPurpose::dropout, 1);
    const float scale = 1.0f / (1.0f - ratio);
    const double p = 1.0 - ratio;

    // Keep fraction: binomial proportion with standard deviation sqrt(p (1-p) / n).
    const std::vector<float> m = dropout(ones, ratio, true, kSeed, stream).to_vector<float>();
    int64_t kept = 0;
    for (float v : m) {
      ASSERT_TRUE(v == 0.0f || v == scale) << "value " << v << " is neither 0 nor 1/(1-ratio)";
      kept += v != 0.0f;
    }
    EXPECT_NEAR(static_cast<double>(kept) / kN, p, kSigmas * std::sqrt(p * (1 - p) / kN))
        << "keep fraction";

    // Expected value: E[y_i] = x_i, Var[y_i] = x_i^2 scale^2 p (1-p); compare the sums.
    const std::vector<float> y = dropout(x, ratio, true, kSeed, stream + 1).to_vector<float>();
    double sum_y = 0;
    for (float v : y) sum_y += v;
    const double sd_sum = scale * std::sqrt(p * (1 - p) * sum_x2);
    EXPECT_NEAR(sum_y, sum_x, kSigmas * sd_sum) << "expected value";
  }
}

TEST(Dropout, BackwardReusesTheMask) {
  const uint64_t stream = rng_stream(RngPurpose::dropout, 2);
  Tensor x = testing::random_uniform({3, 4, 5, 7}, -1, 1, 5);
  x.set_requires_grad(true);
  const Tensor dy = testing::random_uniform(x.shape(), -1, 1, 6);
  Tensor y = dropout(x, 0.4f, true, kSeed, stream);
  backward(y, dy);
  // dx = mask * dy / (1 - ratio): exactly dropout applied to dy with the same key.
  expect_close(x.grad(), reference(dy, 0.4f, kSeed, stream), 0, 0, "dx (exact)");
}

TEST(Dropout, Gradients) {
  Tensor x = testing::random_uniform({2, 3, 4, 5}, -1, 1, 7);
  x.set_requires_grad(true);
  testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        return dropout(in[0], 0.5f, true, kSeed, rng_stream(RngPurpose::dropout, 9));
      },
      {x});
}

TEST(Dropout, StreamsAndSeedsGiveDifferentMasks) {
  constexpr int64_t kN = 4096;
  const Tensor ones = Tensor::full({kN}, 1.0);
  auto mask = [&](uint64_t seed, uint64_t stream) {
    return dropout(ones, 0.5f, true, seed, stream).to_vector<float>();
  };
  auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += (a[i] != b[i]);
    return static_cast<double>(d) / a.size();
  };
  const uint64_t s0 = rng_stream(RngPurpose::dropout, 0, 0, 0);
  const uint64_t s1 = rng_stream(RngPurpose::dropout, 0, 0, 1);  // next step
  const uint64_t s2 = rng_stream(RngPurpose::dropout, 1, 0, 0);  // next layer
  EXPECT_EQ(differing(mask(kSeed, s0), mask(kSeed, s0)), 0.0) << "same key must repeat";
  // Independent masks at ratio 0.5 differ in half the positions (sd 0.008 at n = 4096); below
  // 0.4 would be a 12-sigma event.
  EXPECT_GT(differing(mask(kSeed, s0), mask(kSeed, s1)), 0.4);
  EXPECT_GT(differing(mask(kSeed, s0), mask(kSeed, s2)), 0.4);
  EXPECT_GT(differing(mask(kSeed, s0), mask(kSeed + 1, s0)), 0.4);
}

TEST(Dropout, IdentityWhenNotTrainingOrRatioZero) {
  clear_tape();
  Tensor x = testing::random_uniform({4, 5}, -1, 1, 8);
  x.set_requires_grad(true);
  Tensor eval = dropout(x, 0.5f, false, kSeed, 1);
  Tensor zero = dropout(x, 0.0f, true, kSeed, 1);
  EXPECT_TRUE(eval.shares_storage_with(x) && eval.raw_data() == x.raw_data());
  EXPECT_TRUE(zero.shares_storage_with(x) && zero.raw_data() == x.raw_data());
  EXPECT_EQ(tape_size(), 0u) << "the identity records nothing";
}

TEST(Dropout, NonContiguousInputUsesRowMajorIndex) {
  const Tensor big = testing::random_uniform({6, 10}, -1, 1, 9);
  const Tensor x = big.slice(1, 3, 8);
  expect_close(dropout(x, 0.3f, true, kSeed, 4), reference(x.contiguous(), 0.3f, kSeed, 4), 0, 0,
               "strided");
}

TEST(Dropout, Errors) {
  const Tensor x = Tensor::zeros({3});
  for (float bad : {-0.1f, 1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(dropout(x, bad, true, kSeed, 0), Error);
    EXPECT_THROW(dropout(x, bad, false, kSeed, 0), Error) << "checked even in evaluation";
  }
  try {
    dropout(x, 1.5f, true, kSeed, 0);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("drop_ratio"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1.5"), std::string::npos) << msg;
  }
  EXPECT_THROW(dropout(Tensor::zeros({3}, DType::i32), 0.5f, true, kSeed, 0), Error);
  EXPECT_THROW(dropout(Tensor(), 0.5f, true, kSeed, 0), Error);
}

}  // namespace
}  // namespace tg
