// Figure 2's histograms (terngrad/analysis/histograms.h): binning and grid counting on known
// values, the four panels on gradients whose codes are deterministic (|g| = s or 0), the mean and
// code frequencies of a Gaussian gradient against their expectations, and the errors.
#include "terngrad/analysis/histograms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

Tensor from(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

int64_t total(const std::vector<int64_t>& c) {
  return std::accumulate(c.begin(), c.end(), int64_t{0});
}

TEST(Histograms, BinsKnownValues) {
  // Width 0.5 over [-1, 1]: -1 -> bin 0, -0.5 -> 1, 0 and 0.49 -> 2, 1 (the upper edge) -> 3.
  const std::vector<float> x = {-1.0f, -0.5f, 0.0f, 0.49f, 1.0f};
  const Histogram h = bin_values(x, -1.0, 1.0, 4);
  EXPECT_EQ(h.counts, (std::vector<int64_t>{1, 1, 2, 1}));
  EXPECT_EQ(h.lo, -1.0);
  EXPECT_EQ(h.hi, 1.0);
  expect_error_with([] { bin_values(std::vector<float>{1.5f}, -1, 1, 4); }, {"1.5"});
  expect_error_with([] { bin_values(std::vector<float>{NAN}, -1, 1, 4); }, {"index 0"});
  expect_error_with([] { bin_values({}, 1, 1, 4); }, {"lo < hi"});
  expect_error_with([] { bin_values({}, -1, 1, 0); }, {"bins"});
}

TEST(Histograms, GridCountsKnownValues) {
  const std::vector<float> x = {-0.5f, 0.0f, 0.25f, 0.25f, 0.5f};
  const GridCounts g = grid_counts(x, 0.25, 2);
  EXPECT_EQ(g.counts, (std::vector<int64_t>{1, 0, 1, 2, 1}));
  EXPECT_EQ(g.level(-2), -0.5);
  EXPECT_EQ(grid_counts(std::vector<float>{0, 0}, 0.0, 1).counts, (std::vector<int64_t>{0, 2, 0}));
  expect_error_with([] { grid_counts(std::vector<float>{0.1f}, 0.25, 2); }, {"not on the grid"});
  expect_error_with([] { grid_counts(std::vector<float>{0.75f}, 0.25, 2); }, {"|k| <= 2"});
  expect_error_with([] { grid_counts(std::vector<float>{0.5f}, 0.0, 1); }, {"index 0"});
}

// Elements with |g| equal to the shared scaler are kept with probability 1, zeros never: every
// code is known. No clipping (c = 0): s = max over workers of max|g| = 2.
TEST(Histograms, DeterministicCodesGiveExactPanels) {
  const std::vector<GradSlot> layout = {{"a", 0, 6}, {"b", 6, 2}};
  CompressionOptions o;
  o.clip = 0;
  const std::vector<Tensor> g = {from({2, -2, 0, 0, 2, 1, /*b*/ 1, 1}),
                                 from({2, 2, -2, 0, 0, -2, /*b*/ 1, 1})};
  // Worker 0's a: 2, -2, 0, 0, 2 are deterministic; the 1 is kept with probability 1/2. Use
  // worker 1, whose a is all ±2 or 0.
  const auto hs = figure2_histograms(g, o, layout, {0}, 1, 0, 4);
  ASSERT_EQ(hs.size(), 1u);
  const TensorHistograms& h = hs[0];
  EXPECT_EQ(h.tensor, "a");
  EXPECT_EQ(h.numel, 6);
  EXPECT_EQ(h.scaler, 2.0f);
  // (a) over ±2 in 4 bins of width 1: -2 -> 0; 0 -> 2 (three of them); 2 -> 3 (two).
  EXPECT_EQ(h.original.counts, (std::vector<int64_t>{2, 0, 2, 2}));
  EXPECT_EQ(h.clipped.counts, h.original.counts);  // nothing beyond s = 2
  // (c) worker 1's codes: -1 twice, 0 twice, +1 twice.
  EXPECT_EQ(h.ternary.step, 2.0);
  EXPECT_EQ(h.ternary.counts, (std::vector<int64_t>{2, 2, 2}));
  // (d) the average on (2/2){-2..2}: worker 0's codes are +1, -1, 0, 0, +1, (0 or +1).
  // Sums: 2, 0, -1, 0, 1, and -1 or 0 for the last.
  EXPECT_EQ(h.averaged.step, 1.0);
  EXPECT_EQ(h.averaged.kmax, 2);
  const auto& d = h.averaged.counts;
  EXPECT_EQ(d[4], 1);  // k = +2
  EXPECT_EQ(d[3], 1);  // k = +1
  EXPECT_EQ(d[0], 0);  // k = -2 never
  EXPECT_EQ(d[1] + d[2], 4);
  EXPECT_TRUE(d[1] == 1 || d[1] == 2) << d[1];
}

// A Gaussian gradient on 4 workers, clipping at 2.5 sigma, seed fixed: the panels' totals, the
// clipped tail in the extreme bins, and the code frequencies against their expectation.
TEST(Histograms, GaussianPanelsMatchExpectations) {
  constexpr int64_t n = 200000;
  constexpr int kWorkers = 4;
  const std::vector<GradSlot> layout = {{"w", 0, n}};
  std::vector<Tensor> g;
  for (int w = 0; w < kWorkers; ++w) {
    Tensor t = Tensor::empty({n});
    init::normal_(t, 0.0f, 0.01f, 42, rng_stream(RngPurpose::test, w));
    g.push_back(t);
  }
  CompressionOptions o;  // clip 2.5, sharing max
  const int bins = 51;
  const auto h = figure2_histograms(g, o, layout, {0}, 2, 7, bins)[0];
  for (const auto* c :
       {&h.original.counts, &h.clipped.counts, &h.ternary.counts, &h.averaged.counts})
    EXPECT_EQ(total(*c), n);
  // s = max over workers of 2.5 sigma_w, about 0.025.
  EXPECT_NEAR(h.scaler, 0.025, 0.0005);
  EXPECT_FLOAT_EQ(static_cast<float>(h.clipped.hi), h.scaler);
  // Worker 2's elements beyond s are clipped to ±s and sit in the extreme bins.
  const float* g2 = g[2].data<float>();
  int64_t above = 0, below = 0;
  double keep = 0;
  for (int64_t i = 0; i < n; ++i) {
    above += g2[i] >= h.scaler;
    below += g2[i] <= -h.scaler;
    keep += std::min(1.0, std::fabs(static_cast<double>(g2[i])) / h.scaler);
  }
  EXPECT_GT(above, 0);
  EXPECT_GE(h.clipped.counts[bins - 1], above);
  EXPECT_GE(h.clipped.counts[0], below);
  // Non-zero codes: a sum of independent Bernoullis with mean `keep`; 5 standard deviations.
  const double nonzero = static_cast<double>(h.ternary.counts[0] + h.ternary.counts[2]);
  EXPECT_NEAR(nonzero, keep, 5 * std::sqrt(keep));
  // The averaged gradient's levels are symmetric around 0 in expectation; its mean over the
  // elements is the workers' mean clipped gradient's, within 5 standard deviations of the
  // codes' noise (each element's code variance <= 1, so the sum's s.d. <= s/N * sqrt(N n)).
  double avg_sum = 0, clipped_sum = 0;
  for (int k = -kWorkers; k <= kWorkers; ++k)
    avg_sum += h.averaged.level(k) * h.averaged.counts[k + kWorkers];
  for (int w = 0; w < kWorkers; ++w)
    for (int64_t i = 0; i < n; ++i)
      clipped_sum += std::clamp(g[w].data<float>()[i], -h.scaler, h.scaler) / kWorkers;
  EXPECT_NEAR(avg_sum, clipped_sum, 5 * h.scaler / kWorkers * std::sqrt(kWorkers * n));
  // The averaged gradient reaches the extreme levels (every worker +1 on a large element).
  EXPECT_GT(h.averaged.counts[0], 0);
  EXPECT_GT(h.averaged.counts[2 * kWorkers], 0);
}

TEST(Histograms, Errors) {
  const std::vector<GradSlot> layout = {{"small", 0, 3}, {"big", 3, 5}};
  const std::vector<Tensor> g = {from({1, 2, 3, 4, 5, 6, 7, 8})};
  CompressionOptions o;
  o.min_size = 4;
  expect_error_with([&] { figure2_histograms(g, o, layout, {0}, 0, 0, 10); },
                    {"'small' is not ternarized"});
  expect_error_with([&] { figure2_histograms(g, o, layout, {1}, 1, 0, 10); }, {"worker 1"});
  CompressionOptions none = o;
  none.scaler_sharing = ::tg::tern::ScalerSharing::none;
  expect_error_with([&] { figure2_histograms(g, none, layout, {1}, 0, 0, 10); },
                    {"scaler_sharing"});
  EXPECT_EQ(figure2_histograms(g, o, layout, {1}, 0, 0, 10)[0].numel, 5);
}

}  // namespace
}  // namespace tg::tern
