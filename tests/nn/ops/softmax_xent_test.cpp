// softmax_cross_entropy and softmax: naive double reference (forward and backward) over many
// shapes including large-magnitude logits, the raw kernels, gradient checks, label and dtype
// errors, determinism.
#include "nn/ops/softmax_xent.h"

#include <cmath>
#include <cstring>

#include "nn/ops/softmax_xent_kernels.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// f32 exp per element and x - m rounded to f32 (|x - m| <= 2000 here: ulp 1.2e-4, i.e. a
// relative 6e-8 of the loss); everything else is double. A few 1e-7 relative in the worst case.
constexpr double kLossAtol = 1e-5, kLossRtol = 1e-5;
// p = f32 exp * f32 (1 / s): a few ulps of p <= 1, times dloss / N <= 1.
constexpr double kGradAtol = 1e-6, kGradRtol = 1e-5;

struct Reference {
  double loss = 0;
  std::vector<double> dlogits;  // for dloss = 1
  std::vector<double> probs;
};

// Naive reference: per row, m = max, s = sum exp(x - m) in double, loss = log s + m - x_label.
Reference reference(const Tensor& logits, const std::vector<int32_t>& labels) {
  const int64_t n = logits.size(0), k = logits.size(1);
  const auto x = testing::to_doubles(logits);
  Reference r;
  r.dlogits.resize(n * k);
  r.probs.resize(n * k);
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < k; ++j) m = std::max(m, x[i * k + j]);
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += std::exp(x[i * k + j] - m);
    r.loss += std::log(s) + m - x[i * k + labels[i]];
    for (int64_t j = 0; j < k; ++j) {
      const double p = std::exp(x[i * k + j] - m) / s;
      r.probs[i * k + j] = p;
      r.dlogits[i * k + j] = (p - (j == labels[i] ? 1.0 : 0.0)) / static_cast<double>(n);
    }
  }
  r.loss /= static_cast<double>(n);
  return r;
}

std::vector<int32_t> random_labels(int64_t n, int64_t k, uint64_t seed) {
  Tensor u = random_uniform({n}, 0.f, static_cast<float>(k), seed, 3);
  std::vector<int32_t> l(n);
  const auto uv = u.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) l[i] = std::min<int32_t>(static_cast<int32_t>(uv[i]), k - 1);
  return l;
}

struct Case {
  int64_t n, k;
  float scale;  // logits uniform in [-scale, scale)
};
const Case kCases[] = {
    {1, 1, 1.f},
    {1, 3, 1.f},
    {3, 3, 2.f},
    {3, 1000, 3.f},
    {1000, 10, 5.f},
    {1000, 3, 1000.f},
    {7, 1000, 1000.f},
    {2, (1 << 20) + 7, 4.f},
    {(1 << 16) + 7, 10, 1000.f},
};

std::string name_of(const Case& c) {
  return shape_str({c.n, c.k}) + " scale " + std::to_string(c.scale);
}

TEST(SoftmaxXent, MatchesReference) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    Tensor logits = random_uniform({c.n, c.k}, -c.scale, c.scale, ++seed);
    const auto lv = random_labels(c.n, c.k, seed);
    const Reference ref = reference(logits, lv);
    Tensor labels = Tensor::from_vector(lv, {c.n});

    logits.set_requires_grad(true);
    Tensor loss = softmax_cross_entropy(logits, labels);
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_NEAR(loss.item<float>(), ref.loss, kLossAtol + kLossRtol * std::fabs(ref.loss))
        << name_of(c);
    backward(loss);
    expect_close(logits.grad(), ref.dlogits, kGradAtol, kGradRtol, "dlogits " + name_of(c));

    NoGradGuard no_grad;
    expect_close(softmax(logits), ref.probs, kGradAtol, kGradRtol, "softmax " + name_of(c));
  }
}

TEST(SoftmaxXent, ScaledSeedAndRawKernels) {
  const int64_t n = 5, k = 7;
  Tensor logits = random_uniform({n, k}, -3, 3, 41);
  const auto lv = random_labels(n, k, 41);
  const Reference ref = reference(logits, lv);
  // Raw forward: per-row losses, their mean, the bad-row sentinel N.
  std::vector<float> row_loss(n);
  float loss = NAN;
  int64_t bad = -1;
  const SoftmaxShape s{n, k};
  softmax_xent_forward_cpu(s, logits.data<float>(), lv.data(), row_loss.data(), &loss, &bad);
  EXPECT_EQ(bad, n);
  EXPECT_NEAR(loss, ref.loss, kLossAtol + kLossRtol * ref.loss);
  // Backward with dloss = -2.5 scales the gradient.
  const float dloss = -2.5f;
  std::vector<float> dx(n * k);
  softmax_xent_backward_cpu(s, logits.data<float>(), lv.data(), &dloss, dx.data());
  std::vector<double> want(ref.dlogits);
  for (double& w : want) w *= dloss;
  expect_close(std::vector<double>(dx.begin(), dx.end()), want, kGradAtol, kGradRtol, "raw");
}

