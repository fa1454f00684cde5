// max_pool2d / avg_pool2d: naive double reference (window enumerated cell by cell, padding by
// explicit bounds tests), the shapes the networks use plus odd sizes, asymmetric SAME padding,
// stride > window and window 1; tie-breaking; finite-difference gradients; errors.
#include "nn/ops/pool2d.h"

#include <cmath>

#include "nn/autograd/tape.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;

// Max pooling copies values exactly; dx adds up to kh*kw values |dy| <= 1 in f32 (<= 9 ulps of 8).
constexpr double kMaxAtol = 1e-5, kMaxRtol = 1e-6;
// Average pooling sums up to 49 f32 terms |x| <= 2 before dividing: 48 roundings at ulp(16).
constexpr double kAvgAtol = 1e-5, kAvgRtol = 1e-5;
// Finite-difference step for gradcheck; random_distinct gaps must exceed 2*eps so that no
// perturbation changes which cell is the maximum.
constexpr double kEps = 1e-2;
constexpr float kDistinctGap = 0.05f;

struct Case {
  Shape x;  // N, C, H, W
  Pool2dOptions opt;
  const char* what;
};

const Case kCases[] = {
    {{2, 3, 28, 28}, {2, 2, 2, 2, Padding::same}, "LeNet 2x2/2 SAME"},
    {{1, 2, 7, 7}, {2, 2, 2, 2, Padding::same}, "2x2/2 SAME odd (pad 0 top, 1 bottom)"},
    {{2, 2, 24, 24}, {3, 3, 2, 2, Padding::same}, "CifarNet 3x3/2 SAME"},
    {{1, 3, 13, 13}, {3, 3, 2, 2, Padding::same}, "3x3/2 SAME odd (pad 1, 1)"},
    {{1, 2, 10, 9}, {3, 3, 2, 2, Padding::same}, "3x3/2 SAME 10x9 (pad 0/1 and 1/1)"},
    {{2, 2, 13, 13}, {3, 3, 2, 2, Padding::valid}, "AlexNet 3x3/2 VALID"},
    {{1, 4, 27, 27}, {3, 3, 2, 2, Padding::valid}, "AlexNet 3x3/2 VALID 27"},
    {{2, 3, 7, 7}, {7, 7, 1, 1, Padding::valid}, "GoogLeNet 7x7/1 VALID"},
    {{2, 3, 7, 7}, {3, 3, 1, 1, Padding::same}, "Inception 3x3/1 SAME"},
    {{1, 2, 6, 8}, {4, 4, 1, 1, Padding::same}, "4x4/1 SAME (pad 1 top, 2 bottom)"},
    {{1, 2, 8, 7}, {2, 2, 3, 3, Padding::valid}, "stride > window VALID"},
    {{1, 2, 8, 7}, {2, 2, 3, 3, Padding::same}, "stride > window SAME"},
    {{1, 2, 5, 6}, {1, 1, 2, 2, Padding::same}, "window 1 stride 2"},
    {{2, 2, 5, 4}, {1, 1, 1, 1, Padding::valid}, "window 1 stride 1"},
    {{1, 2, 5, 6}, {3, 2, 1, 2, Padding::same}, "non-square window and stride"},
    {{1, 2, 6, 5}, {3, 3, 2, 2, Padding::explicit_pad, 1, 1}, "explicit pad 1"},
    {{1, 1, 7, 6}, {3, 4, 2, 3, Padding::explicit_pad, 2, 1}, "explicit pad 2x1"},
};

struct Ref {
  Shape out;
  std::vector<double> y;
  std::vector<int64_t> argmax;  // max only: index in the H x W plane
};

// Naive reference: every window offset, skipping cells outside the image.
Ref reference_forward(const Tensor& x, const Pool2dOptions& o, bool is_max) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const Padded1d ph = padded_dim(H, o.kh, o.sh, o.padding, o.pad_h);
  const Padded1d pw = padded_dim(W, o.kw, o.sw, o.padding, o.pad_w);
  const int64_t P = ph.out, Q = pw.out;
  const auto xv = testing::to_doubles(x);
  Ref r;
  r.out = {N, C, P, Q};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          double best = -INFINITY, sum = 0;
          int64_t best_i = -1, count = 0;
          for (int64_t r_ = 0; r_ < o.kh; ++r_)
            for (int64_t s_ = 0; s_ < o.kw; ++s_) {
              const int64_t ih = p * o.sh - ph.pad_before + r_;
              const int64_t iw = q * o.sw - pw.pad_before + s_;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = xv[((n * C + c) * H + ih) * W + iw];
              if (v > best) {  // strict: the first maximum in row-major window order wins
                best = v;
                best_i = ih * W + iw;
              }
              sum += v;
              ++count;
            }
          EXPECT_GT(count, 0) << "window with no cell inside the image";
          r.y.push_back(is_max ? best : sum / static_cast<double>(count));
          r.argmax.push_back(best_i);
        }
  return r;
}

