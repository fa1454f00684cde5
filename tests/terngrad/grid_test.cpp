// TernGrad's finer grids (CompressionOptions::levels = 4, 5; terngrad/grid_kernels.h): the packed
// format byte by byte, unbiasedness within [-s, s] (statistical, fixed seeds, tolerance stated),
// a smaller variance than TernGrad's three levels at the same scaler, exact integer sums of
// workers sharing a scaler (the aggregate equals (s / ((L-1) N)) * an integer, independent of
// worker order), and the bytes on the wire. Exact aggregation across ranks is checked with every
// other method in tests/terngrad/aggregate_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "nn/core/philox.h"
#include "terngrad/compressor.h"
#include "terngrad/grid_kernels.h"
#include "tests/terngrad/emulated_reference.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

std::vector<int32_t> codes_of(const std::vector<float>& g, float s, int levels, uint64_t stream) {
  std::vector<uint8_t> packed(grid_packed_bytes(levels, static_cast<int64_t>(g.size())));
  grid_quantize_pack_cpu(g.data(), static_cast<int64_t>(g.size()), s, levels, 7, stream,
                         packed.data());
  std::vector<int32_t> acc(g.size(), 0);
  grid_unpack_accumulate_cpu(packed.data(), static_cast<int64_t>(g.size()), levels, acc.data());
  return acc;
}

TEST(Grid, PackedFormatAndBytes) {
  EXPECT_EQ(grid_packed_bytes(4, 0), 0u);
  EXPECT_EQ(grid_packed_bytes(4, 9), 3u);  // 4 per byte
  EXPECT_EQ(grid_packed_bytes(5, 9), 3u);  // 3 per byte
  EXPECT_EQ(grid_packed_bytes(5, 10), 4u);
  expect_error_with([] { grid_packed_bytes(3, 4); }, {"3 levels", "expected 4 or 5"});
  // Values on the grid points are exact (probability 1): g = -s, -s/3, s/3, s -> levels 0..3.
  const float s = 1.5f;
  std::vector<uint8_t> b(1);
  const std::vector<float> four = {-s, -s / 3, s / 3, s};
  grid_quantize_pack_cpu(four.data(), 4, s, 4, 1, 2, b.data());
  EXPECT_EQ(b[0], 0 | 1 << 2 | 2 << 4 | 3 << 6);
  // Five levels, 3 per byte: -s, 0, s/2 -> levels 0, 2, 3; the last byte's missing elements at 2.
  const std::vector<float> five = {-s, 0.0f, s / 2, s};
  std::vector<uint8_t> b5(2);
  grid_quantize_pack_cpu(five.data(), 4, s, 5, 1, 2, b5.data());
  EXPECT_EQ(b5[0], 0 + 5 * 2 + 25 * 3);
  EXPECT_EQ(b5[1], 4 + 5 * 2 + 25 * 2);
  std::vector<int32_t> acc(4, 0);
  grid_unpack_accumulate_cpu(b5.data(), 4, 5, acc.data());
  EXPECT_EQ(acc, (std::vector<int32_t>{-4, 0, 2, 4}));
  // Clipped values land on the end levels; s = 0 gives the middle level.
  EXPECT_EQ(codes_of({-9.0f, 9.0f}, 1.0f, 4, 3), (std::vector<int32_t>{-3, 3}));
  EXPECT_EQ(codes_of({0.0f, 0.0f}, 0.0f, 5, 3), (std::vector<int32_t>{0, 0}));
}

