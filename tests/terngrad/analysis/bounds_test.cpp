// terngrad/analysis/bounds.h on tensors with hand-computed values: norms, the bound ratio,
// variance, sparsity, clipping statistics, layer- versus model-wide aggregation; the scaler and the
// ternarized slots agree with the compressor's; realized sparsity comes from the compressor's
// own codes and matches the expectation statistically.
#include "terngrad/analysis/bounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <span>
#include <vector>

#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

// The hand-computed values are exact in double (small integers and halves); sums of a handful
// of f32 inputs leave only double rounding.
constexpr double kExact = 1e-12;
// Scalers are f32 (as the compressor's): values derived from them carry f32 rounding.
constexpr double kF32 = 1e-6;

std::span<const float> span_of(const std::vector<float>& v) {
  return {v.data(), v.size()};
}

TensorStats stats_of(const std::vector<float>& v) {
  TensorStats st;
  tensor_stats_cpu(v.data(), static_cast<int64_t>(v.size()), &st);
  return st;
}

// g = [3, -4]: ||g||^2 = 25, ||g||_1 = 7, ||g||_inf = 4; mean -0.5, E[g^2] = 12.5, so the
// population sigma is sqrt(12.5 - 0.25) = 3.5.
const std::vector<float> kG = {3.0f, -4.0f};

TEST(TernGradScaler, MaxWithoutClippingAndCSigmaWith) {
  const TensorStats st = stats_of(kG);
  EXPECT_EQ(terngrad_scaler(st, 0.0), 4.0f);
  EXPECT_EQ(terngrad_scaler(st, 1.0), 3.5f);
  EXPECT_EQ(terngrad_scaler(st, 2.5), 8.75f);
  expect_error_with([&] { terngrad_scaler(st, -1.0); }, {"clip", "-1"});
}

TEST(TensorBoundStats, UnclippedIsThePapersRatio) {
  const BoundStats b = tensor_bound_stats(span_of(kG), 4.0f);
  EXPECT_EQ(b.numel, 2);
  EXPECT_NEAR(b.g_sq, 25.0, kExact);
  EXPECT_NEAR(b.g_l1, 7.0, kExact);
  EXPECT_NEAR(b.g_inf, 4.0, kExact);
  EXPECT_NEAR(b.inf_l1(), 28.0, kExact);  // ||g||_inf ||g||_1
  EXPECT_NEAR(b.inf_l1_ratio(), 28.0 / 25.0, kExact);
  EXPECT_NEAR(b.h_sq, 25.0, kExact);           // nothing clipped: h = g
  EXPECT_NEAR(b.second_moment, 28.0, kExact);  // s ||g||_1 with s = ||g||_inf
  EXPECT_NEAR(b.bound_ratio(), 28.0 / 25.0, kExact);
  EXPECT_NEAR(b.variance(), 3.0, kExact);              // 28 - 25 = sum |g|(s - |g|) = 3*1 + 4*0
  EXPECT_NEAR(b.sparsity(), 1.0 - 7.0 / 8.0, kExact);  // keep probs 3/4 and 1
  EXPECT_EQ(b.clipped, 0);
  EXPECT_EQ(b.clipped_fraction(), 0.0);
  EXPECT_EQ(b.length_ratio(), 1.0);
  EXPECT_EQ(b.angle_deg(), 0.0);
  EXPECT_TRUE(std::isnan(b.realized_sparsity()));  // not drawn
}

