// elementwise on CUDA vs CPU (forward and backward). Skips without a GPU.
#include "nn/ops/elementwise.h"

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Same f32 operation on both sides; only division may differ by an ulp or two.
constexpr double kAtol = 2e-5, kRtol = 1e-5;  // sum_to adds ~40 terms in another order

TEST(ElementwiseCuda, ParityForwardBackward) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor a = testing::random_uniform({2, 3, 4, 5}, -2, 2, 1);
  Tensor b = testing::random_uniform({3, 1, 1}, 0.5f, 2, 2);
  for (int op = 0; op < 4; ++op) {
    auto run = [op](Tensor x, Tensor y) {
      x.set_requires_grad(true);
      y.set_requires_grad(true);
      Tensor out = op == 0 ? add(x, y) : op == 1 ? sub(x, y) : op == 2 ? mul(x, y) : div(x, y);
      backward(out, Tensor::full(out.shape(), 0.5, DType::f32, out.device()));
      return std::vector<Tensor>{out.to(Device::cpu()), x.grad().to(Device::cpu()),
                                 y.grad().to(Device::cpu())};
    };
    auto cpu = run(a.clone(), b.clone());
    auto gpu_r = run(a.to(gpu), b.to(gpu));
    for (int k = 0; k < 3; ++k)
      testing::expect_close(gpu_r[k], cpu[k], kAtol, kRtol,
                            "op " + std::to_string(op) + " out " + std::to_string(k));
  }
  Tensor x = a.to(gpu);
  testing::expect_close(affine(x, 2.f, 1.f).to(Device::cpu()), affine(a, 2.f, 1.f), kAtol, kRtol,
                        "affine");
}

}  // namespace
}  // namespace tg