std::vector<double> reference_backward(const Tensor& x, const Pool2dOptions& o, bool is_max,
                                       const Tensor& dy) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const Padded1d ph = padded_dim(H, o.kh, o.sh, o.padding, o.pad_h);
  const Padded1d pw = padded_dim(W, o.kw, o.sw, o.padding, o.pad_w);
  const int64_t P = ph.out, Q = pw.out;
  const Ref fwd = reference_forward(x, o, true);
  const auto g = testing::to_doubles(dy);
  std::vector<double> dx(x.numel(), 0.0);
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t o_idx = (nc * P + p) * Q + q;
        if (is_max) {
          dx[nc * H * W + fwd.argmax[o_idx]] += g[o_idx];
          continue;
        }
        std::vector<int64_t> cells;
        for (int64_t r_ = 0; r_ < o.kh; ++r_)
          for (int64_t s_ = 0; s_ < o.kw; ++s_) {
            const int64_t ih = p * o.sh - ph.pad_before + r_;
            const int64_t iw = q * o.sw - pw.pad_before + s_;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) cells.push_back(ih * W + iw);
          }
        for (int64_t cell : cells)
          dx[nc * H * W + cell] += g[o_idx] / static_cast<double>(cells.size());
      }
  return dx;
}

// Forward and backward (seeded with dy) through the tape; returns {y, dx}.
std::pair<Tensor, Tensor> run(const Tensor& x0, const Pool2dOptions& o, bool is_max,
                              const Tensor& dy) {
  Tensor x = x0.clone();
  x.set_requires_grad(true);
  Tensor y = is_max ? max_pool2d(x, o) : avg_pool2d(x, o);
  backward(y, dy);
  return {y, x.grad()};
}

TEST(Pool2d, MaxMatchesReference) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    const Tensor x = testing::random_distinct(c.x, 0.01f, seed++);
    const Ref ref = reference_forward(x, c.opt, true);
    const Tensor dy = testing::random_uniform(ref.out, -1, 1, seed++);
    auto [y, dx] = run(x, c.opt, true, dy);
    ASSERT_EQ(y.shape(), ref.out);
    expect_close(y, ref.y, 0, 0, "max forward (exact: values are copied)");
    expect_close(dx, reference_backward(x, c.opt, true, dy), kMaxAtol, kMaxRtol, "max backward");
  }
}

TEST(Pool2d, AvgMatchesReference) {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    const Tensor x = testing::random_uniform(c.x, -2, 2, seed++);
    const Ref ref = reference_forward(x, c.opt, false);
    const Tensor dy = testing::random_uniform(ref.out, -1, 1, seed++);
    auto [y, dx] = run(x, c.opt, false, dy);
    ASSERT_EQ(y.shape(), ref.out);
    expect_close(y, ref.y, kAvgAtol, kAvgRtol, "avg forward");
    expect_close(dx, reference_backward(x, c.opt, false, dy), kAvgAtol, kAvgRtol, "avg backward");
  }
}

TEST(Pool2d, LargeBatchUsesParallelPath) {
  // 8*32*12*12 outputs: above the OpenMP threshold of the CPU kernels.
  const Pool2dOptions o{3, 3, 2, 2, Padding::same};
  for (bool is_max : {true, false}) {
    SCOPED_TRACE(is_max ? "max" : "avg");
    const Shape shape = {8, 32, 23, 24};
    const Tensor x = is_max ? testing::random_distinct(shape, 1e-5f, 7)
                            : testing::random_uniform(shape, -2, 2, 7);
    const Ref ref = reference_forward(x, o, is_max);
    const Tensor dy = testing::random_uniform(ref.out, -1, 1, 8);
    auto [y, dx] = run(x, o, is_max, dy);
    expect_close(y, ref.y, kAvgAtol, kAvgRtol, "forward");
    expect_close(dx, reference_backward(x, o, is_max, dy), kAvgAtol, kAvgRtol, "backward");
  }
}

