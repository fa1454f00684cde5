// End to end on the CPU: the small conv net's loss falls over 20 SGD steps on a fixed batch.
#include "tests/nn/e2e/small_convnet.h"

#include <cmath>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

TEST(SmallConvNet, LossFallsOver20SgdSteps) {
  testing::SmallConvNet net(Device::cpu());
  auto [x, labels] = testing::synthetic_batch();
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) losses.push_back(net.sgd_step(x, labels, step, 0.1f));
  // Initial loss near ln(4) = 1.386 (small random logits). Memorizing 8 samples with 1.2K
  // parameters must cut it well below half within 20 steps; dropout noise allows small bumps.
  EXPECT_NEAR(losses.front(), std::log(4.0), 0.3);
  EXPECT_LT(losses.back(), 0.5f * losses.front())
      << "loss did not fall: " << losses.front() << " -> " << losses.back();
  int rises = 0;
  for (size_t i = 1; i < losses.size(); ++i) rises += losses[i] > losses[i - 1] + 0.05f;
  EXPECT_LE(rises, 3);
  EXPECT_EQ(tape_size(), 0u);
}

TEST(SmallConvNet, DeterministicFromSeed) {
  auto [x, labels] = testing::synthetic_batch();
  testing::SmallConvNet a(Device::cpu()), b(Device::cpu());
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(a.sgd_step(x, labels, step, 0.1f), b.sgd_step(x, labels, step, 0.1f));
  }
  EXPECT_EQ(a.arena().params().to_vector<float>(), b.arena().params().to_vector<float>());
}

}  // namespace
}  // namespace tg
