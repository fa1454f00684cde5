// matmul and linear on CUDA vs CPU (forward and every gradient). Skips without a GPU.
#include "nn/ops/linear.h"

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// cuBLAS and OpenBLAS sum up to ~300 f32 products in different orders (and cuBLAS may use
// other blockings); the bias gradient is summed in double on both.
constexpr double kAtol = 1e-4, kRtol = 1e-4;

struct Dims {
  int64_t M, K, N;
};
const Dims kDims[] = {{1, 1, 1}, {4, 3, 5}, {64, 300, 10}, {33, 17, 65}, {3, 0, 2}};

std::vector<Tensor> run(bool use_linear, Tensor x, Tensor w, Tensor b) {
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (b.defined()) b.set_requires_grad(true);
  Tensor y = use_linear ? linear(x, w, b) : matmul(x, w);
  const Tensor dy = testing::random_uniform(y.shape(), -1, 1, 99).to(y.device());
  backward(y, dy);
  std::vector<Tensor> out{y.to(Device::cpu()), x.grad().to(Device::cpu()),
                          w.grad().to(Device::cpu())};
  if (b.defined()) out.push_back(b.grad().to(Device::cpu()));
  return out;
}

TEST(LinearCuda, ParityForwardBackward) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 1;
  for (const Dims& d : kDims) {
    for (int mode = 0; mode < 3; ++mode) {  // matmul, linear with bias, linear without bias
      SCOPED_TRACE("mode " + std::to_string(mode) + " M=" + std::to_string(d.M) +
                   " K=" + std::to_string(d.K) + " N=" + std::to_string(d.N));
      const Tensor x = testing::random_uniform({d.M, d.K}, -1, 1, seed, 0);
      const Tensor w = testing::random_uniform({d.K, d.N}, -1, 1, seed, 1);
      const Tensor b = mode == 1 ? testing::random_uniform({d.N}, -1, 1, seed, 2) : Tensor();
      ++seed;
      const auto cpu = run(mode > 0, x.clone(), w.clone(), b.defined() ? b.clone() : Tensor());
      const auto gpu_r = run(mode > 0, x.to(gpu), w.to(gpu), b.defined() ? b.to(gpu) : Tensor());
      ASSERT_EQ(cpu.size(), gpu_r.size());
      const char* names[] = {"y", "dx", "dw", "dbias"};
      for (size_t k = 0; k < cpu.size(); ++k)
        testing::expect_close(gpu_r[k], cpu[k], kAtol, kRtol, names[k]);
    }
  }
}

}  // namespace
}  // namespace tg
