// softmax_cross_entropy and softmax on CUDA vs CPU (forward and backward), label errors and
// determinism on the GPU. Skips without a GPU.
#include "nn/ops/softmax_xent.h"

#include <cstring>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Same f32 formulas on both sides; GPU expf may differ from the CPU's by an ulp or two, the
// double sums run in another order, and FMA contraction differs.
constexpr double kLossAtol = 1e-5, kLossRtol = 1e-6;
constexpr double kGradAtol = 1e-7, kGradRtol = 1e-5;

std::vector<int32_t> random_labels(int64_t n, int64_t k, uint64_t seed) {
  const auto u =
      testing::random_uniform({n}, 0.f, static_cast<float>(k), seed, 3).to_vector<float>();
  std::vector<int32_t> l(n);
  for (int64_t i = 0; i < n; ++i) l[i] = std::min<int32_t>(static_cast<int32_t>(u[i]), k - 1);
  return l;
}

struct Case {
  int64_t n, k;
  float scale;
};
const Case kCases[] = {
    {1, 1, 1.f},
    {1, 3, 1.f},
    {3, 3, 2.f},
    {128, 10, 5.f},
    {3, 1000, 3.f},
    {1000, 3, 1000.f},
    {7, 1000, 1000.f},
    {2, (1 << 20) + 7, 4.f},
    {(1 << 20) + 7, 10, 1000.f},
    {37, 33, 8.f},
    {5, 300, 8.f},
};

TEST(SoftmaxXentCuda, ParityForwardBackward) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    const std::string what = shape_str({c.n, c.k});
    Tensor logits = testing::random_uniform({c.n, c.k}, -c.scale, c.scale, ++seed);
    Tensor labels = Tensor::from_vector(random_labels(c.n, c.k, seed), {c.n});
    auto run = [&labels](Tensor x) {
      x.set_requires_grad(true);
      Tensor loss = softmax_cross_entropy(x, labels.to(x.device()));
      EXPECT_EQ(loss.device(), x.device());
      backward(loss, Tensor::full({}, 1.5, DType::f32, x.device()));
      Tensor g = x.grad().to(Device::cpu());
      NoGradGuard no_grad;
      return std::vector<Tensor>{loss.to(Device::cpu()), g, softmax(x).to(Device::cpu())};
    };
    const auto cpu = run(logits.clone());
    const auto gpu_r = run(logits.to(gpu));
    testing::expect_close(gpu_r[0], cpu[0], kLossAtol, kLossRtol, "loss " + what);
    testing::expect_close(gpu_r[1], cpu[1], kGradAtol, kGradRtol, "dlogits " + what);
    testing::expect_close(gpu_r[2], cpu[2], kGradAtol, kGradRtol, "softmax " + what);
  }
}

TEST(SoftmaxXentCuda, SoftmaxBackwardParity) {
  TG_REQUIRE_CUDA();
  Tensor x = testing::random_uniform({9, 70}, -6, 6, 5);
  Tensor dy = testing::random_uniform({9, 70}, -1, 1, 6);
  auto run = [&dy](Tensor in) {
    in.set_requires_grad(true);
    Tensor p = softmax(in);
    backward(p, dy.to(in.device()));
    return in.grad().to(Device::cpu());
  };
  testing::expect_close(run(x.to(Device::cuda(0))), run(x.clone()), kGradAtol, kGradRtol,
                        "softmax backward");
}

TEST(SoftmaxXentCuda, LabelOutOfRange) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  // Many rows so the bad ones land in different threads of the checking block.
  const int64_t n = 3000, k = 10;
  Tensor logits = testing::random_uniform({n, k}, -1, 1, 7).to(gpu);
  std::vector<int32_t> lv = random_labels(n, k, 7);
  lv[2999] = -4;
  lv[1234] = 10;
  lv[2500] = 99;
  try {
    softmax_cross_entropy(logits, Tensor::from_vector(lv, {n}, gpu));
    ADD_FAILURE() << "bad labels did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("row 1234"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 10"), std::string::npos) << msg;
    EXPECT_NE(msg.find("10 classes"), std::string::npos) << msg;
  }
  // Device mismatch between logits and labels.
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::zeros({n}, DType::i32)), Error);
}

TEST(SoftmaxXentCuda, Deterministic) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t n = 50001, k = 100;
  Tensor logits = testing::random_uniform({n, k}, -8, 8, 11).to(gpu);
  Tensor labels = Tensor::from_vector(random_labels(n, k, 11), {n}, gpu);
  auto run = [&] {
    Tensor x = logits.clone();
    x.set_requires_grad(true);
    Tensor loss = softmax_cross_entropy(x, labels);
    backward(loss);
    return std::pair{loss.item<float>(), x.grad().to_vector<float>()};
  };
  const auto a = run(), b = run();
  EXPECT_EQ(std::memcmp(&a.first, &b.first, sizeof(float)), 0);
  ASSERT_EQ(a.second.size(), b.second.size());
  EXPECT_EQ(std::memcmp(a.second.data(), b.second.data(), a.second.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace tg
