// The convergence checks (terngrad/analysis/convergence.h): the linear algebra against closed
// forms, SGD and TernGrad converging on ridge regression, and both checks failing on deliberately
// biased ternarizers.
//
// Statistical tests use fixed seeds. Each states its tolerance; the false-alarm rates quoted are
// the probability that a correct implementation fails on a fresh seed.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/analysis/convergence.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

constexpr uint64_t kSeed = 20170517;

std::vector<float> gaussian(int64_t n, float sigma, uint64_t stream) {
  const Tensor t = testing::random_normal({n}, sigma, kSeed, stream);
  const float* p = t.data<float>();
  return std::vector<float>(p, p + n);
}

// ---- linear algebra ------------------------------------------------------------------------

TEST(SolveSpd, MatchesAKnownSolution) {
  // A = [[4, 2, 0], [2, 5, 1], [0, 1, 3]], x = [1, -2, 3] -> b = A x.
  const std::vector<double> a = {4, 2, 0, 2, 5, 1, 0, 1, 3};
  const std::vector<double> x = {1, -2, 3};
  std::vector<double> b(3, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) b[i] += a[i * 3 + j] * x[j];
  const std::vector<double> got = solve_spd(a, b, 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], x[i], 1e-12) << i;
}

TEST(SolveSpd, RejectsAnIndefiniteMatrix) {
  EXPECT_THROW(solve_spd({1, 2, 2, 1}, {1, 1}, 2), Error);  // eigenvalues 3, -1
  EXPECT_THROW(solve_spd({1, 0, 0}, {1, 1}, 2), Error);     // wrong size
}

TEST(SymmetricEigenvalues, MatchTheSpectrumOfARotatedDiagonal) {
  // A = R diag(1, 2, 5, 9) R^T with R a product of two Givens rotations.
  const int d = 4;
  std::vector<double> r(d * d, 0.0);
  const double c1 = std::cos(0.3), s1 = std::sin(0.3), c2 = std::cos(1.1), s2 = std::sin(1.1);
  // R = G(0,1; 0.3) * G(2,3; 1.1): block diagonal.
  r[0] = c1, r[1] = -s1, r[4] = s1, r[5] = c1;
  r[10] = c2, r[11] = -s2, r[14] = s2, r[15] = c2;
  // ... then mix blocks with G(1,2; 0.7) applied on the right.
  std::vector<double> r2(r);
  const double c3 = std::cos(0.7), s3 = std::sin(0.7);
  for (int i = 0; i < d; ++i) {
    r2[i * d + 1] = c3 * r[i * d + 1] - s3 * r[i * d + 2];
    r2[i * d + 2] = s3 * r[i * d + 1] + c3 * r[i * d + 2];
  }
  const double ev[d] = {1, 2, 5, 9};
  std::vector<double> a(d * d, 0.0);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j)
      for (int k = 0; k < d; ++k) a[i * d + j] += r2[i * d + k] * ev[k] * r2[j * d + k];
  const std::vector<double> got = symmetric_eigenvalues(a, d);
  for (int i = 0; i < d; ++i) EXPECT_NEAR(got[i], ev[i], 1e-10) << i;
}

// ---- ridge regression ----------------------------------------------------------------------

TEST(Ridge, ClosedFormOfAOneDimensionalProblem) {
  // x = [1, 3], y = [2, 4], lambda = 0.5: (10/2 + 0.5) w = 14/2 -> w* = 7 / 5.5.
  const RidgeProblem p = ridge_problem({1, 3}, {2, 4}, 2, 1, 0.5);
  ASSERT_EQ(p.w_star.size(), 1u);
  EXPECT_NEAR(p.w_star[0], 7.0 / 5.5, 1e-14);
  EXPECT_NEAR(p.mu, 5.5, 1e-14);
  EXPECT_NEAR(p.L, 5.5, 1e-14);
}

