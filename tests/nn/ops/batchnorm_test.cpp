// batch_norm: naive double reference (training and inference, forward and backward), the
// offset-only variant of the paper's AlexNet/GoogLeNet, moving-average updates, gradient checks
// in both modes, errors.
#include "nn/ops/batchnorm.h"

#include <cmath>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// f32 normalize/scale vs double: a few ulps of values of magnitude <= ~5.
constexpr double kAtol = 1e-5, kRtol = 1e-5;
// dx cancels three O(|dy|) terms and is scaled by 1/sqrt(var + eps) (up to ~30 when var ~ 0).
constexpr double kGradAtol = 5e-5, kGradRtol = 1e-4;
// Moving statistics: two f32 multiply-adds per step on top of the (accurate) batch statistics.
constexpr double kMovingAtol = 1e-6, kMovingRtol = 1e-5;

struct Reference {
  std::vector<double> y, dx, dgamma, dbeta, mean, var;  // mean/var: the statistics y used
};

// Naive loops in double. gamma/beta may be undefined (1 / 0). mm, mv: moving statistics, used
// when !training.
Reference reference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                    const Tensor& mm, const Tensor& mv, bool training, double eps) {
  const int64_t N = x.size(0), C = x.size(1), HW = x.numel() / (N * C);
  const double M = static_cast<double>(N * HW);
  const auto xv = testing::to_doubles(x), gv = testing::to_doubles(dy);
  const std::vector<double> gm =
      gamma.defined() ? testing::to_doubles(gamma) : std::vector<double>(C, 1.0);
  const std::vector<double> bt =
      beta.defined() ? testing::to_doubles(beta) : std::vector<double>(C, 0.0);
  auto at = [&](int64_t n, int64_t c, int64_t p) { return (n * C + c) * HW + p; };
  Reference r;
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  if (training) {
    r.mean.assign(C, 0.0);
    r.var.assign(C, 0.0);
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < HW; ++p) r.mean[c] += xv[at(n, c, p)] / M;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < HW; ++p)
          r.var[c] += (xv[at(n, c, p)] - r.mean[c]) * (xv[at(n, c, p)] - r.mean[c]) / M;
    }
  } else {
    r.mean = testing::to_doubles(mm);
    r.var = testing::to_doubles(mv);
  }
  r.dgamma.assign(C, 0.0);
  r.dbeta.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    const double is = 1.0 / std::sqrt(r.var[c] + eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p) {
        const int64_t i = at(n, c, p);
        const double xhat = (xv[i] - r.mean[c]) * is;
        r.y[i] = gm[c] * xhat + bt[c];
        r.dgamma[c] += gv[i] * xhat;
        r.dbeta[c] += gv[i];
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p) {
        const int64_t i = at(n, c, p);
        const double xhat = (xv[i] - r.mean[c]) * is;
        r.dx[i] = training ? gm[c] * is * (gv[i] - r.dbeta[c] / M - xhat * r.dgamma[c] / M)
                           : gm[c] * is * gv[i];
      }
  }
  return r;
}

enum class Affine { scale_and_offset, offset_only, scale_only, none };
const Affine kAffines[] = {Affine::scale_and_offset, Affine::offset_only, Affine::scale_only,
                           Affine::none};
const char* affine_name(Affine a) {
  switch (a) {
    case Affine::scale_and_offset:
      return "gamma+beta";
    case Affine::offset_only:
      return "beta only";
    case Affine::scale_only:
      return "gamma only";
    case Affine::none:
      return "neither";
  }
  return "?";
}

struct Params {
  Tensor gamma, beta;
};
Params make_params(Affine a, int64_t C, uint64_t seed) {
  Params p;
  if (a == Affine::scale_and_offset || a == Affine::scale_only)
    p.gamma = random_uniform({C}, 0.5f, 1.5f, seed, 1);
  if (a == Affine::scale_and_offset || a == Affine::offset_only)
    p.beta = random_uniform({C}, -0.5f, 0.5f, seed, 2);
  return p;
}

