// End to end on CUDA vs CPU: same initial parameters (arena initialized on the host), same
// dropout masks (Philox), so the loss trajectories agree to f32 round-off.
#include "tests/nn/e2e/small_convnet.h"

#include <cmath>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// 20 steps of f32 training with different summation orders (cuBLAS vs OpenBLAS): losses agree
// to ~1e-4 relative; the tolerance leaves an order of magnitude of headroom.
constexpr double kLossRtol = 2e-3;

TEST(SmallConvNetCuda, TrajectoryMatchesCpu) {
  TG_REQUIRE_CUDA();
  auto [x, labels] = testing::synthetic_batch();
  testing::SmallConvNet cpu(Device::cpu()), gpu(Device::cuda(0));
  EXPECT_EQ(cpu.arena().params().to_vector<float>(), gpu.arena().params().to_vector<float>());
  Tensor xg = x.to(Device::cuda(0)), lg = labels.to(Device::cuda(0));
  for (int step = 0; step < 20; ++step) {
    const float lc = cpu.sgd_step(x, labels, step, 0.1f);
    const float lgpu = gpu.sgd_step(xg, lg, step, 0.1f);
    EXPECT_NEAR(lgpu, lc, kLossRtol * std::fabs(lc)) << "step " << step;
  }
}

}  // namespace
}  // namespace tg