TEST(Ridge, TheClosedFormIsTheMinimum) {
  RidgeOptions ro;
  ro.samples = 300;
  ro.dim = 12;
  const RidgeProblem p = make_ridge_problem(ro);
  const std::vector<double> g = ridge_gradient(p, p.w_star.data());
  double gn = 0;
  for (double v : g) gn += v * v;
  EXPECT_LT(std::sqrt(gn), 1e-12);
  // Every direction goes uphill, by at least mu/2 |delta|^2 (strong convexity).
  const double c0 = ridge_loss(p, p.w_star.data());
  for (int j = 0; j < p.d; ++j) {
    std::vector<double> w = p.w_star;
    w[j] += 0.1;
    EXPECT_GE(ridge_loss(p, w.data()) - c0, 0.5 * p.mu * 0.01 * (1 - 1e-9)) << j;
  }
  // The synthetic design is well conditioned: feature scales 0.5 .. 1.5, lambda 0.1.
  EXPECT_GT(p.mu, 0.1);
  EXPECT_LT(p.L / p.mu, 30.0);
}

TEST(Ridge, LogLogSlopeOfAPowerLaw) {
  const std::vector<int64_t> t = {0, 1, 10, 100, 1000};
  const std::vector<double> e = {5, 3.0, 0.3, 0.03, 0.003};  // 3 / t
  EXPECT_NEAR(loglog_slope(t, e, 1), -1.0, 1e-12);
  EXPECT_NEAR(loglog_slope(t, e, 100), -1.0, 1e-12);
  EXPECT_TRUE(std::isnan(loglog_slope(t, e, 1000)));
}

SgdOptions quick_sgd() {
  SgdOptions o;
  o.iterations = 20000;
  o.repeats = 4;
  o.seed = kSeed;
  return o;
}

TEST(Ridge, SgdAndTernGradConvergeAtRateOneOverT) {
  const RidgeProblem p = make_ridge_problem(RidgeOptions{});
  const SgdOptions o = quick_sgd();
  const Ternarizer real = make_ternarizer("real");
  const ConvergenceCurve sgd = run_ridge_sgd(p, o, nullptr);
  const ConvergenceCurve tg = run_ridge_sgd(p, o, &real);
  for (const ConvergenceCurve* c : {&sgd, &tg}) {
    SCOPED_TRACE(c->method);
    EXPECT_TRUE(c->pass);
    EXPECT_TRUE(c->finite);
    EXPECT_GT(c->two_mu_c, 1.0);
    // gamma_t ~ c / t with 2 mu c > 1: E||w_t - w*||^2 ~ 1/t. Tolerance 0.25 on the fitted slope
    // of 4 repeats over two decades (measured: within 0.1 of -1).
    EXPECT_NEAR(c->rate, -1.0, 0.25);
    EXPECT_LT(c->rel_error, 1e-3);
    EXPECT_EQ(c->t.front(), 0);
    EXPECT_EQ(c->t.back(), o.iterations);
  }
  // TernGrad pays its extra variance s||g||_1 - ||g||^2: a larger error at the same t.
  EXPECT_GT(tg.final, sgd.final);
}

TEST(Ridge, ABiasedTernarizerFailsTheConvergenceCheck) {
  const RidgeProblem p = make_ridge_problem(RidgeOptions{});
  const SgdOptions o = quick_sgd();
  // no-abs: E[t] = max(g, 0). Coordinates can only move down, so w stalls away from w*.
  const Ternarizer biased = make_ternarizer("no-abs");
  const ConvergenceCurve c = run_ridge_sgd(p, o, &biased);
  EXPECT_FALSE(c.pass);
  EXPECT_GT(c.rel_error, 1e-2);
}

TEST(Ridge, ClipBiasesTernGradWithoutBreakingTheRun) {
  // clip = 2.5 sigma: a documented ablation, it must run (and stay finite); no verdict asserted.
  const RidgeProblem p = make_ridge_problem(RidgeOptions{});
  SgdOptions o = quick_sgd();
  o.iterations = 2000;
  o.repeats = 1;
  o.clip = 2.5;
  const Ternarizer real = make_ternarizer("real");
  EXPECT_TRUE(run_ridge_sgd(p, o, &real).finite);
}

