// relu on CUDA vs CPU, forward and backward: bit-identical (same comparisons). Skips without a GPU.
#include "nn/ops/relu.h"

#include <cstring>
#include <limits>

#include "nn/autograd/tape.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_bitwise_equal;

std::pair<Tensor, Tensor> run(Tensor x, const Tensor& dy) {
  x.set_requires_grad(true);
  Tensor y = relu(x);
  backward(y, dy.to(y.device()));
  return {y.to(Device::cpu()), x.grad().to(Device::cpu())};
}

TEST(ReluCuda, ParityExact) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 1;
  for (const Shape& s : {Shape{1}, Shape{7}, Shape{2, 3, 4, 5}, Shape{8, 64, 27, 27}}) {
    SCOPED_TRACE(shape_str(s));
    const Tensor x = testing::random_uniform(s, -1, 1, seed++);
    const Tensor dy = testing::random_uniform(s, -1, 1, seed++);
    auto [y_cpu, dx_cpu] = run(x.clone(), dy);
    auto [y_gpu, dx_gpu] = run(x.to(gpu), dy);
    expect_bitwise_equal(y_gpu, y_cpu, "forward");
    expect_bitwise_equal(dx_gpu, dx_cpu, "backward");
  }
}

TEST(ReluCuda, SpecialValues) {
  TG_REQUIRE_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector<float>({nan, -0.0f, 0.0f, -2.0f, 3.0f}, {5});
  const Tensor dy = Tensor::full({5}, 1.0);
  auto [y_cpu, dx_cpu] = run(x.clone(), dy);
  auto [y_gpu, dx_gpu] = run(x.to(Device::cuda(0)), dy);
  expect_bitwise_equal(y_gpu, y_cpu, "forward");
  expect_bitwise_equal(dx_gpu, dx_cpu, "backward");
}

TEST(ReluCuda, NonContiguousInput) {
  TG_REQUIRE_CUDA();
  const Tensor big = testing::random_uniform({4, 6}, -1, 1, 3);
  expect_bitwise_equal(relu(big.to(Device::cuda(0)).slice(1, 1, 4)).to(Device::cpu()),
                       relu(big.slice(1, 1, 4)), "strided");
}

}  // namespace
}  // namespace tg
