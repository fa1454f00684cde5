// dropout on CUDA vs CPU: masks and values bit-identical, forward and backward. Skips without a
// GPU.
#include "nn/ops/dropout.h"

#include <cstring>

#include "nn/autograd/tape.h"
#include "nn/core/philox.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

constexpr uint64_t kSeed = 20170517;

using testing::expect_bitwise_equal;

std::pair<Tensor, Tensor> run(Tensor x, const Tensor& dy, float ratio, uint64_t stream) {
  x.set_requires_grad(true);
  Tensor y = dropout(x, ratio, true, kSeed, stream);
  backward(y, dy.to(y.device()));
  return {y.to(Device::cpu()), x.grad().to(Device::cpu())};
}

TEST(DropoutCuda, MaskAndValuesBitIdentical) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 1;
  // Sizes not a multiple of 4 exercise the partial last Philox block.
  for (const Shape& s : {Shape{1}, Shape{3}, Shape{5}, Shape{2, 3, 7, 5}, Shape{128, 4097},
                         Shape{64, 256, 13, 13}}) {
    for (float ratio : {0.1f, 0.5f, 0.9f}) {
      SCOPED_TRACE(shape_str(s) + " ratio " + std::to_string(ratio));
      const uint64_t stream = rng_stream(RngPurpose::dropout, seed, 0, 3);
      const Tensor x = testing::random_uniform(s, -2, 2, seed++);
      const Tensor dy = testing::random_uniform(s, -1, 1, seed++);
      auto [y_cpu, dx_cpu] = run(x.clone(), dy, ratio, stream);
      auto [y_gpu, dx_gpu] = run(x.to(gpu), dy, ratio, stream);
      expect_bitwise_equal(y_gpu, y_cpu, "forward");
      expect_bitwise_equal(dx_gpu, dx_cpu, "backward");
    }
  }
}

TEST(DropoutCuda, NonContiguousInput) {
  TG_REQUIRE_CUDA();
  const Tensor big = testing::random_uniform({6, 10}, -1, 1, 9);
  expect_bitwise_equal(
      dropout(big.to(Device::cuda(0)).slice(1, 3, 8), 0.3f, true, kSeed, 4).to(Device::cpu()),
      dropout(big.slice(1, 3, 8), 0.3f, true, kSeed, 4), "strided");
}

}  // namespace
}  // namespace tg