const Shape kShapes[] = {
    {4, 3, 5, 7},    // odd H/W
    {8, 5},          // [N, C] (fully connected)
    {2, 16, 3, 3},   // many channels
    {3, 2, 1, 1},    // one pixel
    {1, 4, 1, 1},    // one element per channel: var 0, y = beta, dx = 0
    {2, 2, 13, 11},  // M = 286 > 256
};

TEST(BatchNorm, MatchesReferenceTrainingAndInference) {
  for (const Shape& shape : kShapes) {
    for (Affine a : kAffines) {
      for (bool training : {true, false}) {
        SCOPED_TRACE(shape_str(shape) + " " + affine_name(a) +
                     (training ? " training" : " inference"));
        const int64_t C = shape[1];
        Tensor x = random_uniform(shape, -2, 3, 1);
        Tensor dy = random_uniform(shape, -1, 1, 2);
        Params p = make_params(a, C, 3);
        Tensor mm = random_uniform({C}, -0.5f, 0.5f, 4), mv = random_uniform({C}, 0.2f, 2.0f, 5);
        const Tensor mm0 = mm.clone(), mv0 = mv.clone();
        const BatchNormOptions o{0.9f, 1e-3f};
        const Reference ref = reference(x, p.gamma, p.beta, dy, mm0, mv0, training, o.eps);
        x.set_requires_grad(true);
        if (p.gamma.defined()) p.gamma.set_requires_grad(true);
        if (p.beta.defined()) p.beta.set_requires_grad(true);
        Tensor y = batch_norm(x, p.gamma, p.beta, mm, mv, training, o);
        expect_close(y, ref.y, kAtol, kRtol, "y");
        backward(y, dy);
        expect_close(x.grad(), ref.dx, kGradAtol, kGradRtol, "dx");
        if (p.gamma.defined())
          expect_close(p.gamma.grad(), ref.dgamma, kGradAtol, kGradRtol, "dgamma");
        if (p.beta.defined()) expect_close(p.beta.grad(), ref.dbeta, kGradAtol, kGradRtol, "dbeta");
        // One step of the moving average (training), or no change at all (inference).
        const auto mm0v = testing::to_doubles(mm0), mv0v = testing::to_doubles(mv0);
        std::vector<double> emm(C), emv(C);
        for (int64_t c = 0; c < C; ++c) {
          emm[c] = training ? 0.9 * mm0v[c] + 0.1 * ref.mean[c] : mm0v[c];
          emv[c] = training ? 0.9 * mv0v[c] + 0.1 * ref.var[c] : mv0v[c];
        }
        expect_close(mm, emm, training ? kMovingAtol : 0, training ? kMovingRtol : 0,
                     "moving_mean");
        expect_close(mv, emv, training ? kMovingAtol : 0, training ? kMovingRtol : 0, "moving_var");
      }
    }
  }
}

// Inference is the exact affine map of the moving statistics, written out by hand.
TEST(BatchNorm, InferenceUsesMovingStatistics) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 1, 2});
  Tensor gamma = Tensor::from_vector(std::vector<float>{2, -1}, {2});
  Tensor beta = Tensor::from_vector(std::vector<float>{0.5f, 1}, {2});
  Tensor mm = Tensor::from_vector(std::vector<float>{1, -2}, {2});
  Tensor mv = Tensor::from_vector(std::vector<float>{4, 0.25f}, {2});
  const double eps = 1e-3;
  std::vector<double> expect;
  const double xs[2][2][2] = {{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}};
  for (int n = 0; n < 2; ++n) {
    for (int p = 0; p < 2; ++p) expect.push_back(2 * (xs[n][0][p] - 1) / std::sqrt(4 + eps) + 0.5);
    for (int p = 0; p < 2; ++p)
      expect.push_back(-1 * (xs[n][1][p] + 2) / std::sqrt(0.25 + eps) + 1);
  }
  Tensor y = batch_norm(x, gamma, beta, mm, mv, /*training=*/false);
  expect_close(y, expect, kAtol, kRtol, "inference y");
  EXPECT_EQ(mm.to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(mv.to_vector<float>(), (std::vector<float>{4, 0.25f}));
}

