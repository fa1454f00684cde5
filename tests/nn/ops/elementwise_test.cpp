// elementwise: naive double reference, broadcasting shapes the networks use, gradient checks.
#include "nn/ops/elementwise.h"

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// f32 arithmetic vs a double reference of one operation: a few ulps.
constexpr double kAtol = 1e-6, kRtol = 1e-6;

// Naive reference: out[i] for every multi-index, broadcasting by explicit index arithmetic.
std::vector<double> reference(const Tensor& a, const Tensor& b, char op) {
  const Shape out = broadcast_shapes(a.shape(), b.shape());
  const auto av = testing::to_doubles(a), bv = testing::to_doubles(b);
  const Shape as = contiguous_strides(a.shape()), bs = contiguous_strides(b.shape());
  std::vector<double> r(numel_of(out));
  for (int64_t i = 0; i < numel_of(out); ++i) {
    int64_t rem = i, ai = 0, bi = 0;
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      const int64_t c = rem % out[d];
      rem /= out[d];
      const int64_t da = d - (out.size() - a.shape().size());
      const int64_t db = d - (out.size() - b.shape().size());
      if (da >= 0 && a.shape()[da] != 1) ai += c * as[da];
      if (db >= 0 && b.shape()[db] != 1) bi += c * bs[db];
    }
    const double x = av[ai], y = bv[bi];
    r[i] = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
  }
  return r;
}

struct Case {
  Shape a, b;
};
const Case kCases[] = {
    {{4, 5}, {4, 5}},           // same shape
    {{2, 3, 4, 5}, {3, 1, 1}},  // per-channel (NCHW bias)
    {{2, 3, 4, 5}, {5}},        // row vector
    {{1, 3}, {4, 1}},           // outer broadcast on both sides
    {{}, {2, 3}},               // scalar
};

TEST(Elementwise, MatchesReferenceWithBroadcasting) {
  for (const Case& c : kCases) {
    Tensor a = random_uniform(c.a, -2, 2, 1), b = random_uniform(c.b, 0.5f, 2, 2);
    expect_close(add(a, b), reference(a, b, '+'), kAtol, kRtol, "add " + shape_str(c.a));
    expect_close(sub(a, b), reference(a, b, '-'), kAtol, kRtol, "sub " + shape_str(c.a));
    expect_close(mul(a, b), reference(a, b, '*'), kAtol, kRtol, "mul " + shape_str(c.a));
    expect_close(div(a, b), reference(a, b, '/'), kAtol, kRtol, "div " + shape_str(c.a));
  }
}

TEST(Elementwise, NonContiguousInputs) {
  Tensor big = random_uniform({4, 6}, -1, 1, 3);
  Tensor a = big.slice(1, 1, 4);  // [4, 3], row stride 6
  Tensor b = random_uniform({4, 3}, -1, 1, 4);
  expect_close(add(a, b), reference(a.contiguous(), b, '+'), kAtol, kRtol, "strided add");
}

TEST(Elementwise, AffineAndInPlace) {
  Tensor x = random_uniform({7, 3}, -1, 1, 5);
  auto xv = testing::to_doubles(x);
  std::vector<double> ref(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) ref[i] = xv[i] * 1.5 - 0.25;
  expect_close(affine(x, 1.5f, -0.25f), ref, kAtol, kRtol, "affine");
  Tensor y = x.clone();
  add_(y, x, 2.0f);  // y = 3x
  scale_(y, 0.5f);   // y = 1.5x
  for (size_t i = 0; i < xv.size(); ++i) ref[i] = 1.5 * xv[i];
  expect_close(y, ref, kAtol, kRtol, "add_/scale_");
}

TEST(Elementwise, SumToReducesBroadcastDims) {
  Tensor g = random_uniform({2, 3, 4}, -1, 1, 6);
  auto gv = testing::to_doubles(g);
  std::vector<double> ref(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 4; ++k) ref[c] += gv[(i * 3 + c) * 4 + k];
  expect_close(sum_to(g, {3, 1}), ref, 1e-5, 1e-5, "sum_to [3,1]");
  EXPECT_THROW(sum_to(g, {5}), Error);
}

TEST(Elementwise, Errors) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  EXPECT_THROW(add(a, b), Error);
  Tensor i = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(add(a, i), Error);
}

TEST(Elementwise, Gradients) {
  for (const Case& c : kCases) {
    Tensor a = random_uniform(c.a, -2, 2, 11), b = random_uniform(c.b, 0.5f, 2, 12);
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    for (char op : {'+', '-', '*', '/'}) {
      SCOPED_TRACE(std::string("op ") + op + " " + shape_str(c.a) + " x " + shape_str(c.b));
      testing::gradcheck(
          [op](const std::vector<Tensor>& in) {
            switch (op) {
              case '+':
                return add(in[0], in[1]);
              case '-':
                return sub(in[0], in[1]);
              case '*':
                return mul(in[0], in[1]);
              default:
                return div(in[0], in[1]);
            }
          },
          {a, b});
      a.autograd_meta()->grad = Tensor();
      b.autograd_meta()->grad = Tensor();
    }
  }
  Tensor x = random_uniform({3, 4}, -1, 1, 13);
  x.set_requires_grad(true);
  testing::gradcheck([](const std::vector<Tensor>& in) { return affine(in[0], -0.7f, 3.0f); }, {x});
}

}  // namespace
}  // namespace tg
