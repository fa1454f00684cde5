// batch_norm on CUDA vs CPU: forward, backward (x, gamma, beta) and the moving-statistic updates,
// training and inference, with and without gamma; run-to-run determinism. Skips without a GPU.
#include "nn/ops/batchnorm.h"

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Both sides reduce in double (in another order) and round once to f32; the elementwise passes
// may differ by an FMA contraction (an ulp), which dx's three-term cancellation can amplify a bit.
constexpr double kAtol = 1e-5, kRtol = 1e-5;
constexpr double kGradAtol = 5e-5, kGradRtol = 1e-4;
constexpr double kMovingAtol = 1e-6, kMovingRtol = 1e-6;

struct Result {
  std::vector<Tensor>
      t;  // y, dx, dgamma, dbeta, moving_mean, moving_var (dgamma/dbeta may be empty)
};

// Two steps (two batches), returns the second step's outputs/gradients and the moving statistics.
Result run(const std::vector<Tensor>& xs, const Tensor& dy, const Tensor& gamma0,
           const Tensor& beta0, const Tensor& mm0, const Tensor& mv0, bool training,
           const Device& d) {
  Tensor mm = mm0.to(d).clone(), mv = mv0.to(d).clone();
  Tensor gamma = gamma0.defined() ? gamma0.to(d).clone() : Tensor();
  Tensor beta = beta0.defined() ? beta0.to(d).clone() : Tensor();
  if (gamma.defined()) gamma.set_requires_grad(true);
  if (beta.defined()) beta.set_requires_grad(true);
  const BatchNormOptions o{0.9f, 1e-3f};
  Result r;
  for (size_t step = 0; step < xs.size(); ++step) {
    Tensor x = xs[step].to(d).clone();
    x.set_requires_grad(true);
    Tensor y = batch_norm(x, gamma, beta, mm, mv, training, o);
    if (step + 1 < xs.size()) {
      clear_tape();
      continue;
    }
    backward(y, dy.to(d));
    const Device cpu = Device::cpu();
    r.t = {y.to(cpu),
           x.grad().to(cpu),
           gamma.defined() ? gamma.grad().to(cpu) : Tensor(),
           beta.defined() ? beta.grad().to(cpu) : Tensor(),
           mm.to(cpu),
           mv.to(cpu)};
  }
  return r;
}

TEST(BatchNormCuda, ParityWithCpu) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Shape shapes[] = {{32, 64, 12, 12}, {8, 5},          {1, 4, 1, 1},
                          {2, 2, 13, 11},   {3, 48, 27, 27}, {256, 10}};
  const char* names[] = {"y", "dx", "dgamma", "dbeta", "moving_mean", "moving_var"};
  for (const Shape& shape : shapes) {
    const int64_t C = shape[1];
    const std::vector<Tensor> xs = {testing::random_uniform(shape, -2, 3, 1),
                                    testing::random_uniform(shape, -1, 4, 2)};
    const Tensor dy = testing::random_uniform(shape, -1, 1, 3);
    const Tensor gamma = testing::random_uniform({C}, 0.5f, 1.5f, 4);
    const Tensor beta = testing::random_uniform({C}, -0.5f, 0.5f, 5);
    const Tensor mm = testing::random_uniform({C}, -0.5f, 0.5f, 6);
    const Tensor mv = testing::random_uniform({C}, 0.2f, 2.0f, 7);
    for (bool training : {true, false}) {
      for (bool with_gamma : {true, false}) {  // false: the paper's offset-only variant
        SCOPED_TRACE(shape_str(shape) + (training ? " training" : " inference") +
                     (with_gamma ? " gamma+beta" : " beta only"));
        const Tensor g = with_gamma ? gamma : Tensor();
        const Result cpu = run(xs, dy, g, beta, mm, mv, training, Device::cpu());
        const Result cuda = run(xs, dy, g, beta, mm, mv, training, gpu);
        for (size_t k = 0; k < cpu.t.size(); ++k) {
          if (!cpu.t[k].defined()) continue;
          const bool grad = k >= 1 && k <= 3, moving = k >= 4;
          testing::expect_close(cuda.t[k], cpu.t[k],
                                grad     ? kGradAtol
                                : moving ? kMovingAtol
                                         : kAtol,
                                grad     ? kGradRtol
                                : moving ? kMovingRtol
                                         : kRtol,
                                names[k]);
        }
      }
    }
  }
}

// One block per channel and a fixed tree: the same input gives bit-identical results.
TEST(BatchNormCuda, Deterministic) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Shape shape{16, 8, 17, 9};
  const std::vector<Tensor> xs = {testing::random_uniform(shape, -2, 3, 11)};
  const Tensor dy = testing::random_uniform(shape, -1, 1, 12);
  const Tensor beta = testing::random_uniform({8}, -0.5f, 0.5f, 13);
  const Tensor mm = Tensor::zeros({8}), mv = Tensor::full({8}, 1.0);
  const Result a = run(xs, dy, Tensor(), beta, mm, mv, true, gpu);
  const Result b = run(xs, dy, Tensor(), beta, mm, mv, true, gpu);
  for (size_t k = 0; k < a.t.size(); ++k) {
    if (!a.t[k].defined()) continue;
    EXPECT_EQ(a.t[k].to_vector<float>(), b.t[k].to_vector<float>()) << "output " << k;
  }
}

}  // namespace
}  // namespace tg