// Two training steps on different batches: m2 = d (d m0 + (1-d) b1) + (1-d) b2.
TEST(BatchNorm, MovingAverageAfterTwoSteps) {
  for (float decay : {0.9f, 0.9997f, 0.0f}) {
    SCOPED_TRACE("decay " + std::to_string(decay));
    const int64_t C = 3;
    Tensor mm = random_uniform({C}, -1, 1, 10), mv = random_uniform({C}, 0.5f, 2, 11);
    std::vector<double> em = testing::to_doubles(mm), ev = testing::to_doubles(mv);
    const BatchNormOptions o{decay, 1e-3f};
    for (int step = 0; step < 2; ++step) {
      Tensor x = random_uniform({4, C, 3, 5}, -1.0f + step, 2.0f + 3 * step, 20 + step);
      const Reference r =
          reference(x, Tensor(), Tensor(), Tensor::zeros(x.shape()), mm, mv, true, o.eps);
      for (int64_t c = 0; c < C; ++c) {
        em[c] = decay * em[c] + (1.0 - decay) * r.mean[c];
        ev[c] = decay * ev[c] + (1.0 - decay) * r.var[c];
      }
      batch_norm(x, Tensor(), Tensor(), mm, mv, true, o);
    }
    expect_close(mm, em, kMovingAtol, kMovingRtol, "moving_mean");
    expect_close(mv, ev, kMovingAtol, kMovingRtol, "moving_var");
  }
}

// Large common offset: a one-pass E[x^2] - E[x]^2 in f32 would lose the variance; the two-pass
// double statistics keep it (decay 0 makes the moving statistics the batch statistics).
TEST(BatchNorm, VarianceOfOffsetData) {
  std::vector<float> v = random_uniform({8, 2, 4, 4}, -0.01f, 0.01f, 30).to_vector<float>();
  for (float& e : v) e += 1000.0f;
  Tensor x = Tensor::from_vector(v, {8, 2, 4, 4});
  Tensor mm = Tensor::zeros({2}), mv = Tensor::zeros({2});
  batch_norm(x, Tensor(), Tensor(), mm, mv, true, BatchNormOptions{0.0f, 1e-3f});
  const Reference r =
      reference(x, Tensor(), Tensor(), Tensor::zeros(x.shape()), mm, mv, true, 1e-3);
  expect_close(mm, r.mean, 0, 1e-7, "mean");
  expect_close(mv, r.var, 0, 1e-5, "var");
}

TEST(BatchNorm, NonContiguousInput) {
  Tensor big = random_uniform({3, 6, 4, 5}, -1, 1, 40);
  Tensor x = big.slice(1, 1, 5);  // [3, 4, 4, 5], channel-sliced view
  Tensor mm = Tensor::zeros({4}), mv = Tensor::full({4}, 1.0);
  const Reference r =
      reference(x.contiguous(), Tensor(), Tensor(), Tensor::zeros(x.shape()), mm, mv, true, 1e-3);
  expect_close(batch_norm(x, Tensor(), Tensor(), mm, mv, true), r.y, kAtol, kRtol, "strided y");
}

TEST(BatchNorm, RecordsOnlyWhenNeeded) {
  clear_tape();
  Tensor x = random_uniform({2, 3, 2, 2}, -1, 1, 41);
  Tensor mm = Tensor::zeros({3}), mv = Tensor::full({3}, 1.0);
  batch_norm(x, Tensor(), Tensor(), mm, mv, true);
  EXPECT_EQ(tape_size(), 0u);
  Tensor beta = Tensor::zeros({3});
  beta.set_requires_grad(true);
  batch_norm(x, Tensor(), beta, mm, mv, true);
  EXPECT_EQ(tape_size(), 1u);
  backward(batch_norm(x, Tensor(), beta, mm, mv, true));  // only beta needs a gradient
  EXPECT_TRUE(beta.grad().defined());
  clear_tape();
}