TEST(Pool2d, MaxTiesGoToFirstCellInRowMajorOrder) {
  // A constant plane: every cell ties, so each output routes dy to the top-left in-image cell
  // of its window (padding never wins, even though padded cells are "0" like the data).
  {
    const Tensor x = Tensor::zeros({1, 1, 5, 5});
    const Pool2dOptions o{3, 3, 2, 2, Padding::same};  // P = 3, pads 1/1
    const Tensor dy = Tensor::full({1, 1, 3, 3}, 1.0);
    auto [y, dx] = run(x, o, true, dy);
    std::vector<double> expect(25, 0.0);
    // Window rows start at -1, 1, 3 -> first in-image row 0, 1, 3; same for columns.
    for (int64_t r : {0, 1, 3})
      for (int64_t c : {0, 1, 3}) expect[r * 5 + c] = 1.0;
    expect_close(dx, expect, 0, 0, "constant plane");
  }
  // Few distinct levels: many ties, checked against the reference's strict > rule.
  uint64_t seed = 300;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    Tensor x = testing::random_uniform(c.x, 0, 3, seed++);
    std::vector<float> v = x.to_vector<float>();
    for (float& f : v) f = std::floor(f) - 5.0f;  // negative, like the padding must not win
    x = Tensor::from_vector(v, c.x);
    const Ref ref = reference_forward(x, c.opt, true);
    const Tensor dy = testing::random_uniform(ref.out, -1, 1, seed++);
    auto [y, dx] = run(x, c.opt, true, dy);
    expect_close(y, ref.y, 0, 0, "forward with ties");
    expect_close(dx, reference_backward(x, c.opt, true, dy), kMaxAtol, kMaxRtol,
                 "backward with ties");
  }
}

TEST(Pool2d, NonContiguousInput) {
  const Tensor big = testing::random_distinct({2, 3, 9, 12}, 0.01f, 11);
  const Tensor x = big.slice(3, 2, 11);  // [2, 3, 9, 9], row stride 12
  const Pool2dOptions o{3, 3, 2, 2, Padding::same};
  expect_close(max_pool2d(x, o), reference_forward(x.contiguous(), o, true).y, 0, 0, "strided max");
  expect_close(avg_pool2d(x, o), reference_forward(x.contiguous(), o, false).y, kAvgAtol, kAvgRtol,
               "strided avg");
}

TEST(Pool2d, Gradients) {
  uint64_t seed = 500;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    // Small batch: the finite-difference check runs the op 3x per sampled coordinate.
    Shape s = c.x;
    s[0] = 1;
    s[1] = std::min<int64_t>(s[1], 2);
    Tensor xm = testing::random_distinct(s, kDistinctGap, seed++);
    xm.set_requires_grad(true);
    testing::GradcheckOptions go;
    go.eps = kEps;
    go.max_kink_fraction = 0.0;  // distinct values: no argmax can switch within +-eps
    testing::gradcheck([o = c.opt](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); },
                       {xm}, go);
    Tensor xa = testing::random_uniform(s, -1, 1, seed++);
    xa.set_requires_grad(true);
    testing::gradcheck([o = c.opt](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); },
                       {xa}, go);
  }
}

TEST(Pool2d, RecordsOnlyWhenNeeded) {
  clear_tape();
  const Tensor x = testing::random_uniform({1, 1, 4, 4}, -1, 1, 3);
  const Pool2dOptions o{2, 2, 2, 2};
  EXPECT_FALSE(max_pool2d(x, o).requires_grad());
  EXPECT_FALSE(avg_pool2d(x, o).requires_grad());
  EXPECT_EQ(tape_size(), 0u);
}

TEST(Pool2d, Errors) {
  const Tensor x = Tensor::zeros({1, 2, 5, 5});
  const Pool2dOptions ok{2, 2, 2, 2};
  EXPECT_THROW(max_pool2d(Tensor(), ok), Error);
  EXPECT_THROW(max_pool2d(Tensor::zeros({2, 5, 5}), ok), Error);                  // 3-D
  EXPECT_THROW(avg_pool2d(Tensor::zeros({1, 2, 5, 5}, DType::i32), ok), Error);   // wrong dtype
  EXPECT_THROW(max_pool2d(x, {0, 2, 2, 2}), Error);                               // zero window
  EXPECT_THROW(avg_pool2d(x, {2, 2, 2, 0}), Error);                               // zero stride
  EXPECT_THROW(max_pool2d(x, {6, 6, 1, 1, Padding::valid}), Error);               // window > input
  EXPECT_THROW(max_pool2d(x, {3, 3, 1, 1, Padding::explicit_pad, 3, 0}), Error);  // pad >= window
  EXPECT_THROW(avg_pool2d(x, {3, 3, 1, 1, Padding::explicit_pad, -1, 0}), Error);
  try {
    avg_pool2d(x, {2, 2, 2, 0});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stride"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tg