TEST(Grid, LevelsAreTheDocumentedRuleWithEachElementsPhiloxWord) {
  // The packing kernel shares one Philox block among 4 elements and draws 16 blocks at a time
  // (AVX2) in spans of 192 elements, several threads above 65,536; the bytes must be those of
  // the rule evaluated element by element with philox_word(seed, stream, i). Sizes: inside one
  // batch, a span and a batch plus a partial one, many spans with one thread and with several.
  for (int levels : {4, 5}) {
    for (int64_t n : {1, 5, 13, 64, 199, 1001, 40'001, 70'001}) {
      std::vector<float> g(n);
      for (int64_t i = 0; i < n; ++i) g[i] = (uniform01(philox_word(8, 9, i)) - 0.5f) * 3.0f;
      const float s = 1.2f, k = grid_scale(levels, s);
      const float special[] = {std::nanf(""), INFINITY, -INFINITY, -0.0f, s, -s, 1e-30f};
      for (int64_t i = 3; i < n; i += 11) g[i] = special[(i / 11) % 7];  // vector lanes too
      std::vector<uint8_t> got(grid_packed_bytes(levels, n)), want(got.size(), 0);
      grid_quantize_pack_cpu(g.data(), n, s, levels, 31, 77, got.data());
      const int per = levels == 4 ? 4 : 3;
      for (size_t b = 0; b < want.size(); ++b) {
        uint32_t v = 0, mul = 1;
        for (int t = 0; t < per; ++t, mul *= (levels == 4 ? 4 : 5)) {
          const int64_t i = static_cast<int64_t>(b) * per + t;
          const int lv = i < n ? grid_level(g[i], s, k, levels, philox_word(31, 77, i))
                               : (levels == 4 ? 0 : 2);
          v += mul * static_cast<uint32_t>(lv);
        }
        want[b] = static_cast<uint8_t>(v);
      }
      EXPECT_EQ(got, want) << "levels " << levels << ", n " << n;
    }
  }
}

TEST(Grid, UnbiasedWithinTheScalerAndLessNoisyThanThreeLevels) {
  // 64 values across [-s, s]; 20,000 independent draws (streams) each. The mean of the decoded
  // value (v * s / (L-1)) must be within 4 standard errors of g; the per-element variance must
  // match (g - a)(b - g) of the two neighbouring grid points within 5% (its sampling error at
  // 20,000 draws is < 2%), and sum below TernGrad's s|g| - g^2.
  const float s = 0.8f;
  constexpr int kN = 64, kDraws = 20000;
  std::vector<float> g(kN);
  for (int i = 0; i < kN; ++i) g[i] = s * (-1.0f + 2.0f * (static_cast<float>(i) + 0.37f) / kN);
  for (int levels : {4, 5}) {
    SCOPED_TRACE(levels);
    std::vector<double> sum(kN, 0), sum_sq(kN, 0);
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<int32_t> c = codes_of(g, s, levels, 1000 + d);
      for (int i = 0; i < kN; ++i) {
        const double v = c[i] * static_cast<double>(s) / (levels - 1);
        sum[i] += v;
        sum_sq[i] += v * v;
      }
    }
    double grid_var = 0, ternary_var = 0;
    for (int i = 0; i < kN; ++i) {
      const double mean = sum[i] / kDraws, var = sum_sq[i] / kDraws - mean * mean;
      const double step = 2.0 * s / (levels - 1);
      const double a = -s + std::floor((g[i] + s) / step) * step;
      const double want_var = (g[i] - a) * (a + step - g[i]);
      EXPECT_NEAR(mean, g[i], 4 * std::sqrt(want_var / kDraws) + 1e-6) << "element " << i;
      EXPECT_NEAR(var, want_var, 0.05 * want_var + 1e-6) << "element " << i;
      grid_var += var;
      ternary_var += s * std::fabs(g[i]) - static_cast<double>(g[i]) * g[i];
    }
    // Uniform g over [-s, s]: TernGrad's variance averages s^2 / 6; the 4-level grid's
    // (2s/3)^2 / 6, the 5-level's (s/2)^2 / 6.
    EXPECT_LT(grid_var, (levels == 4 ? 0.5 : 0.3) * ternary_var);
  }
}

