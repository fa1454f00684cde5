// The implicit-GEMM convolution kernels (nn/ops/conv2d_igemm.h) on the CPU, through the SIMT
// emulation of nn/core/simt.h: the same kernel bodies, blocks, threads, shared memory and
// barriers as on the GPU, so their indexing, tiling, padding/stride handling and split-K are
// checked here on every commit; conv2d_cuda_test.cpp checks the GPU's bits equal these.
// Also the algorithm names, the default rule and the policy's validation.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/precision.h"
#include "nn/ops/cuda_options.h"
#include "tests/nn/ops/conv2d_igemm_util.h"
#include "tests/testing/errors.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::NetConv;

// The CPU reference (im2col + OpenBLAS) sums up to Kd = ~1,200 products of values in [-1, 1) in
// another order: f32 rounding differences stay far below this.
constexpr double kAtol = 1e-4, kRtol = 1e-4;

using testing::ConvData;
using testing::cpu_pass;
using testing::emulated_pass;
using testing::make_conv_data;

constexpr Conv2dPass kPasses[] = {Conv2dPass::forward, Conv2dPass::backward_data,
                                  Conv2dPass::backward_weight};

// Every tiling, unsplit and split into 3 (pieces of 8-deep steps, some empty on short Kd), every
// pass: the CPU reference's numbers. Each (geometry, pass) runs two of the six tile/split
// combinations, in turn, so every combination of tile, split and pass meets 4 of the 12 small
// geometries (the whole product, 216 emulated launches, was the longest emulated-kernel test
// with the TF32 one below; issue 44 item 7).
TEST(Conv2dIgemm, EveryTileAndSplitMatchesTheCpuReference) {
  uint64_t seed = 11;
  int geometry = 0;
  for (const NetConv& c : testing::small_convs()) {
    SCOPED_TRACE(c.name);
    const ConvData d = make_conv_data(c, seed++);
    int turn = geometry++;  // + the pass's index
    for (Conv2dPass p : kPasses) {
      SCOPED_TRACE(conv2d_pass_name(p));
      const Tensor want = cpu_pass(d, p);
      int combination = 0;
      for (Conv2dAlgo a : conv2d_igemm_tiles()) {
        for (int splits : {1, 3}) {
          if ((combination++ + turn) % 3 != 0) continue;
          a.splits = splits;
          SCOPED_TRACE(conv2d_algo_name(a));
          testing::expect_close(emulated_pass(d, p, a), want, kAtol, kRtol, "output");
        }
      }
      ++turn;
    }
  }
}

// The TF32 tiles (tensor-core MMAs, emulated lane by lane with PTX's fragment layout) compute
// the products of the TF32-rounded operands. Against the CPU reference of the rounded data only
// fp32 summation differences remain (scaled error <= 2e-5: Kd <= ~300 additions of 2^-24 each,
// at worst); against the unrounded data the rounding shows (each operand within 2^-11, so
// <= 2^-10), and it must show: a kernel that skipped the rounding would sit as close to the
// unrounded reference as to the rounded one. The rounding is the operands' load, the same for
// every tile and with or without split-K, whose pieces the sweep above checks: each (geometry,
// pass) runs one TF32 tile, in turn, split into 3 on every other geometry, so each tile meets
// every pass on 4 of the 12 geometries (every tile, pass and split on every geometry took 57 s
// of one core, the longest of the emulated-kernel tests; issue 44 item 7).
TEST(Conv2dIgemm, Tf32TilesMultiplyTheRoundedOperands) {
  uint64_t seed = 61;
  int geometry = 0;
  std::vector<Conv2dAlgo> tiles;
  for (const Conv2dAlgo& a : conv2d_igemm_tiles(true))
    if (a.tf32) tiles.push_back(a);
  ASSERT_EQ(tiles.size(), 3u);
  for (const NetConv& c : testing::small_convs()) {
    int turn = geometry;  // + the pass's index
    const int splits = geometry++ % 2 == 0 ? 3 : 1;
    SCOPED_TRACE(c.name);
    const ConvData d = make_conv_data(c, seed++);
    ConvData rounded = testing::map_conv_data(d, [](float v) { return tf32_round(v); });
    rounded.bias = d.bias;  // the epilogue adds the bias in fp32
    const ConvData absolute = testing::map_conv_data(d, [](float v) { return std::fabs(v); });
    for (Conv2dPass p : kPasses) {
      SCOPED_TRACE(conv2d_pass_name(p));
      const Tensor want = cpu_pass(d, p), want_rounded = cpu_pass(rounded, p);
      const Tensor magnitude = cpu_pass(absolute, p);
      Conv2dAlgo a = tiles[static_cast<size_t>(turn++) % tiles.size()];
      a.splits = splits;
      SCOPED_TRACE(conv2d_algo_name(a));
      const Tensor got = emulated_pass(d, p, a);
      const double to_rounded = testing::max_scaled_error(got, want_rounded, magnitude);
      const double to_exact = testing::max_scaled_error(got, want, magnitude);
      EXPECT_LE(to_rounded, 2e-5);
      EXPECT_LE(to_exact, std::ldexp(1.0, -10));
      EXPECT_GT(to_exact, 4 * to_rounded);
    }
  }
}