TEST(TensorBoundStats, ClippedAtOneSigma) {
  // s = 1 * sigma = 3.5: h = [3, -3.5].
  const BoundStats b = tensor_bound_stats(span_of(kG), 3.5f);
  EXPECT_NEAR(b.g_sq, 25.0, kExact);  // the raw gradient's norms are unchanged
  EXPECT_NEAR(b.inf_l1(), 28.0, kExact);
  EXPECT_NEAR(b.h_sq, 9.0 + 12.25, kExact);
  EXPECT_NEAR(b.h_l1, 6.5, kExact);
  EXPECT_NEAR(b.g_dot_h, 9.0 + 14.0, kExact);
  EXPECT_NEAR(b.second_moment, 3.5 * 6.5, kExact);
  EXPECT_NEAR(b.bound_ratio(), 22.75 / 21.25, kExact);
  EXPECT_NEAR(b.variance(), 22.75 - 21.25, kExact);  // 3 * 0.5 + 3.5 * 0
  EXPECT_NEAR(b.sparsity(), 1.0 - (3.0 / 3.5 + 1.0) / 2.0, kExact);
  EXPECT_EQ(b.clipped, 1);
  EXPECT_EQ(b.clipped_fraction(), 0.5);
  EXPECT_NEAR(b.length_ratio(), std::sqrt(21.25 / 25.0), kExact);
  const double angle = std::acos(23.0 / (5.0 * std::sqrt(21.25))) * 180.0 / std::numbers::pi;
  EXPECT_NEAR(b.angle_deg(), angle, 1e-9);  // ~4.9 degrees
  // The bound ratio is relative to the clipped gradient, so it stays >= 1.
  EXPECT_GE(b.bound_ratio(), 1.0);
}

TEST(TensorBoundStats, AllZeroGradient) {
  const std::vector<float> z = {0.0f, 0.0f, 0.0f};
  const BoundStats b = tensor_bound_stats(span_of(z), terngrad_scaler(stats_of(z), 2.5));
  EXPECT_EQ(b.scaler, 0.0);
  EXPECT_EQ(b.sparsity(), 1.0);  // s = 0: all-zero codes
  EXPECT_TRUE(std::isnan(b.bound_ratio()));
  EXPECT_TRUE(std::isnan(b.inf_l1_ratio()));
  EXPECT_TRUE(std::isnan(b.angle_deg()));
  expect_error_with([&] { tensor_bound_stats(span_of(z), -1.0f); }, {"scaler", ">= 0"});
}

// Three slots: a = [3, -4], b = [1, -1, 0, 2], and c (one element, sent in fp32 here).
const std::vector<GradSlot> kLayout = {{"a", 0, 2}, {"b", 2, 4}, {"c", 6, 1}};
const std::vector<float> kFlat = {3.0f, -4.0f, 1.0f, -1.0f, 0.0f, 2.0f, 100.0f};
const std::vector<bool> kTern = {true, true, false};

TEST(BoundRows, LayerScalingWithoutClipping) {
  const auto rows = bound_rows(span_of(kFlat), kLayout, kTern, Scaling::layer, 0.0);
  ASSERT_EQ(rows.size(), 3u);  // a, b, model: c is not ternarized
  EXPECT_EQ(rows[0].tensor, "a");
  EXPECT_EQ(rows[1].tensor, "b");
  EXPECT_EQ(rows[2].tensor, "model");
  for (const auto& r : rows) EXPECT_EQ(r.scaling, Scaling::layer);
  EXPECT_EQ(rows[0].stats.scaler, 4.0);
  EXPECT_EQ(rows[1].stats.scaler, 2.0);
  EXPECT_NEAR(rows[1].stats.bound_ratio(), 2.0 * 4.0 / 6.0, kExact);
  const BoundStats& m = rows[2].stats;
  EXPECT_EQ(m.numel, 6);
  EXPECT_NEAR(m.g_sq, 31.0, kExact);
  EXPECT_NEAR(m.inf_l1(), 4.0 * 11.0, kExact);                  // of the concatenation
  EXPECT_NEAR(m.second_moment, 4.0 * 7.0 + 2.0 * 4.0, kExact);  // sum_l s_l ||g_l||_1
  EXPECT_NEAR(m.bound_ratio(), 36.0 / 31.0, kExact);
  EXPECT_NEAR(m.sparsity(), 1.0 - (7.0 / 4.0 + 4.0 / 2.0) / 6.0, kExact);
  EXPECT_EQ(m.scaler, 4.0);  // the largest layer scaler
}