TEST(BatchNorm, Gradcheck) {
  for (bool training : {true, false}) {
    for (Affine a : kAffines) {
      for (const Shape& shape : {Shape{3, 4, 3, 2}, Shape{6, 5}}) {
        SCOPED_TRACE(shape_str(shape) + " " + affine_name(a) +
                     (training ? " training" : " inference"));
        const int64_t C = shape[1];
        Tensor x = random_uniform(shape, -1, 2, 50);
        Params p = make_params(a, C, 51);
        x.set_requires_grad(true);
        if (p.gamma.defined()) p.gamma.set_requires_grad(true);
        if (p.beta.defined()) p.beta.set_requires_grad(true);
        Tensor mm = random_uniform({C}, -0.5f, 0.5f, 52), mv = random_uniform({C}, 0.3f, 1.5f, 53);
        // In inference the moving statistics stay fixed; in training they move on every call but
        // do not enter the output.
        testing::gradcheck(
            [&](const std::vector<Tensor>& in) {
              return batch_norm(in[0], in[1], in[2], mm, mv, training);
            },
            {x, p.gamma, p.beta});
      }
    }
  }
}

TEST(BatchNorm, Errors) {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  Tensor c3 = Tensor::zeros({3}), c4 = Tensor::zeros({4});
  Tensor mm = Tensor::zeros({3}), mv = Tensor::full({3}, 1.0);
  Tensor bad_m = Tensor::zeros({4});
  EXPECT_NO_THROW(batch_norm(x, c3, c3, mm, mv, true));
  EXPECT_THROW(batch_norm(x, c4, c3, mm, mv, true), Error);      // gamma channels
  EXPECT_THROW(batch_norm(x, c3, c4, mm, mv, true), Error);      // beta channels
  EXPECT_THROW(batch_norm(x, c3, c3, bad_m, mv, true), Error);   // moving_mean channels
  EXPECT_THROW(batch_norm(x, c3, c3, mm, bad_m, false), Error);  // moving_var channels
  Tensor c3x1 = Tensor::zeros({3, 1});
  EXPECT_THROW(batch_norm(x, c3x1, c3, mm, mv, true), Error);  // gamma not 1-D
  Tensor x3 = Tensor::zeros({2, 3, 4});
  EXPECT_THROW(batch_norm(x3, c3, c3, mm, mv, true), Error);  // 3-D input
  Tensor xi = Tensor::zeros({2, 3, 4, 4}, DType::i32);
  EXPECT_THROW(batch_norm(xi, c3, c3, mm, mv, true), Error);  // non-f32 input
  Tensor mi = Tensor::zeros({3}, DType::i32);
  EXPECT_THROW(batch_norm(x, c3, c3, mi, mv, true), Error);         // non-f32 moving stat
  EXPECT_THROW(batch_norm(Tensor(), c3, c3, mm, mv, true), Error);  // undefined input
  Tensor empty = Tensor::zeros({0, 3, 4, 4});
  EXPECT_THROW(batch_norm(empty, c3, c3, mm, mv, true), Error);  // no batch statistics
  EXPECT_THROW(batch_norm(x, c3, c3, mm, mv, true, BatchNormOptions{1.5f, 1e-3f}), Error);
  Tensor strided = Tensor::zeros({6}).slice(0, 0, 3).as_strided({3}, {2}, 0);
  EXPECT_THROW(batch_norm(x, c3, c3, strided, mv, true), Error);  // moving stat not contiguous
}

}  // namespace
}  // namespace tg