TEST(SoftmaxXent, ExtremeLogitsStayFinite) {
  // One dominant class per row far beyond exp's f32 range; the rest underflow to 0.
  Tensor logits =
      Tensor::from_vector<float>({1000.f, -1000.f, 0.f, -1000.f, 1000.f, 999.f}, {2, 3});
  Tensor labels = Tensor::from_vector<int32_t>({0, 2}, {2});
  const Reference ref = reference(logits, {0, 2});
  const float loss = softmax_cross_entropy(logits, labels).item<float>();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, ref.loss, kLossAtol + kLossRtol * ref.loss);
  const auto p = softmax(logits).to_vector<float>();
  for (float v : p) EXPECT_TRUE(std::isfinite(v));
  expect_close(softmax(logits), ref.probs, kGradAtol, kGradRtol, "softmax extreme");
}

TEST(SoftmaxXent, SoftmaxRowsOfHigherRankInput) {
  Tensor x = random_uniform({2, 3, 5}, -4, 4, 51);
  const Reference ref = reference(x.view({6, 5}), std::vector<int32_t>(6, 0));
  Tensor p = softmax(x);
  EXPECT_EQ(p.shape(), x.shape());
  expect_close(p, ref.probs, kGradAtol, kGradRtol, "softmax [2, 3, 5]");
}

TEST(SoftmaxXent, LabelOutOfRange) {
  Tensor logits = random_uniform({4, 5}, -1, 1, 61);
  for (int32_t bad : {-1, 5, 1 << 30}) {
    Tensor labels = Tensor::from_vector<int32_t>({0, 4, bad, 7}, {4});
    try {
      softmax_cross_entropy(logits, labels);
      ADD_FAILURE() << "label " << bad << " did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      // The first bad row (2, not 3), its value and K.
      EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("5 classes"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(tape_size(), 0u);
}

TEST(SoftmaxXent, ShapeAndDtypeErrors) {
  Tensor logits = random_uniform({4, 5}, -1, 1, 71);
  Tensor labels = Tensor::from_vector<int32_t>({0, 1, 2, 3}, {4});
  EXPECT_THROW(softmax_cross_entropy(Tensor::zeros({4, 5}, DType::i32), labels), Error);
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::zeros({4}, DType::f32)), Error);
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::zeros({4}, DType::i64)), Error);
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::zeros({3}, DType::i32)), Error);
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::zeros({4, 1}, DType::i32)), Error);
  EXPECT_THROW(softmax_cross_entropy(Tensor::zeros({20}), labels), Error);
  EXPECT_THROW(softmax_cross_entropy(Tensor::zeros({0, 5}), Tensor::zeros({0}, DType::i32)), Error);
  EXPECT_THROW(softmax(Tensor::zeros({3}, DType::i32)), Error);
  EXPECT_THROW(softmax(Tensor::scalar(1.f)), Error);
}

TEST(SoftmaxXent, NonContiguousLogits) {
  Tensor big = random_uniform({6, 9}, -2, 2, 81);
  Tensor logits = big.slice(1, 2, 7);  // [6, 5], row stride 9
  ASSERT_FALSE(logits.is_contiguous());
  const auto lv = random_labels(6, 5, 81);
  const Reference ref = reference(logits.contiguous(), lv);
  const float loss = softmax_cross_entropy(logits, Tensor::from_vector(lv, {6})).item<float>();
  EXPECT_NEAR(loss, ref.loss, kLossAtol + kLossRtol * ref.loss);
}

TEST(SoftmaxXent, Deterministic) {
  const int64_t n = 4099, k = 37;
  Tensor logits = random_uniform({n, k}, -8, 8, 91);
  Tensor labels = Tensor::from_vector(random_labels(n, k, 91), {n});
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

TEST(SoftmaxXent, Gradients) {
  Tensor logits = random_uniform({4, 5}, -2, 2, 101);
  Tensor labels = Tensor::from_vector<int32_t>({0, 4, 2, 2}, {4});
  logits.set_requires_grad(true);
  testing::gradcheck(
      [labels](const std::vector<Tensor>& in) { return softmax_cross_entropy(in[0], labels); },
      {logits});
  Tensor x = random_uniform({3, 6}, -2, 2, 102);
  x.set_requires_grad(true);
  testing::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); }, {x});
}

}  // namespace
}  // namespace tg