TEST(BoundRows, ModelScalingWithoutClippingIsInfL1) {
  const auto rows = bound_rows(span_of(kFlat), kLayout, kTern, Scaling::model, 0.0);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].stats.scaler, 4.0);
  EXPECT_EQ(rows[1].stats.scaler, 4.0);  // b shares a's max: its keep probabilities halve
  EXPECT_NEAR(rows[1].stats.bound_ratio(), 4.0 * 4.0 / 6.0, kExact);
  const BoundStats& m = rows[2].stats;
  EXPECT_NEAR(m.second_moment, 4.0 * 11.0, kExact);
  // One scaler s = ||g||_inf for the model: exactly the paper's ||g||_inf ||g||_1 / ||g||^2.
  EXPECT_NEAR(m.bound_ratio(), 44.0 / 31.0, kExact);
  EXPECT_NEAR(m.bound_ratio(), m.inf_l1_ratio(), kExact);
  EXPECT_NEAR(m.sparsity(), 1.0 - (11.0 / 4.0) / 6.0, kExact);
  // Layer-wise scalers never do worse on the model than one shared scaler without clipping.
  const auto layer = bound_rows(span_of(kFlat), kLayout, kTern, Scaling::layer, 0.0);
  EXPECT_LT(layer[2].stats.bound_ratio(), m.bound_ratio());
}

TEST(BoundRows, ModelScalingWithClippingUsesTheConcatenationsSigma) {
  // sigma of [3, -4, 1, -1, 0, 2]: mean 1/6, E[g^2] = 31/6 -> var = 185/36.
  const double s = 1.0 * std::sqrt(185.0) / 6.0;  // ~2.267: clips 3 and -4
  const auto rows = bound_rows(span_of(kFlat), kLayout, kTern, Scaling::model, 1.0);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].clip, 1.0);
  for (const auto& r : rows) EXPECT_NEAR(r.stats.scaler, s, kF32 * s);
  const BoundStats& a = rows[0].stats;
  EXPECT_EQ(a.clipped, 2);
  EXPECT_NEAR(a.h_sq, 2 * s * s, 4 * kF32 * s * s);
  EXPECT_NEAR(a.bound_ratio(), 1.0, kF32);  // every element at +-s: no ternary variance
  const BoundStats& m = rows[2].stats;
  EXPECT_EQ(m.clipped, 2);
  EXPECT_NEAR(m.clipped_fraction(), 2.0 / 6.0, kExact);
  const double h_sq = 2 * s * s + 6.0, h_l1 = 2 * s + 4.0;  // b is untouched
  EXPECT_NEAR(m.h_sq, h_sq, kF32 * h_sq);
  EXPECT_NEAR(m.bound_ratio(), s * h_l1 / h_sq, kF32);
  EXPECT_NEAR(m.length_ratio(), std::sqrt(h_sq / 31.0), kF32);
  const double dot = 3 * s + 4 * s + 6.0;
  EXPECT_NEAR(m.angle_deg(), std::acos(dot / std::sqrt(31.0 * h_sq)) * 180.0 / std::numbers::pi,
              1e-3);
}

TEST(BoundRows, RejectsBadArguments) {
  expect_error_with(
      [&] {
        bound_rows(span_of(kFlat), kLayout, {true, true}, Scaling::layer, 0.0);
      },
      {"2 ternarized flags", "3 slots"});
  expect_error_with(
      [&] {
        bound_rows(span_of(kFlat), kLayout, {false, false, false}, Scaling::layer, 0.0);
      },
      {"no tensor is ternarized"});
  expect_error_with(
      [&] { bound_rows(span_of(kFlat).first(5), kLayout, kTern, Scaling::layer, 0.0); },
      {"slot 'b'", "outside the gradient of 5"});
  expect_error_with([&] { bound_rows(span_of(kFlat), kLayout, kTern, Scaling::model, -2.0); },
                    {"clip", "-2"});
}

