// The norm-preserving rescale (CompressionOptions::rescale): each worker sends, beside each
// tensor's scaler candidate, the length ratio ||clip(g)|| / ||g|| at its own scaler; the tensor's
// aggregate is divided by the largest ratio over the workers. Checked: the meta (two floats per
// tensor, the ratio computed exactly), that for one worker the expected aggregate has the
// gradient's own length where plain TernGrad's is shortened by clipping (statistical, 4,000
// steps, tolerance stated), that integer sums stay exact (one scale per tensor), and the
// refusal without a shared scaler. Exact aggregation across ranks:
// tests/terngrad/aggregate_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/core/philox.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"
#include "tests/terngrad/emulated_reference.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

std::vector<GradSlot> layout() {
  return {{"w", 0, 1500}, {"b", 1500, 16}};
}
constexpr int64_t kTotal = 1516;

// Roughly normal, every 37th element 8 sigma out (clipped at 2.5 sigma).
std::vector<float> values(int worker) {
  std::vector<float> v(kTotal);
  for (int64_t i = 0; i < kTotal; ++i) {
    const float u1 = uniform01(philox_word(21, 10 + worker, 2 * i)) + 1e-7f;
    const float u2 = uniform01(philox_word(21, 10 + worker, 2 * i + 1));
    float x = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    if (i % 37 == 0) x += x >= 0 ? 8.0f : -8.0f;
    v[i] = 0.01f * (worker + 1) * x;
  }
  return v;
}

CompressionOptions options(bool rescale) {
  CompressionOptions o;
  o.method = Method::terngrad;
  o.rescale = rescale;
  return o;
}

double norm(const std::vector<double>& v, int64_t b, int64_t e) {
  double q = 0;
  for (int64_t i = b; i < e; ++i) q += v[i] * v[i];
  return std::sqrt(q);
}

TEST(Rescale, MetaIsTheScalerAndTheLengthRatioOfTheClippedGradient) {
  auto c = make_compressor(options(true), layout());
  EXPECT_EQ(c->meta_per_slot(), 2);
  const std::vector<float> g = values(0);
  std::vector<float> meta(c->num_meta());
  c->local_meta(Tensor::from_vector(g, {kTotal}), meta.data());
  for (size_t t = 0; t < 2; ++t) {
    const GradSlot sl = layout()[t];  // a copy: layout() returns a temporary
    TensorStats st;
    tensor_stats_cpu(g.data() + sl.offset, sl.numel, &st);
    const float s = terngrad_scaler(st, 2.5);
    EXPECT_EQ(meta[2 * t], s);
    double clipped = 0;
    for (int64_t i = sl.offset; i < sl.offset + sl.numel; ++i) {
      const double h = std::min<double>(std::fabs(g[i]), s);
      clipped += h * h;
    }
    EXPECT_NEAR(meta[2 * t + 1], std::sqrt(clipped / st.sum_sq), 1e-6);
    if (t == 0) {
      EXPECT_LT(meta[2 * t + 1], 0.95f);  // the outliers are clipped
    }
  }
  auto plain = make_compressor(options(false), layout());
  EXPECT_EQ(plain->meta_per_slot(), 1);
}

TEST(Rescale, OneWorkersExpectedAggregateKeepsTheGradientsLength) {
  // Mean of the aggregate over 4,000 steps (fresh codes each step) for a fixed gradient: with
  // rescale its length is ||g|| (the ternary codes are unbiased for clip(g), times 1 / ratio);
  // without, ||clip(g)||. The sampling noise of the mean inflates its length by well under 1%
  // here (per-element variance <= s^2 / 4 over 4,000 draws).
  const std::vector<float> g = values(0);
  const Tensor gt = Tensor::from_vector(g, {kTotal});
  std::vector<double> gd(g.begin(), g.end());
  const double want = norm(gd, 0, 1500);
  constexpr int kSteps = 4000;
  std::vector<float> meta(4);  // w's scaler and length ratio, b's
  make_compressor(options(true), layout())->local_meta(gt, meta.data());
  for (bool rescale : {false, true}) {
    auto c = make_compressor(options(rescale), layout());
    std::vector<double> mean(kTotal, 0.0);
    Tensor out = Tensor::empty({kTotal});
    for (int64_t step = 0; step < kSteps; ++step) {
      aggregate_local(*c, std::span<const Tensor>(&gt, 1), step, out);
      const std::vector<float> o = out.to_vector<float>();
      for (int64_t i = 0; i < kTotal; ++i) mean[i] += o[i] / static_cast<double>(kSteps);
    }
    const double ratio = norm(mean, 0, 1500) / want;
    if (rescale)
      EXPECT_NEAR(ratio, 1.0, 0.01);
    else
      EXPECT_NEAR(ratio, meta[1], 0.01);  // shortened to the clipped length
  }
}

TEST(Rescale, SharedRatioIsTheLargestAndSumsStayOneScalePerTensor) {
  auto c = make_compressor(options(true), layout());
  std::vector<Tensor> g;
  for (int w = 0; w < 3; ++w) g.push_back(Tensor::from_vector(values(w), {kTotal}));
  const std::vector<float> shared = shared_meta(*c, g);
  float largest = 0;
  for (int w = 0; w < 3; ++w) {
    std::vector<float> m(c->num_meta());
    c->local_meta(g[w], m.data());
    largest = std::max(largest, m[1]);
  }
  EXPECT_EQ(shared[1], largest);
  Tensor out = Tensor::empty({kTotal}), plain_out = Tensor::empty({kTotal});
  aggregate_local(*c, g, 7, out);
  auto plain = make_compressor(options(false), layout());
  aggregate_local(*plain, g, 7, plain_out);
  // The same codes (same seed, step, workers), scaled by s / (3 ratio) instead of s / 3.
  const std::vector<float> a = out.to_vector<float>(), b = plain_out.to_vector<float>();
  const float unit = shared[0] / (3.0f * shared[1]), plain_unit = shared[0] / 3.0f;
  for (int64_t i = 0; i < 1500; ++i) {
    const float k = std::round(b[i] / plain_unit);
    ASSERT_EQ(b[i], k * plain_unit) << i;
    ASSERT_EQ(a[i], k * unit) << i;
  }
}

TEST(Rescale, NeedsASharedScaler) {
  CompressionOptions o = options(true);
  o.scaler_sharing = ScalerSharing::none;
  expect_error_with([&] { make_compressor(o, layout()); },
                    {"compression.rescale", "scaler_sharing", "max"});
}

}  // namespace
}  // namespace tg::tern