std::vector<GradSlot> layout() {
  return {{"conv/w", 0, 301}, {"conv/b", 301, 5}, {"fc/w", 306, 1203}, {"fc/b", 1509, 13}};
}
constexpr int64_t kTotal = 1522;

Tensor gradient(int worker) {
  std::vector<float> v(kTotal);
  for (int64_t i = 0; i < kTotal; ++i)
    v[i] = (uniform01(philox_word(5, 40 + worker, i)) - 0.5f) * (worker + 1) *
           (i % 29 == 0 ? 6.0f : 1.0f);
  return Tensor::from_vector(v, {kTotal});
}

TEST(Grid, SharedScalerSumsAreExactIntegersInAnyOrderAndTheBytesAreAccounted) {
  for (int levels : {4, 5}) {
    SCOPED_TRACE(levels);
    CompressionOptions o;
    o.method = Method::terngrad;
    o.levels = levels;
    o.min_size = 8;  // conv/b goes as raw f32
    auto c = make_compressor(o, layout());
    // Bytes: the grid's packing per ternarized slot, raw floats for conv/b.
    const size_t want = grid_packed_bytes(levels, 301) + 5 * 4 + grid_packed_bytes(levels, 1203) +
                        grid_packed_bytes(levels, 13);
    EXPECT_EQ(c->payload_bytes(0), want);
    const WireLayout w = c->wire(0);
    EXPECT_EQ(w.slots[0].coding, SlotCoding::opaque);  // only the compressor decodes the grid
    EXPECT_EQ(w.slots[1].coding, SlotCoding::f32);

    constexpr int kWorkers = 3;
    std::vector<Tensor> g;
    for (int k = 0; k < kWorkers; ++k) g.push_back(gradient(k));
    const std::vector<float> shared = shared_meta(*c, g);
    std::vector<Tensor> msgs;
    for (int k = 0; k < kWorkers; ++k) {
      msgs.push_back(Tensor::empty({static_cast<int64_t>(want)}, DType::u8));
      c->encode(g[k], shared.data(), 0, k, msgs.back());
    }
    auto aggregate = [&](const std::vector<int>& order) {
      Accumulator acc = c->make_accumulator(Device::cpu());
      for (int k : order) c->accumulate(msgs[k], shared.data(), 0, acc);
      Tensor out = Tensor::empty({kTotal});
      c->finalize(acc, shared.data(), 0, kWorkers, out);
      return std::make_pair(out.to_vector<float>(), acc.ints.to_vector<int32_t>());
    };
    const auto [out, ints] = aggregate({0, 1, 2});
    const auto [out2, ints2] = aggregate({2, 0, 1});
    const std::vector<GradSlot> slots = layout();
    for (size_t t : {0u, 2u, 3u}) {
      const float unit = shared[t] / static_cast<float>((levels - 1) * kWorkers);
      for (int64_t i = slots[t].offset; i < slots[t].offset + slots[t].numel; ++i) {
        // An integer in [-(L-1) N, (L-1) N] with the parity of (L-1) N, times one scale.
        ASSERT_LE(std::abs(ints[i]), (levels - 1) * kWorkers);
        ASSERT_EQ((ints[i] - (levels - 1) * kWorkers) % 2, 0) << i;
        ASSERT_EQ(out[i], static_cast<float>(ints[i]) * unit) << i;
        // The order the messages arrive in does not matter (raw f32 slots are float sums: it
        // does there).
        ASSERT_EQ(std::memcmp(&out[i], &out2[i], sizeof(float)), 0) << i;
      }
    }
    EXPECT_EQ(ints, ints2);
  }
}

TEST(Grid, LevelsOutsideThreeToFiveAreRefused) {
  for (int levels : {2, 6}) {
    CompressionOptions o;
    o.method = Method::terngrad;
    o.levels = levels;
    expect_error_with([&] { make_compressor(o, layout()); },
                      {"compression.levels", "[3, 5]", std::to_string(levels)});
  }
}

}  // namespace
}  // namespace tg::tern
