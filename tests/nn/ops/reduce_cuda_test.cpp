// reduce on CUDA vs CPU (forward and backward), bit-reproducibility on the GPU, and the raw
// kernel API on a device buffer with its workspace. Skips without a GPU.
#include "nn/ops/reduce.h"

#include <cmath>
#include <cstring>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Both sides accumulate in double in different fixed orders; the f32 results differ by at most
// an ulp of the final rounding.
constexpr double kRtol = 1e-6, kAtol = 1e-6;
// Backward formulas are the same one or two f32 multiplications on both sides.
constexpr double kGradTol = 1e-7;

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max_abs,
                             ReduceOp::sum_squares, ReduceOp::l1};
const int64_t kSizes[] = {1, 3, 1000, 256 * 4 * 1024 + 1, (1 << 20) + 7, (1 << 22) + 3};

std::string label(ReduceOp op, int64_t n) {
  return std::string(reduce_op_name(op)) + " n=" + std::to_string(n);
}

TEST(ReduceCuda, ParityForwardBackward) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (int64_t n : kSizes) {
    for (auto [lo, hi] : {std::pair{-2.f, 2.f}, std::pair{900.f, 1000.f}}) {
      Tensor base = testing::random_uniform({n}, lo, hi, static_cast<uint64_t>(n));
      if (n >= 3) {  // a tie for max |x| at the two ends: both sides must pick index 1
        float* p = base.data<float>();
        p[1] = -2000.f;
        p[n - 1] = 2000.f;
      }
      for (ReduceOp op : kOps) {
        auto run = [op](Tensor x) {
          x.set_requires_grad(true);
          Tensor y = reduce(x, op);
          EXPECT_EQ(y.device(), x.device());
          EXPECT_EQ(y.shape(), Shape{});
          backward(y, Tensor::full({}, -0.75, DType::f32, y.device()));
          return std::pair{y.to(Device::cpu()), x.grad().to(Device::cpu())};
        };
        const auto cpu = run(base.clone());
        const auto gpu_r = run(base.to(gpu));
        testing::expect_close(gpu_r.first, cpu.first, kAtol, kRtol, "forward " + label(op, n));
        testing::expect_close(gpu_r.second, cpu.second, kGradTol, kGradTol,
                              "backward " + label(op, n));
      }
    }
  }
}

TEST(ReduceCuda, BitReproducible) {
  TG_REQUIRE_CUDA();
  Tensor x = testing::random_normal({(1 << 22) + 3}, 5.0f, 9).to(Device::cuda(0));
  for (ReduceOp op : kOps) {
    const float a = reduce(x, op).item<float>(), b = reduce(x, op).item<float>();
    EXPECT_EQ(std::memcmp(&a, &b, sizeof(float)), 0)
        << reduce_op_name(op) << ": " << a << " vs " << b;
  }
}

TEST(ReduceCuda, EmptyAndErrors) {
  TG_REQUIRE_CUDA();
  Tensor e = Tensor::zeros({0}, DType::f32, Device::cuda(0));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max_abs, ReduceOp::sum_squares, ReduceOp::l1})
    EXPECT_EQ(reduce(e, op).item<float>(), 0.f) << reduce_op_name(op);
  EXPECT_THROW(mean(e), Error);
  EXPECT_THROW(sum(Tensor::zeros({4}, DType::i32, Device::cuda(0))), Error);
}

#if TG_CUDA
// The raw API the compression code uses: device output, caller-owned workspace, no host sync.
TEST(ReduceCuda, RawKernelApi) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t n = (1 << 20) + 7;
  Tensor x = testing::random_uniform({n}, -3, 3, 17);
  Tensor xd = x.to(gpu);
  Tensor out = Tensor::empty({}, DType::f32, gpu);
  Tensor ws = Tensor::empty({reduce_cuda_workspace_floats(n)}, DType::f32, gpu);
  for (ReduceOp op : kOps) {
    float want = 0;
    reduce_cpu(op, x.data<float>(), n, &want);
    reduce_cuda(op, xd.data<float>(), n, out.data<float>(), ws.data<float>());
    EXPECT_NEAR(out.item<float>(), want, kAtol + kRtol * std::fabs(want)) << label(op, n);
  }
  Tensor idx = Tensor::empty({1}, DType::i64, gpu);
  int64_t want = -1;
  argmax_abs_cpu(x.data<float>(), n, &want);
  argmax_abs_cuda(xd.data<float>(), n, idx.data<int64_t>(), ws.data<float>());
  EXPECT_EQ(idx.item<int64_t>(), want);
  argmax_abs_cuda(xd.data<float>(), 0, idx.data<int64_t>(), ws.data<float>());
  EXPECT_EQ(idx.item<int64_t>(), -1);
  EXPECT_THROW(reduce_cuda(ReduceOp::sum, xd.data<float>(), n, out.data<float>(), nullptr), Error);
}
#endif

}  // namespace
}  // namespace tg