TEST(Ridge, TheEmulationIsTheCompressorsAggregate) {
  // One TernGrad step of run_ridge_sgd's emulation (shared scaler, real ternarizer, average of
  // s * codes) equals the real compressor's aggregate_emulated with clip = 0, same seed and step.
  const int64_t d = 37;
  const int N = 3;
  const int64_t step = 11;
  const uint64_t seed = 99;
  std::vector<Tensor> grads;
  float s = 0;
  for (int w = 0; w < N; ++w) {
    std::vector<float> g = gaussian(d, 0.1f * (w + 1), 40 + w);
    for (float v : g) s = std::max(s, std::fabs(v));
    grads.push_back(Tensor::from_vector(g, {d}));
  }
  CompressionOptions co;
  co.method = ::tg::tern::Method::terngrad;
  co.clip = 0;
  co.seed = seed;
  auto comp = make_compressor(co, {{"w", 0, d}});
  Tensor out = Tensor::zeros({d});
  aggregate_local(*comp, grads, step, out);
  const Ternarizer real = make_ternarizer("real");
  std::vector<double> mine(d, 0.0);
  std::vector<float> t(d);
  for (int w = 0; w < N; ++w) {
    real(grads[w].data<float>(), d, s, seed, rng_stream(RngPurpose::ternarize, step, w, 0),
         t.data());
    for (int64_t j = 0; j < d; ++j) mine[j] += static_cast<double>(t[j]) / N;
  }
  for (int64_t j = 0; j < d; ++j)
    EXPECT_NEAR(mine[j], out.data<float>()[j], 1e-6 * s) << j;  // f32 rounding of (s / N) * sum
}

// ---- moments of the ternarizer -------------------------------------------------------------

TEST(NormalQuantile, KnownValues) {
  EXPECT_NEAR(normal_upper_quantile(0.025), 1.959963985, 1e-8);
  EXPECT_NEAR(normal_upper_quantile(1e-3), 3.090232306, 1e-8);
  EXPECT_NEAR(normal_upper_quantile(0.5), 0.0, 1e-12);
  EXPECT_THROW(normal_upper_quantile(0.0), Error);
}

// A flat gradient of a few tensors, some awkward: Gaussian (large and small), heavy-tailed, one
// all zero, one with every |g| equal (t = g exactly: a degenerate null distribution).
struct TestGrad {
  std::vector<float> g;
  std::vector<GradSlot> layout;
};

TestGrad test_grad(uint64_t stream) {
  TestGrad tg;
  auto add = [&](const std::string& name, std::vector<float> v) {
    tg.layout.push_back({name, static_cast<int64_t>(tg.g.size()), static_cast<int64_t>(v.size())});
    tg.g.insert(tg.g.end(), v.begin(), v.end());
  };
  add("conv/w", gaussian(3000, 0.01f, stream));
  add("conv/b", gaussian(6, 0.1f, stream + 1));
  std::vector<float> heavy = gaussian(2000, 1.0f, stream + 2);
  for (float& v : heavy) v = v * v * v;  // heavy tails: a few elements set max|g|
  add("fc/w", heavy);
  add("zero/b", std::vector<float>(10, 0.0f));
  add("flat/b", {0.5f, -0.5f, 0.5f, 0.5f});
  return tg;
}

TEST(Moments, TheRealTernarizerIsUnbiasedWithTheStatedVariance) {
  const TestGrad tg = test_grad(100);
  MomentOptions mo;
  mo.draws = 512;
  mo.seed = kSeed;
  const MomentCheck c = check_ternary_moments(
      tg.g.data(), tg.layout, max_abs_scalers(tg.g.data(), tg.layout), make_ternarizer("real"), mo);
  // alpha = 1e-3 over the 15 tests: the false-alarm rate of this test is about 1e-3.
  EXPECT_TRUE(c.pass_mean);
  EXPECT_TRUE(c.pass_var);
  ASSERT_EQ(c.tensors.size(), 5u);
  EXPECT_FALSE(c.tensors[3].tested);  // all zero
  EXPECT_TRUE(c.tensors[4].tested);
  EXPECT_EQ(c.tensors[4].excess_expected, 0.0);  // |g| = s everywhere: t = g
  EXPECT_EQ(c.tensors[4].mse_measured, 0.0);
  for (const TensorMoments& t : c.tensors) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE(t.pass_mean && t.pass_var);
    if (!t.tested || t.excess_expected == 0) continue;
    // The measured variance identity within 5 standard errors (false alarm ~6e-7 per tensor).
    EXPECT_LT(std::fabs(t.z_var), 5.0);
    EXPECT_NEAR(t.mse_measured / t.excess_expected, 1.0, 0.1);
    EXPECT_LT(t.rel_error, 3 * t.rel_error_expected);
  }
}

