// BatchSampler: every epoch is a permutation, batches straddle epochs, any step is computed
// directly, worker slices partition the global batch, and bad arguments throw.
#include "datasets/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "tests/testing/errors.h"

namespace tg::data {
namespace {

using tg::testing::expect_error_with;

// The example stream: positions [0, steps * B) from single-worker batches.
std::vector<int64_t> stream(const BatchSampler& s, int64_t steps) {
  std::vector<int64_t> out;
  for (int64_t t = 0; t < steps; ++t) {
    const std::vector<int64_t> b = s.indices(t);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] != i) return false;
  }
  return true;
}

TEST(BatchSampler, EachEpochIsAPermutationAndEpochsDiffer) {
  BatchSampler s(100, 10, 42);
  const std::vector<int64_t> st = stream(s, 30);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    epochs.emplace_back(st.begin() + e * 100, st.begin() + (e + 1) * 100);
    EXPECT_TRUE(is_permutation_of_range(epochs.back(), 100)) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epochs[0], identity);
}

TEST(BatchSampler, DeterministicInSeedAndIndependentOfQueryOrder) {
  BatchSampler a(1000, 64, 7), b(1000, 64, 7), c(1000, 64, 8);
  EXPECT_EQ(a.indices(3), b.indices(3));
  EXPECT_NE(a.indices(3), c.indices(3));
  // Resume: step 500 (epoch 32) computed directly equals the value after visiting other epochs.
  const std::vector<int64_t> direct = a.indices(500);
  for (int64_t t : {0, 17, 499, 501, 900, 15}) b.indices(t);
  EXPECT_EQ(b.indices(500), direct);
}

TEST(BatchSampler, BatchesStraddleEpochBoundaries) {
  BatchSampler s(10, 4, 3);
  const std::vector<int64_t> st = stream(s, 10);  // 40 positions = 4 epochs
  for (int e = 0; e < 4; ++e) {
    EXPECT_TRUE(is_permutation_of_range({st.begin() + 10 * e, st.begin() + 10 * (e + 1)}, 10));
  }
  // Step 2 = positions 8..11: the last two of epoch 0 and the first two of epoch 1.
  BatchSampler fresh(10, 4, 3);
  EXPECT_EQ(fresh.indices(2), std::vector<int64_t>(st.begin() + 8, st.begin() + 12));
  EXPECT_DOUBLE_EQ(s.epoch(5), 2.0);
  EXPECT_DOUBLE_EQ(s.epoch(3), 1.2);
}

TEST(BatchSampler, BatchLargerThanTheDatasetSpansSeveralEpochs) {
  BatchSampler s(5, 12, 9);
  const std::vector<int64_t> st = stream(s, 5);  // 60 positions = 12 epochs
  for (int e = 0; e < 12; ++e) {
    EXPECT_TRUE(is_permutation_of_range({st.begin() + 5 * e, st.begin() + 5 * (e + 1)}, 5));
  }
}

TEST(BatchSampler, NoShuffleIsTheIdentityStream) {
  BatchSampler s(7, 3, 1, /*shuffle=*/false);
  const std::vector<int64_t> st = stream(s, 7);
  for (size_t p = 0; p < st.size(); ++p) EXPECT_EQ(st[p], static_cast<int64_t>(p % 7));
}

TEST(BatchSampler, WorkerSlicesAreDisjointAndCoverTheGlobalBatch) {
  for (int n : {1, 2, 4, 8}) {
    BatchSampler s(100, 32, 11);
    for (int64_t step : {0, 3, 4, 57}) {  // step 3 straddles epochs 0 and 1
      const std::vector<int64_t> global = s.indices(step);
      std::vector<int64_t> joined;
      for (int w = 0; w < n; ++w) {
        const std::vector<int64_t> slice = s.indices(step, w, n);
        EXPECT_EQ(static_cast<int64_t>(slice.size()), 32 / n);
        EXPECT_EQ(s.first_position(step, w, n), static_cast<uint64_t>(step * 32 + w * (32 / n)));
        joined.insert(joined.end(), slice.begin(), slice.end());
      }
      EXPECT_EQ(joined, global) << "N=" << n << " step " << step;
      // Disjoint: a global batch of 32 <= 100 examples that does not straddle has no repeats.
      if (step != 3) {
        EXPECT_EQ(std::set<int64_t>(joined.begin(), joined.end()).size(), joined.size());
      }
    }
  }
}

// Fisher-Yates must make all 24 orders of 4 elements equally likely. 24000 epochs: each count
// is Binomial(24000, 1/24), mean 1000, sd 31; the band +-160 (5.2 sd) gives a false-alarm rate
// below 1e-5 over the 24 counts.
TEST(BatchSampler, PermutationsAreUniform) {
  BatchSampler s(4, 4, 2024);
  std::map<std::vector<int64_t>, int> counts;
  for (int64_t e = 0; e < 24000; ++e) ++counts[s.indices(e)];
  EXPECT_EQ(counts.size(), 24u);
  for (const auto& [perm, c] : counts) EXPECT_NEAR(c, 1000, 160);
}

TEST(BatchSampler, BadArgumentsThrow) {
  expect_error_with([] { BatchSampler(0, 4, 1); }, {"size 0"});
  expect_error_with([] { BatchSampler(10, 0, 1); }, {"batch 0"});
  BatchSampler s(10, 6, 1);
  expect_error_with([&] { s.indices(0, 2, 2); }, {"worker 2", "< 2"});
  expect_error_with([&] { s.indices(0, -1, 2); }, {"worker -1"});
  expect_error_with([&] { s.indices(0, 0, 4); }, {"6", "4 workers"});
  expect_error_with([&] { s.indices(0, 0, 0); }, {"num_workers 0"});
  expect_error_with([&] { s.indices(-1); }, {"step -1"});
  expect_error_with([&] { s.first_position(0, 0, 4); }, {"not divisible"});
}

}  // namespace
}  // namespace tg::data
