// Synthetic dataset: shapes, determinism, split independence, noise statistics and that the
// classes are separable (what the training tests rely on).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "datasets/dataset.h"
#include "tests/testing/errors.h"

namespace tg::data {
namespace {

using tg::testing::expect_error_with;

DataOptions synth(int64_t size = 200, int64_t channels = 1, int64_t image = 0, int64_t classes = 10,
                  uint64_t seed = 1) {
  DataOptions o;
  o.name = "synthetic";
  o.synthetic_size = size;
  o.synthetic_channels = channels;
  o.image_size = image;
  o.synthetic_classes = classes;
  o.synthetic_seed = seed;
  return o;
}

std::vector<float> load(const Dataset& ds, const std::vector<int64_t>& idx,
                        std::vector<int32_t>* labels) {
  const DatasetInfo& in = ds.info();
  std::vector<float> x(idx.size() * in.channels * in.height * in.width);
  labels->assign(idx.size(), -1);
  ds.load(idx, true, 5, 0, x.data(), labels->data());
  return x;
}

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(Synthetic, InfoFollowsTheOptions) {
  auto d = open_dataset(synth(), Split::train);
  EXPECT_EQ(d->info().size, 200);
  EXPECT_EQ(d->info().channels, 1);
  EXPECT_EQ(d->info().height, 28);
  EXPECT_EQ(d->info().width, 28);
  EXPECT_EQ(d->info().num_classes, 10);
  auto e = open_dataset(synth(50, 3, 8, 4), Split::test);
  EXPECT_EQ(e->info().size, 50);
  EXPECT_EQ(e->info().channels, 3);
  EXPECT_EQ(e->info().height, 8);
  EXPECT_EQ(e->info().num_classes, 4);
}

TEST(Synthetic, DeterministicAndSplitsDifferInNoiseOnly) {
  auto a = open_dataset(synth(), Split::train);
  auto b = open_dataset(synth(), Split::train);
  auto c = open_dataset(synth(200, 1, 0, 10, 2), Split::train);
  auto t = open_dataset(synth(), Split::test);
  std::vector<int32_t> la, lb, lc, lt;
  const std::vector<int64_t> idx = {0, 13, 199};
  const std::vector<float> xa = load(*a, idx, &la), xb = load(*b, idx, &lb);
  const std::vector<float> xc = load(*c, idx, &lc), xt = load(*t, idx, &lt);
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
  EXPECT_NE(xa, xt);
  EXPECT_EQ(la, (std::vector<int32_t>{0, 3, 9}));  // label = index mod classes
  EXPECT_EQ(la, lt);
  // An example does not depend on the batch it is loaded in.
  std::vector<int32_t> l1;
  const std::vector<float> x1 = load(*a, {13}, &l1);
  EXPECT_EQ(x1, std::vector<float>(xa.begin() + 784, xa.begin() + 2 * 784));
}

// Two examples of one class differ by noise only: per pixel, diff / sqrt(2) ~ N(0, 0.5^2).
// Over 20 pairs x 3*16*16 pixels (15360 samples) the sample std has relative sd ~0.6%; the 3%
// band is 5 sd.
TEST(Synthetic, NoiseHasTheDocumentedStd) {
  auto d = open_dataset(synth(400, 3, 16, 10), Split::train);
  std::vector<int32_t> l;
  const std::vector<float> x = load(*d, range(400), &l);
  const int64_t n = 3 * 16 * 16;
  double sum_sq = 0.0, count = 0.0;
  for (int64_t i = 0; i < 20; ++i) {  // examples i and i + 10 share a class
    for (int64_t p = 0; p < n; ++p) {
      const double diff = x[i * n + p] - x[(i + 10) * n + p];
      sum_sq += diff * diff / 2.0;
      count += 1.0;
    }
  }
  EXPECT_NEAR(std::sqrt(sum_sq / count), 0.5, 0.015);
}

// Nearest class mean fitted on train classifies the test split almost perfectly: the data is
// learnable. With 8x8x1 images the class means are 1.3 noise-sd-units apart per pixel x 8
// pixels: error rates are far below the 5% allowed.
TEST(Synthetic, ClassesAreSeparableAcrossSplits) {
  const int64_t k = 10, n = 64;
  auto train = open_dataset(synth(500, 1, 8, k), Split::train);
  auto test = open_dataset(synth(200, 1, 8, k), Split::test);
  std::vector<int32_t> ltr, lte;
  const std::vector<float> xtr = load(*train, range(500), &ltr);
  const std::vector<float> xte = load(*test, range(200), &lte);
  std::vector<double> mean(k * n, 0.0);
  std::vector<int> count(k, 0);
  for (int64_t i = 0; i < 500; ++i) {
    ++count[ltr[i]];
    for (int64_t p = 0; p < n; ++p) mean[ltr[i] * n + p] += xtr[i * n + p];
  }
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t p = 0; p < n; ++p) mean[c * n + p] /= count[c];
  }
  int correct = 0;
  for (int64_t i = 0; i < 200; ++i) {
    int best = -1;
    double best_d = 1e300;
    for (int64_t c = 0; c < k; ++c) {
      double d = 0.0;
      for (int64_t p = 0; p < n; ++p) d += std::pow(xte[i * n + p] - mean[c * n + p], 2);
      if (d < best_d) best_d = d, best = static_cast<int>(c);
    }
    correct += best == lte[i];
  }
  EXPECT_GE(correct, 190);
}

TEST(Synthetic, BadOptionsAndIndicesThrow) {
  expect_error_with([] { open_dataset(synth(0), Split::train); }, {"synthetic_size 0"});
  expect_error_with([] { open_dataset(synth(10, 0), Split::train); }, {"synthetic_channels 0"});
  expect_error_with([] { open_dataset(synth(10, 1, 0, 0), Split::train); },
                    {"synthetic_classes 0"});
  auto d = open_dataset(synth(10), Split::train);
  std::vector<float> x(784);
  int32_t y;
  const int64_t bad = -1;
  expect_error_with([&] { d->load({&bad, 1}, false, 0, 0, x.data(), &y); }, {"index -1"});
}

}  // namespace
}  // namespace tg::data
