// max_pool2d / avg_pool2d on CUDA vs CPU, forward and backward. Skips without a GPU.
// Max pooling must match bit for bit (same argmax, same dx summation order); average pooling sums
// in the same order on both sides, so it is expected to match exactly too, but is only held to a
// tight tolerance.
#include "nn/ops/pool2d.h"

#include <cmath>
#include <cstring>

#include "nn/autograd/tape.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Same f32 operations in the same order; allow an ulp should the compiler contract differently.
constexpr double kAvgAtol = 1e-6, kAvgRtol = 1e-6;

struct Case {
  Shape x;
  Pool2dOptions opt;
  const char* what;
};

const Case kCases[] = {
    {{4, 6, 28, 28}, {2, 2, 2, 2, Padding::same}, "LeNet 2x2/2 SAME"},
    {{2, 3, 7, 9}, {2, 2, 2, 2, Padding::same}, "2x2/2 SAME odd"},
    {{4, 8, 24, 24}, {3, 3, 2, 2, Padding::same}, "CifarNet 3x3/2 SAME"},
    {{2, 3, 13, 11}, {3, 3, 2, 2, Padding::same}, "3x3/2 SAME odd"},
    {{2, 8, 27, 27}, {3, 3, 2, 2, Padding::valid}, "AlexNet 3x3/2 VALID"},
    {{4, 16, 7, 7}, {7, 7, 1, 1, Padding::valid}, "GoogLeNet 7x7/1 VALID"},
    {{2, 8, 14, 14}, {3, 3, 1, 1, Padding::same}, "Inception 3x3/1 SAME"},
    {{1, 2, 6, 8}, {4, 4, 1, 1, Padding::same}, "4x4/1 SAME asymmetric"},
    {{1, 3, 8, 7}, {2, 2, 3, 3, Padding::same}, "stride > window"},
    {{2, 2, 5, 6}, {1, 1, 2, 2, Padding::same}, "window 1"},
    {{1, 2, 6, 5}, {3, 3, 2, 2, Padding::explicit_pad, 1, 1}, "explicit pad"},
};

using testing::expect_bitwise_equal;

std::pair<Tensor, Tensor> run(const Tensor& x0, const Pool2dOptions& o, bool is_max,
                              const Tensor& dy) {
  Tensor x = x0.clone();
  x.set_requires_grad(true);
  Tensor y = is_max ? max_pool2d(x, o) : avg_pool2d(x, o);
  backward(y, dy.to(y.device()));
  return {y.to(Device::cpu()), x.grad().to(Device::cpu())};
}

TEST(Pool2dCuda, MaxParityExact) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    for (bool ties : {false, true}) {
      Tensor x = testing::random_distinct(c.x, 0.01f, seed++);
      if (ties) {  // a few levels: many ties, so the first-maximum rule decides
        std::vector<float> v = testing::random_uniform(c.x, 0, 3, seed++).to_vector<float>();
        for (float& f : v) f = std::floor(f);
        x = Tensor::from_vector(v, c.x);
      }
      const Tensor y_shape_probe = max_pool2d(x, c.opt);
      // Distinct dy values: a different argmax anywhere changes dx.
      const Tensor dy = testing::random_distinct(y_shape_probe.shape(), 1e-3f, seed++);
      auto [y_cpu, dx_cpu] = run(x, c.opt, true, dy);
      auto [y_gpu, dx_gpu] = run(x.to(gpu), c.opt, true, dy);
      expect_bitwise_equal(y_gpu, y_cpu, ties ? "max forward (ties)" : "max forward");
      expect_bitwise_equal(dx_gpu, dx_cpu, ties ? "max backward (ties)" : "max backward");
    }
  }
}

TEST(Pool2dCuda, AvgParity) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    const Tensor x = testing::random_uniform(c.x, -2, 2, seed++);
    const Tensor dy = testing::random_uniform(avg_pool2d(x, c.opt).shape(), -1, 1, seed++);
    auto [y_cpu, dx_cpu] = run(x, c.opt, false, dy);
    auto [y_gpu, dx_gpu] = run(x.to(gpu), c.opt, false, dy);
    testing::expect_close(y_gpu, y_cpu, kAvgAtol, kAvgRtol, "avg forward");
    testing::expect_close(dx_gpu, dx_cpu, kAvgAtol, kAvgRtol, "avg backward");
  }
}

TEST(Pool2dCuda, NonContiguousInput) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor big = testing::random_distinct({2, 3, 9, 12}, 0.01f, 11);
  const Pool2dOptions o{3, 3, 2, 2, Padding::same};
  const Tensor x_cpu = big.slice(3, 2, 11), x_gpu = big.to(gpu).slice(3, 2, 11);
  expect_bitwise_equal(max_pool2d(x_gpu, o).to(Device::cpu()), max_pool2d(x_cpu, o), "strided max");
  testing::expect_close(avg_pool2d(x_gpu, o).to(Device::cpu()), avg_pool2d(x_cpu, o), kAvgAtol,
                        kAvgRtol, "strided avg");
}

}  // namespace
}  // namespace tg