// Round to nearest with ties away from zero, at 10 mantissa bits (cvt.rna.tf32.f32).
TEST(Conv2dIgemm, Tf32RoundingIsToNearestTiesAway) {
  const float ulp = std::ldexp(1.0f, -10);  // TF32's ulp at 1
  EXPECT_EQ(tf32_round(1.0f), 1.0f);
  EXPECT_EQ(tf32_round(1.0f + ulp / 2), 1.0f + ulp);                    // tie: away
  EXPECT_EQ(tf32_round(1.0f + ulp / 2 - std::ldexp(1.0f, -23)), 1.0f);  // below half
  EXPECT_EQ(tf32_round(-(1.0f + ulp / 2)), -(1.0f + ulp));              // symmetric
  EXPECT_EQ(tf32_round(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);            // tie: away
  EXPECT_EQ(tf32_round(2.0f - std::ldexp(1.0f, -23)), 2.0f);            // carries
  EXPECT_EQ(tf32_round(std::numeric_limits<float>::max()), INFINITY);   // overflows
  EXPECT_EQ(tf32_round(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(tf32_round(NAN)));
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(tf32_round(tiny * 4096), tiny * 8192);  // a denormal's tie rounds away too
  EXPECT_EQ(tf32_round(tiny * 4095), 0.0f);
}

// The kernels sum each output's products in increasing kd, one fmaf at a time, and split-K adds
// the pieces in order: so the unsplit result is the sequential fmaf chain, bit for bit, and a
// split one the in-order sum of the pieces' chains. Checked on one forward shape directly.
TEST(Conv2dIgemm, SummationOrderIsTheDocumentedOne) {
  const NetConv c{"3x3 same", {1, 5, 6, 7}, {4, 5, 3, 3}, testing::conv_opts(1, 1, Padding::same)};
  const ConvData d = make_conv_data(c, 5);
  const Conv2dShape& s = d.s;
  const float* x = d.x.data<float>();
  const float* w = d.w.data<float>();
  const int64_t Kd = s.C * s.R * s.S;
  for (int splits : {1, 2, 5}) {
    SCOPED_TRACE(splits);
    const Tensor got = emulated_pass(d, Conv2dPass::forward, {Conv2dAlgo::igemm, 64, 64, splits});
    const int chunk = igemm::split_chunk(static_cast<int>(Kd), splits, 8);
    for (int64_t k = 0; k < s.K; ++k) {
      for (int64_t pq = 0; pq < s.P * s.Q; ++pq) {
        const int64_t p = pq / s.Q, q = pq % s.Q;
        float total = 0.0f;
        for (int z = 0; z < splits; ++z) {
          float piece = 0.0f;
          for (int64_t kd = z * chunk; kd < std::min<int64_t>(Kd, (z + 1) * chunk); ++kd) {
            const int64_t ch = kd / (s.R * s.S), r = kd / s.S % s.R, sc = kd % s.S;
            const int64_t ih = p - s.pad_top + r, iw = q - s.pad_left + sc;
            const float xv =
                ih >= 0 && ih < s.H && iw >= 0 && iw < s.W ? x[(ch * s.H + ih) * s.W + iw] : 0.0f;
            piece = std::fmaf(w[k * Kd + kd], xv, piece);
          }
          total = splits == 1 ? piece : total + piece;
        }
        total += d.bias.data<float>()[k];
        ASSERT_EQ(got.data<float>()[k * s.P * s.Q + pq], total) << "k " << k << " pq " << pq;
      }
    }
  }
}

// The kernels' multiply-high division: exact for every divisor the convolutions can have and
// every dividend below 2^31 (a dense sweep of small values, the largest values, and values
// around each multiple near the top).
TEST(Conv2dIgemm, FastDivIsExact) {
  std::vector<int> divisors;
  for (int d = 1; d <= 3000; ++d) divisors.push_back(d);
  for (int d : {4095, 4096, 4097, 12544, 50176, 65535, 65536, 1 << 20, (1 << 20) + 1, 1000003,
                (1 << 30) - 1, 1 << 30, (1 << 30) + 1, 2147483647})
    divisors.push_back(d);
  for (int d : divisors) {
    const igemm::FastDiv f(d);
    auto check = [&](int64_t n) {
      if (n < 0 || n > 2147483647) return;
      ASSERT_EQ(f.div(static_cast<int>(n)), static_cast<int>(n / d)) << n << " / " << d;
    };
    for (int64_t n = 0; n < 5000; ++n) check(n);
    for (int64_t n = 2147483647; n > 2147483647 - 5000; --n) check(n);
    for (int64_t q = 2147483647 / d; q > 2147483647 / d - 50 && q >= 0; --q)
      for (int64_t e : {-1, 0, 1}) check(q * d + e);
  }
}

// The loads' kd cursor: from any start, stepping 1, 2, 4 or 8 at a time, it stays equal to
// dividing kd by RS and S, for every filter up to 11 x 11 (1 x 1 steps whole channels at once),
// with both walks' strides (forward's c*HW + r*W + s, unit-stride backward data's
// k*PQ - r*Q - s) and past the last channel (where the loads still step).
TEST(Conv2dIgemm, TheKdCursorEqualsDivision) {
  for (int R = 1; R <= 11; ++R)
    for (int S = 1; S <= 11; ++S) {
      const igemm::Dims d = igemm::dims_of(
          conv2d_shape({1, 5, 13, 12}, {3, 5, R, S}, testing::conv_opts(1, 1, Padding::same)));
      for (const igemm::CrsWalk* w : {&d.fwd_walk, &d.bwd_walk}) {
        auto expect_at = [&](const igemm::Crs& k, int kd) {
          const int ch = kd / d.RS, r = kd % d.RS / S, s = kd % S;
          ASSERT_EQ(k.r, r) << R << "x" << S << " kd " << kd;
          ASSERT_EQ(k.s, s) << R << "x" << S << " kd " << kd;
          ASSERT_EQ(k.off, ch * w->cs + r * w->rs + s * w->ss) << R << "x" << S << " kd " << kd;
        };
        const int end = d.Cg * d.RS + 40;
        for (int start = 0; start < 2 * d.RS + 3; ++start) {
          igemm::Crs k1 = d.crs_at(*w, start), k2 = k1, k4 = k1, k8 = k1;
          expect_at(k1, start);
          for (int kd = start + 1; kd < end; ++kd) {
            d.crs_advance<1>(*w, k1);
            expect_at(k1, kd);
          }
          for (int kd = start + 2; kd < end; kd += 2) {
            d.crs_advance<2>(*w, k2);
            expect_at(k2, kd);
          }
          for (int kd = start + 4; kd < end; kd += 4) {
            d.crs_advance<4>(*w, k4);
            expect_at(k4, kd);
          }
          for (int kd = start + 8; kd < end; kd += 8) {
            d.crs_advance<8>(*w, k8);
            expect_at(k8, kd);
          }
        }
      }
    }
}

TEST(Conv2dIgemm, AnEmptyBatchGivesAZeroWeightGradient) {
  const NetConv c{"N0", {0, 3, 5, 5}, {4, 3, 3, 3}, testing::conv_opts(1, 1, Padding::same)};
  const ConvData d = make_conv_data(c, 3);
  for (const Conv2dAlgo& a : conv2d_igemm_tiles()) {
    const Tensor dw = emulated_pass(d, Conv2dPass::backward_weight, a);
    for (int64_t i = 0; i < dw.numel(); ++i) ASSERT_EQ(dw.data<float>()[i], 0.0f) << i;
  }
}

TEST(Conv2dAlgo, NamesRoundTripAndBadNamesAreRefused) {
  for (const std::string n : {"im2col", "igemm128x128", "igemm64x64s4", "igemm32x128s64",
                              "igemm128x128_tf32", "igemm64x64s4_tf32"})
    EXPECT_EQ(conv2d_algo_name(parse_conv2d_algo(n, "test")), n);
  EXPECT_TRUE(parse_conv2d_algo("igemm32x128s2_tf32", "test").tf32);
  EXPECT_FALSE(parse_conv2d_algo("igemm32x128s2", "test").tf32);
  for (const std::string n :
       {"", "igemm", "igemm16x16", "igemm64x64s0", "igemm64x64s", "cudnn", "igemm64x64x", "_tf32",
        "im2col_tf32", "igemm64x64_tf32s2", "igemm64x64_tf16"})
    testing::expect_error_with([&] { parse_conv2d_algo(n, "cuda.conv_algorithms['k']"); },
                               {"cuda.conv_algorithms['k']", "'" + n + "'", "igemm64x64s4"});
}

// The rule is a function of the shape alone; its split-K partials always fit the workspace the
// layer allocates, and it only splits when the grid is small.
TEST(Conv2dAlgo, TheRuleIsDeterministicAndFitsTheWorkspace) {
  for (int64_t batch : {1, 128}) {
    for (const NetConv& c : testing::net_convs(batch)) {
      SCOPED_TRACE(c.name);
      const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
      const int64_t ws = conv2d_workspace_floats(s);
      for (Conv2dPass p : kPasses) {
        const Conv2dAlgo a = conv2d_igemm_rule(s, p, ws);
        EXPECT_EQ(a, conv2d_igemm_rule(s, p, ws));
        const Conv2dGemmDims g = conv2d_gemm_dims(s, p);
        EXPECT_TRUE(a.splits == 1 || a.splits * s.groups * g.m * g.n <= ws) << conv2d_algo_name(a);
        const int64_t tiles = (g.m + a.bm - 1) / a.bm * ((g.n + a.bn - 1) / a.bn) * s.groups;
        if (tiles >= 512) {
          EXPECT_EQ(a.splits, 1) << conv2d_algo_name(a);
        }
        EXPECT_EQ(g.m <= 32, a.bm == 32) << conv2d_algo_name(a);
      }
    }
  }
  // AlexNet conv5's weight gradient at batch 1: 128 x 1728 in 16 tiles of 64 x 64... over
  // Kd = 169: too short to split into pieces of 16 steps.
  const Conv2dShape s5 = conv2d_shape({1, 384, 13, 13}, {256, 192, 3, 3},
                                      testing::conv_opts(1, 1, Padding::same, 0, 0, 2));
  EXPECT_EQ(conv2d_igemm_rule(s5, Conv2dPass::backward_weight, conv2d_workspace_floats(s5)).splits,
            1);
  // ... and at batch 128 (Kd = 21,632) it is split.
  const Conv2dShape s128 = conv2d_shape({128, 384, 13, 13}, {256, 192, 3, 3},
                                        testing::conv_opts(1, 1, Padding::same, 0, 0, 2));
  EXPECT_GT(
      conv2d_igemm_rule(s128, Conv2dPass::backward_weight, conv2d_workspace_floats(s128)).splits,
      1);
}

TEST(Conv2dAlgo, PolicyIsValidatedAndChoicesAreRecordedOnce) {
  testing::expect_error_with(
      [] {
        set_conv2d_policy({"cudnn", {}});
      },
      {"cuda.conv_algo", "'cudnn'", "im2col, igemm or autotune"});
  testing::expect_error_with(
      [] {
        set_conv2d_policy({"igemm", {{"N1 fwd", "igemm7x7"}}});
      },
      {"cuda.conv_algorithms['N1 fwd']", "'igemm7x7'"});
  set_conv2d_policy({"igemm", {{"N1 fwd", "igemm64x64s2"}}});
  EXPECT_EQ(conv2d_policy().mode, "igemm");
  const Conv2dShape a =
      conv2d_shape({1, 3, 8, 8}, {4, 3, 3, 3}, testing::conv_opts(1, 1, Padding::same));
  Conv2dShape b = a;
  b.pad_left = 0;  // any one number makes another shape
  const Conv2dPass fwd = Conv2dPass::forward;
  note_conv2d_choice(a, fwd, {Conv2dAlgo::igemm, 64, 64, 2});
  note_conv2d_choice(b, fwd, {});
  note_conv2d_choice(a, fwd, {});  // the first choice for a pass of a shape stays
  const std::vector<std::pair<std::string, std::string>> want{
      {conv2d_pass_key(a, fwd), "igemm64x64s2"}, {conv2d_pass_key(b, fwd), "im2col"}};
  EXPECT_EQ(conv2d_choices(), want);
  EXPECT_EQ(conv2d_choice_count(), 2u);
  Conv2dAlgo got;
  ASSERT_TRUE(find_conv2d_choice(a, fwd, &got));
  EXPECT_EQ(got, (Conv2dAlgo{Conv2dAlgo::igemm, 64, 64, 2}));
  ASSERT_TRUE(find_conv2d_choice(b, fwd, &got));
  EXPECT_EQ(got, Conv2dAlgo{});
  EXPECT_FALSE(find_conv2d_choice(a, Conv2dPass::backward_data, &got));
  Conv2dShape c = a;
  c.groups = 3;
  EXPECT_FALSE(find_conv2d_choice(c, fwd, &got));
  set_conv2d_policy({});  // back to the default; clears the record
  EXPECT_TRUE(conv2d_choices().empty());
  EXPECT_FALSE(find_conv2d_choice(a, fwd, &got));
  EXPECT_EQ(conv2d_policy().mode, "im2col");
}

TEST(Conv2dAlgo, PassKeysNameEveryDimension) {
  const Conv2dShape s =
      conv2d_shape({128, 3, 224, 224}, {96, 3, 11, 11}, testing::conv_opts(4, 4, Padding::same));
  EXPECT_EQ(conv2d_pass_key(s, Conv2dPass::backward_weight),
            "N128 C3 H224 W224 K96 R11 S11 P56 Q56 s4x4 p3x3 g1 bwd_weight");
}

TEST(Conv2dAlgo, PinsRoundTripAndMalformedOnesAreNamed) {
  const std::vector<std::pair<std::string, std::string>> pins{
      {"N1 C3 H8 W8 K4 R3 S3 P8 Q8 s1x1 p1x1 g1 fwd", "igemm64x64s2"},
      {"N1 C3 H8 W8 K4 R3 S3 P8 Q8 s1x1 p1x1 g1 bwd_data", "im2col"}};
  EXPECT_EQ(parse_conv2d_pins(conv2d_pins_string(pins)), pins);
  EXPECT_EQ(
      parse_conv2d_pins("  a b=im2col ;; c=igemm32x128 ; "),
      (std::vector<std::pair<std::string, std::string>>{{"a b", "im2col"}, {"c", "igemm32x128"}}));
  EXPECT_TRUE(parse_conv2d_pins("").empty());
  testing::expect_error_with(
      [] { parse_conv2d_pins("a=im2col; no equals sign"); },
      {"cuda.conv_algorithms", "'no equals sign'", "<pass key>=<algorithm>"});
  testing::expect_error_with([] { parse_conv2d_pins("a=im2col; a=igemm64x64"); },
                             {"'a' is pinned twice"});
  testing::expect_error_with([] { parse_conv2d_pins("a=fast"); },
                             {"cuda.conv_algorithms['a']", "'fast'"});
  CudaOptions o;
  o.conv_algo = "igemm";
  o.conv_algorithms = "a=im2col";
  o.tf32 = true;
  apply_cuda_options(o);
  EXPECT_EQ(conv2d_policy().mode, "igemm");
  EXPECT_EQ(conv2d_policy().pins.at("a"), "im2col");
  EXPECT_TRUE(cuda_tf32());
  apply_cuda_options(CudaOptions{});
  EXPECT_FALSE(cuda_tf32());
  EXPECT_TRUE(conv2d_policy().pins.empty());
  // A TF32 pin redoes a TF32 run: it needs cuda.tf32 on, and is refused (naming both) without.
  o.conv_algorithms = "a=igemm64x64_tf32";
  apply_cuda_options(o);
  EXPECT_EQ(conv2d_policy().pins.at("a"), "igemm64x64_tf32");
  o.tf32 = false;
  testing::expect_error_with([&] { apply_cuda_options(o); },
                             {"cuda.conv_algorithms['a']", "igemm64x64_tf32", "cuda.tf32"});
  apply_cuda_options(CudaOptions{});
}

}  // namespace
}  // namespace tg
