// Parameter EMA (nn/optim/ema.h): TF's warm-up rule for the decay, the shadow against a naive
// double loop over many updates with changing parameters, and the error paths.
#include "nn/optim/ema.h"

#include <cmath>
#include <limits>
#include <vector>

#include "tests/testing/errors.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using namespace tg::testing;

TEST(Ema, EffectiveDecayWarmUp) {
  const double d = 0.9999;
  EXPECT_DOUBLE_EQ(Ema::effective_decay(d, 0), 0.1);  // 1 / 10
  EXPECT_DOUBLE_EQ(Ema::effective_decay(d, 1), 2.0 / 11.0);
  EXPECT_DOUBLE_EQ(Ema::effective_decay(d, 10), 0.55);  // 11 / 20
  EXPECT_DOUBLE_EQ(Ema::effective_decay(d, 1000000), 0.9999);
  // (1 + t) / (10 + t) reaches 0.9999 at t = 89990.
  EXPECT_LT(Ema::effective_decay(d, 89989), 0.9999);
  EXPECT_DOUBLE_EQ(Ema::effective_decay(d, 89991), 0.9999);
  EXPECT_DOUBLE_EQ(Ema::effective_decay(0.5, 0), 0.1) << "warm-up below the decay";
  EXPECT_DOUBLE_EQ(Ema::effective_decay(0.5, 100), 0.5);
  EXPECT_DOUBLE_EQ(Ema::effective_decay(0.0, 7), 0.0);
}

TEST(Ema, StartsAsACopy) {
  const Tensor p = random_normal({37}, 1.0f, 11);
  Ema ema(p, 0.9999);
  expect_bitwise_equal(ema.shadow(), p, "initial shadow");
  EXPECT_FALSE(ema.shadow().shares_storage_with(p)) << "the shadow owns its buffer";
  EXPECT_EQ(ema.decay(), 0.9999);
}

// shadow <- d shadow + (1 - d) params with d warming up, params moving each step as in
// training, reaching the full decay 0.95 at t = 170 of 600. The reference uses TF's f32 scalar
// 1 - d (= 1.0f - float(d)); each kernel step rounds once (fma), relative error ~1e-7 of the
// O(1) values, and the EMA contracts old errors, so they do not grow.
TEST(Ema, ShadowMatchesReference) {
  constexpr double kAtol = 1e-6, kRtol = 1e-6;
  for (const int64_t n : {int64_t{1000}, int64_t{70001}}) {
    SCOPED_TRACE(n);
    const std::vector<float> p0 = random_normal({n}, 1.0f, 12).to_vector<float>();
    const std::vector<float> dir = random_normal({n}, 0.05f, 13).to_vector<float>();
    Ema ema(Tensor::from_vector<float>(p0, {n}), 0.95);
    std::vector<double> ref(p0.begin(), p0.end());
    std::vector<float> pv(n);
    for (int64_t t = 0; t < 600; ++t) {
      // A wandering trajectory: a drift plus an oscillation.
      const float a = 0.01f * t, b = std::sin(0.1f * t);
      for (int64_t i = 0; i < n; ++i) pv[i] = p0[i] + a * dir[i] + b * dir[(i + 1) % n];
      const Tensor p = Tensor::from_vector<float>(pv, {n});
      ema.update(p, t);
      const double d = Ema::effective_decay(0.95, t);
      const double omd = 1.0f - static_cast<float>(d);
      for (int64_t i = 0; i < n; ++i) ref[i] = (1.0 - omd) * ref[i] + omd * pv[i];
    }
    expect_close(ema.shadow(), ref, kAtol, kRtol, "shadow");
  }
}

TEST(Ema, ConstantParamsKeepTheShadowExactly) {
  const Tensor p = random_normal({257}, 1.0f, 14);
  Ema ema(p, 0.9999);
  for (int64_t t = 0; t < 50; ++t) ema.update(p, t);
  expect_bitwise_equal(ema.shadow(), p, "shadow of constant params");
}

TEST(Ema, FirstUpdateUsesDecayPointOne) {
  Ema ema(Tensor::from_vector<float>({0.0f, 10.0f}, {2}), 0.9999);
  ema.update(Tensor::from_vector<float>({1.0f, 0.0f}, {2}), 0);
  // d = 0.1: 0.9 of the new value.
  expect_close(ema.shadow(), {0.9, 1.0}, 1e-6, 1e-6, "after t = 0");
}

TEST(Ema, Errors) {
  const Tensor p = Tensor::zeros({4});
  for (const double d : {1.0, -0.1, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    expect_error_with([&] { Ema(p, d); }, {"ema: decay must be in [0, 1), got"});
  }
  expect_error_with([&] { Ema(Tensor::zeros({4}, DType::i32), 0.9); }, {"ema params must be f32"});
  expect_error_with([&] { Ema(Tensor(), 0.9); }, {"ema params is undefined"});
  Ema ema(p, 0.9);
  expect_error_with([&] { ema.update(Tensor::zeros({5}), 0); },
                    {"ema params has shape [5] but ema shadow has shape [4]"});
  expect_error_with([&] { ema.update(Tensor::zeros({4}, DType::i64), 0); },
                    {"ema params must be f32"});
  expect_error_with([&] { ema.update(p, -1); }, {"ema: iteration t must be >= 0, got -1"});
  expect_error_with([&] { Ema::effective_decay(0.9, -3); },
                    {"ema: iteration t must be >= 0, got -3"});
}

}  // namespace
}  // namespace tg
