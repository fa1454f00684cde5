// lrn on CUDA vs CPU (forward and backward). Skips without a GPU.
#include "nn/ops/lrn.h"

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Same expressions on both sides; powf and std::pow may differ by an ulp, and the double window
// sums may round differently once (FMA contraction).
constexpr double kAtol = 1e-6, kRtol = 1e-5;

struct Case {
  Shape shape;
  LrnOptions o;
  float scale;
};
const Case kCases[] = {
    {{4, 64, 12, 12}, {4, 1.0f, 0.001f / 9.0f, 0.75f}, 4.0f},  // CifarNet lrn1
    {{2, 48, 27, 27}, {2, 2.0f, 1e-4f, 0.75f}, 8.0f},          // AlexNet, odd H/W
    {{3, 3, 5, 7}, LrnOptions{}, 1.0f},                        // C < window
    {{2, 9, 1, 1}, {0, 0.5f, 2.0f, 1.0f}, 1.0f},               // radius 0, one pixel
    {{5, 16, 33, 31}, {3, 1.0f, 0.5f, 0.6f}, 1.0f},            // big alpha: the window term matters
};

TEST(LrnCuda, ParityForwardBackward) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Case& c : kCases) {
    SCOPED_TRACE(shape_str(c.shape));
    Tensor x = testing::random_uniform(c.shape, -c.scale, c.scale, 1);
    Tensor dy = testing::random_uniform(c.shape, -1, 1, 2);
    auto run = [&](Tensor xin, const Device& d) {
      xin.set_requires_grad(true);
      Tensor y = lrn(xin, c.o);
      backward(y, dy.to(d));
      return std::vector<Tensor>{y.to(Device::cpu()), xin.grad().to(Device::cpu())};
    };
    auto cpu = run(x.clone(), Device::cpu());
    auto gpu_r = run(x.to(gpu), gpu);
    testing::expect_close(gpu_r[0], cpu[0], kAtol, kRtol, "forward");
    testing::expect_close(gpu_r[1], cpu[1], kAtol, kRtol, "backward");
  }
}

TEST(LrnCuda, NonContiguousInput) {
  TG_REQUIRE_CUDA();
  Tensor big = testing::random_uniform({2, 10, 6, 5}, -2, 2, 3);
  Tensor cpu = lrn(big.slice(1, 3, 9));
  Tensor gpu = lrn(big.to(Device::cuda(0)).slice(1, 3, 9));
  testing::expect_close(gpu.to(Device::cpu()), cpu, kAtol, kRtol, "strided forward");
}

}  // namespace
}  // namespace tg
