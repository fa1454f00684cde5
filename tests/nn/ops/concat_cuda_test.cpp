// concat on CUDA vs CPU, forward and backward: pure copies, so bit-identical. Skips without a GPU.
#include "nn/ops/concat.h"

#include "nn/autograd/tape.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

TEST(ConcatCuda, ParityExact) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  struct Case {
    std::vector<Shape> shapes;
    int64_t dim;
  };
  const Case cases[] = {
      {{{4, 64, 14, 14}, {4, 128, 14, 14}, {4, 32, 14, 14}, {4, 32, 14, 14}}, 1},
      {{{2, 3, 4, 5}, {1, 3, 4, 5}}, 0},
      {{{2, 3, 4, 5}, {2, 3, 4, 2}}, -1},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.dim));
    std::vector<Tensor> cpu, gpu_in;
    for (const Shape& s : c.shapes) {
      cpu.push_back(testing::random_uniform(s, -1, 1, seed++));
      gpu_in.push_back(cpu.back().to(gpu));
      cpu.back().set_requires_grad(true);
      gpu_in.back().set_requires_grad(true);
    }
    // One graph at a time: backward() consumes the whole tape, so a second graph recorded
    // before the first backward would lose its nodes (and its inputs their gradients).
    Tensor y_cpu = concat(cpu, c.dim);
    const Tensor dy = testing::random_uniform(y_cpu.shape(), -1, 1, seed++);
    backward(y_cpu, dy);
    Tensor y_gpu = concat(gpu_in, c.dim);
    EXPECT_EQ(y_gpu.device(), gpu);
    backward(y_gpu, dy.to(gpu));
    ASSERT_EQ(tape_size(), 0u);
    testing::expect_close(y_gpu.to(Device::cpu()), y_cpu, 0, 0, "forward");
    for (size_t j = 0; j < cpu.size(); ++j) {
      ASSERT_TRUE(gpu_in[j].grad().defined()) << "input " << j << " got no gradient";
      EXPECT_EQ(gpu_in[j].grad().device(), gpu);
      testing::expect_close(gpu_in[j].grad().to(Device::cpu()), cpu[j].grad(), 0, 0,
                            "dx " + std::to_string(j));
    }
  }
}

TEST(ConcatCuda, MixedDevicesThrow) {
  TG_REQUIRE_CUDA();
  EXPECT_THROW(
      concat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::f32, Device::cuda(0))}, 1),
      Error);
}

}  // namespace
}  // namespace tg