// A small net's slots (conv w, conv b, fc w, fc b) with Gaussian gradients of different scales.
std::vector<GradSlot> net_layout() {
  return {{"conv/w", 0, 500}, {"conv/b", 500, 20}, {"fc/w", 520, 1003}, {"fc/b", 1523, 10}};
}
Tensor net_gradient(uint64_t seed) {
  Tensor t = Tensor::empty({1533});
  init::normal_(t, 0.001f, 0.05f, seed, rng_stream(RngPurpose::test, 1));
  float* p = t.data<float>();
  for (int64_t i = 520; i < 1533; ++i) p[i] *= 0.1f;  // the fc layer's gradients are smaller
  p[7] = 1.0f;                                        // one outlier in conv/w
  return t;
}

// The scaler and the excluded slots are the compressor's own: its shared-scaler meta is exactly
// terngrad_scaler of each ternarized slot and 0 for the slots it sends in fp32.
TEST(BoundsAgreeWithCompressor, ScalersAndTernarizedSlots) {
  const Tensor g = net_gradient(11);
  const std::vector<GradSlot> layout = net_layout();
  for (const double clip : {0.0, 2.5}) {
    for (const bool logits : {true, false}) {
      CompressionOptions o;
      o.method = ::tg::tern::Method::terngrad;
      o.clip = clip;
      o.min_size = 21;  // excludes conv/b (20) and fc/b (10)
      o.quantize_logits = logits;
      const auto comp = make_compressor(o, net_layout());
      std::vector<float> meta(comp->num_meta());
      comp->local_meta(g, meta.data());
      const std::vector<bool> tern = ternarized_slots(net_layout(), o);
      ASSERT_EQ(tern.size(), meta.size());
      EXPECT_EQ(tern, (std::vector<bool>{true, false, logits, false}));
      const auto rows =
          bound_rows({g.data<float>(), 1533}, net_layout(), tern, Scaling::layer, clip);
      size_t r = 0;
      for (size_t t = 0; t < meta.size(); ++t) {
        if (!tern[t]) {
          EXPECT_EQ(meta[t], 0.0f) << t;
          continue;
        }
        const GradSlot& sl = layout[t];
        TensorStats st;
        tensor_stats_cpu(g.data<float>() + sl.offset, sl.numel, &st);
        EXPECT_EQ(terngrad_scaler(st, clip), meta[t]) << sl.name << " clip " << clip;
        ASSERT_LT(r, rows.size());
        EXPECT_EQ(rows[r].tensor, sl.name);
        EXPECT_EQ(static_cast<float>(rows[r].stats.scaler), meta[t]) << sl.name;
        ++r;
      }
      EXPECT_EQ(rows.size(), r + 1);
    }
  }
}

// s >= |h_i| for every element, so s*|h_i| >= h_i^2 and bound_ratio >= 1 in every combination,
// tensor or model; clipping and layer scalers both lower the model's ratio on this gradient (an
// outlier in conv/w and a 10x smaller fc layer).
TEST(BoundRows, RatioAtLeastOneAndOrdered) {
  const Tensor g = net_gradient(12);
  const std::vector<bool> all(4, true);
  double model_ratio[2][2] = {};
  for (const Scaling sc : {Scaling::layer, Scaling::model}) {
    for (const double clip : {0.0, 2.5}) {
      const auto rows = bound_rows({g.data<float>(), 1533}, net_layout(), all, sc, clip);
      for (const auto& r : rows) {
        EXPECT_GE(r.stats.bound_ratio(), 1.0) << r.tensor;
        EXPECT_GE(r.stats.inf_l1_ratio(), 1.0) << r.tensor;
        EXPECT_GE(r.stats.sparsity(), 0.0);
        EXPECT_LE(r.stats.sparsity(), 1.0);
      }
      model_ratio[sc == Scaling::model][clip > 0] = rows.back().stats.bound_ratio();
    }
  }
  EXPECT_LT(model_ratio[0][0], model_ratio[1][0]);  // layer < model, no clipping
  EXPECT_LT(model_ratio[0][1], model_ratio[0][0]);  // clipped < unclipped, layer scalers
  EXPECT_LT(model_ratio[1][1], model_ratio[1][0]);  // clipped < unclipped, model scaler
}