TEST(Moments, TheZScoresAreCalibrated) {
  // Over 40 independent checks of a 500-element tensor the z-scores of a correct ternarizer are
  // standard normal (z_sq approximately): their sample mean within 0.6 of 0 (4.7 standard errors of
  // a mean of 40) and their sample standard deviation within [0.6, 1.5] (false alarm < 1e-4 each).
  const Ternarizer real = make_ternarizer("real");
  std::vector<double> zp, zs, zv;
  for (int k = 0; k < 40; ++k) {
    std::vector<float> g = gaussian(500, 1.0f, 1000 + k);
    const std::vector<GradSlot> layout = {{"t", 0, 500}};
    MomentOptions mo;
    mo.draws = 64;
    mo.seed = kSeed + k;
    const MomentCheck c =
        check_ternary_moments(g.data(), layout, max_abs_scalers(g.data(), layout), real, mo);
    zp.push_back(c.tensors[0].z_proj);
    zs.push_back(c.tensors[0].z_sq);
    zv.push_back(c.tensors[0].z_var);
  }
  for (const auto* z : {&zp, &zs, &zv}) {
    const double mean = std::accumulate(z->begin(), z->end(), 0.0) / z->size();
    double var = 0;
    for (double v : *z) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / (z->size() - 1));
    EXPECT_NEAR(mean, 0.0, 0.6);
    EXPECT_GT(sd, 0.6);
    EXPECT_LT(sd, 1.5);
  }
}

TEST(Moments, BiasedTernarizersAreCaught) {
  const TestGrad tg = test_grad(200);
  const std::vector<float> s = max_abs_scalers(tg.g.data(), tg.layout);
  MomentOptions mo;
  mo.draws = 256;
  mo.seed = kSeed;
  {
    // E[t] = g / 2 and E||t||^2 = s||g||_1 / 2: both checks fail.
    const MomentCheck c =
        check_ternary_moments(tg.g.data(), tg.layout, s, make_ternarizer("half-keep"), mo);
    EXPECT_FALSE(c.pass_mean);
    EXPECT_FALSE(c.pass_var);
    EXPECT_LT(c.tensors[0].z_proj, -c.z_crit_two);  // the mean is shrunk along g
  }
  {
    // E[t] = max(g, 0): the mean check fails.
    const MomentCheck c =
        check_ternary_moments(tg.g.data(), tg.layout, s, make_ternarizer("no-abs"), mo);
    EXPECT_FALSE(c.pass_mean);
    EXPECT_GT(c.tensors[0].z_sq, c.z_crit_one);
  }
}

TEST(Moments, RejectsAScalerBelowMaxAbsAndBadOptions) {
  const TestGrad tg = test_grad(300);
  std::vector<float> s = max_abs_scalers(tg.g.data(), tg.layout);
  const Ternarizer real = make_ternarizer("real");
  MomentOptions mo;
  mo.draws = 8;
  std::vector<float> low = s;
  low[0] *= 0.5f;  // clipping: the identities no longer hold
  EXPECT_THROW(check_ternary_moments(tg.g.data(), tg.layout, low, real, mo), Error);
  EXPECT_THROW(check_ternary_moments(tg.g.data(), tg.layout, {s.data(), 2}, real, mo), Error);
  mo.draws = 1;
  EXPECT_THROW(check_ternary_moments(tg.g.data(), tg.layout, s, real, mo), Error);
  EXPECT_THROW(make_ternarizer("nope"), Error);
}

}  // namespace
}  // namespace tg::tern