// realized_sparsity counts the zeros of the codes the compressor itself sends: with
// scaler_sharing = none each slot's message is its f32 scaler then the packed codes, drawn from
// the stream of (step, worker, slot).
TEST(BoundRows, RealizedZerosAreTheCompressorsCodes) {
  const Tensor g = net_gradient(13);
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  o.clip = 2.5;
  o.scaler_sharing = ::tg::tern::ScalerSharing::none;
  o.seed = 99;
  const auto comp = make_compressor(o, net_layout());
  const int64_t step = 7;
  const int worker = 1;
  Tensor msg = Tensor::zeros({static_cast<int64_t>(comp->payload_bytes(step))}, DType::u8);
  comp->encode(g, nullptr, step, worker, msg);
  const RealizedCodes codes{o.seed, step, worker};
  const auto rows = bound_rows({g.data<float>(), 1533}, net_layout(), std::vector<bool>(4, true),
                               Scaling::layer, o.clip, &codes);
  const uint8_t* m = msg.data<uint8_t>();
  int64_t total_zeros = 0;
  for (size_t t = 0; t < 4; ++t) {
    const int64_t n = net_layout()[t].numel;
    float s = 0;
    std::memcpy(&s, m, sizeof s);
    EXPECT_EQ(s, static_cast<float>(rows[t].stats.scaler));
    std::vector<int32_t> c(n, 0);
    unpack_accumulate_cpu(m + sizeof(float), n, PackFormat::two_bit, c.data());
    const auto zeros = static_cast<int64_t>(std::count(c.begin(), c.end(), 0));
    EXPECT_EQ(rows[t].stats.zero_codes, zeros) << net_layout()[t].name;
    total_zeros += zeros;
    m += sizeof(float) + packed_bytes(PackFormat::two_bit, n);
  }
  EXPECT_EQ(rows[4].stats.zero_codes, total_zeros);
  EXPECT_NEAR(rows[4].stats.realized_sparsity(), total_zeros / 1533.0, kExact);
}

// On 200,000 Gaussian elements the realized zero fraction is a sum of independent Bernoulli
// draws with mean = the expected sparsity and sd = sqrt(sum p(1-p)) / n <= 0.5 / sqrt(n)
// = 0.0011; a 5 sd band has a false-alarm rate of 6e-7 (fixed seed: deterministic anyway).
TEST(RealizedSparsity, MatchesTheExpectation) {
  const int64_t n = 200000;
  Tensor t = Tensor::empty({n});
  init::normal_(t, 0.0f, 1.0f, 21, rng_stream(RngPurpose::test, 2));
  const std::span<const float> g(t.data<float>(), n);
  for (const double clip : {0.0, 2.5}) {
    TensorStats st;
    tensor_stats_cpu(g.data(), n, &st);
    const float s = terngrad_scaler(st, clip);
    BoundStats b = tensor_bound_stats(g, s);
    b.zero_codes = realized_zero_codes(g, s, 5, 77);
    EXPECT_NEAR(b.realized_sparsity(), b.sparsity(), 5 * 0.5 / std::sqrt(double(n))) << clip;
  }
  // For a Gaussian clipped at 2.5 sigma: 1.24% clipped; ||h|| / ||g|| ~ 0.989 and an angle of
  // ~2.7 degrees (derived). Tolerances: sampling error of n = 2e5 draws (clipped count sd
  // ~0.025 points) plus the tail's variability on the norm.
  TensorStats st;
  tensor_stats_cpu(g.data(), n, &st);
  const BoundStats b = tensor_bound_stats(g, terngrad_scaler(st, 2.5));
  EXPECT_NEAR(b.clipped_fraction(), 0.0124, 0.0015);
  EXPECT_NEAR(b.length_ratio(), 0.989, 0.003);
  EXPECT_NEAR(b.angle_deg(), 2.7, 0.3);
}

}  // namespace
}  // namespace tg::tern
