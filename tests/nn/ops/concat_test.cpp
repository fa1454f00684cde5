// concat: naive reference (each output index mapped back to its input), the Inception channel
// concat and other dims, gradients into every input, mixed requires_grad, errors.
#include "nn/ops/concat.h"

#include "nn/autograd/tape.h"
#include "nn/ops/elementwise.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;

// concat only copies: exact.
constexpr double kExact = 0.0;

std::vector<double> reference(const std::vector<Tensor>& xs, int64_t dim) {
  const int64_t nd = xs[0].ndim(), d = dim < 0 ? dim + nd : dim;
  Shape out = xs[0].shape();
  out[d] = 0;
  for (const Tensor& x : xs) out[d] += x.size(d);
  std::vector<std::vector<double>> vals;
  for (const Tensor& x : xs) vals.push_back(testing::to_doubles(x));
  std::vector<double> r(numel_of(out));
  for (int64_t i = 0; i < numel_of(out); ++i) {
    Shape idx(nd);
    int64_t rem = i;
    for (int64_t k = nd - 1; k >= 0; --k) {
      idx[k] = rem % out[k];
      rem /= out[k];
    }
    size_t which = 0;
    while (idx[d] >= xs[which].size(d)) idx[d] -= xs[which++].size(d);
    int64_t flat = 0;
    for (int64_t k = 0; k < nd; ++k) flat = flat * xs[which].size(k) + idx[k];
    r[i] = vals[which][flat];
  }
  return r;
}

struct Case {
  std::vector<Shape> shapes;
  int64_t dim;
  const char* what;
};

const Case kCases[] = {
    {{{2, 64, 7, 7}, {2, 128, 7, 7}, {2, 32, 7, 7}, {2, 32, 7, 7}}, 1, "Inception channels"},
    {{{2, 3, 4, 5}, {1, 3, 4, 5}}, 0, "batch"},
    {{{2, 3, 4, 5}, {2, 3, 4, 2}}, -1, "last dim, negative index"},
    {{{2, 3, 4, 5}, {2, 3, 1, 5}, {2, 3, 6, 5}}, 2, "height"},
    {{{3, 4}}, 1, "single input"},
    {{{2, 3}, {2, 0}, {2, 1}}, 1, "empty input"},
};

std::vector<Tensor> make_inputs(const Case& c, uint64_t seed) {
  std::vector<Tensor> xs;
  for (const Shape& s : c.shapes) {
    // init::uniform_ rejects a zero-size tensor (Tensor::is_contiguous is false for it).
    xs.push_back(numel_of(s) == 0 ? Tensor::empty(s) : testing::random_uniform(s, -1, 1, seed));
    ++seed;
  }
  return xs;
}

TEST(Concat, MatchesReference) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    const std::vector<Tensor> xs = make_inputs(c, seed);
    seed += 10;
    Tensor y = concat(xs, c.dim);
    EXPECT_TRUE(y.is_contiguous());
    expect_close(y, reference(xs, c.dim), kExact, kExact, "forward");
  }
}

TEST(Concat, BackwardSlicesDy) {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    std::vector<Tensor> xs = make_inputs(c, seed);
    seed += 10;
    for (Tensor& x : xs) x.set_requires_grad(true);
    Tensor y = concat(xs, c.dim);
    const Tensor dy = testing::random_uniform(y.shape(), -1, 1, seed++);
    backward(y, dy);
    // Reference: dx_j is the part of dy that came from x_j, i.e. concat's inverse.
    const auto g = testing::to_doubles(dy);
    const int64_t d = c.dim < 0 ? c.dim + y.ndim() : c.dim;
    int64_t off = 0;
    for (size_t j = 0; j < xs.size(); ++j) {
      const Tensor& x = xs[j];
      ASSERT_TRUE(x.grad().defined()) << "input " << j;
      ASSERT_EQ(x.grad().shape(), x.shape());
      std::vector<double> ref(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t rem = i, flat = 0, stride = 1;
        for (int64_t k = x.ndim() - 1; k >= 0; --k) {
          int64_t ik = rem % x.size(k);
          rem /= x.size(k);
          if (k == d) ik += off;
          flat += ik * stride;
          stride *= y.size(k);
        }
        ref[i] = g[flat];
      }
      expect_close(x.grad(), ref, kExact, kExact, "dx " + std::to_string(j));
      off += x.size(d);
    }
  }
}

TEST(Concat, Gradients) {
  Tensor a = testing::random_uniform({2, 3, 4, 4}, -1, 1, 1);
  Tensor b = testing::random_uniform({2, 2, 4, 4}, -1, 1, 2);
  Tensor c = testing::random_uniform({2, 1, 4, 4}, -1, 1, 3);
  for (Tensor* t : {&a, &b, &c}) t->set_requires_grad(true);
  // An op before concat checks that gradients flow on through the inputs' own nodes.
  testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        return concat({affine(in[0], 2.0f, 1.0f), in[1], in[2]}, 1);
      },
      {a, b, c});
}

TEST(Concat, OnlyInputsThatRequireGradReceiveIt) {
  clear_tape();
  Tensor a = testing::random_uniform({2, 3}, -1, 1, 1);
  Tensor b = testing::random_uniform({2, 2}, -1, 1, 2);
  EXPECT_FALSE(concat({a, b}, 1).requires_grad());
  EXPECT_EQ(tape_size(), 0u);
  b.set_requires_grad(true);
  Tensor y = concat({a, b}, 1);
  ASSERT_TRUE(y.requires_grad());
  backward(y, Tensor::full(y.shape(), 1.0));
  EXPECT_FALSE(a.grad().defined());
  expect_close(b.grad(), std::vector<double>(4, 1.0), kExact, kExact, "db");
}

TEST(Concat, SameTensorTwiceAccumulates) {
  Tensor a = testing::random_uniform({2, 3}, -1, 1, 4);
  a.set_requires_grad(true);
  Tensor y = concat({a, a}, 0);
  const Tensor dy = testing::random_uniform(y.shape(), -1, 1, 5);
  backward(y, dy);
  const auto g = testing::to_doubles(dy);
  std::vector<double> ref(6);
  for (int i = 0; i < 6; ++i) ref[i] = g[i] + g[i + 6];
  expect_close(a.grad(), ref, 1e-7, 0, "da = dy top + dy bottom");
}

TEST(Concat, NonContiguousAndIntegerInputs) {
  const Tensor big = testing::random_uniform({2, 3, 4, 6}, -1, 1, 6);
  const Tensor a = big.slice(3, 1, 5), b = testing::random_uniform({2, 5, 4, 4}, -1, 1, 7);
  expect_close(concat({a, b}, 1), reference({a.contiguous(), b}, 1), kExact, kExact, "strided");
  const Tensor i = Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  const Tensor j = Tensor::from_vector<int32_t>({5, 6}, {2, 1});
  EXPECT_EQ(concat({i, j}, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 5, 3, 4, 6}));
}

TEST(Concat, Errors) {
  const Tensor a = Tensor::zeros({2, 3, 4, 4});
  EXPECT_THROW(concat({}, 1), Error);
  EXPECT_THROW(concat({a, Tensor::zeros({2, 3, 5, 4})}, 1), Error);  // H differs, dim is C
  EXPECT_THROW(concat({a, Tensor::zeros({2, 3, 4})}, 1), Error);     // ndim differs
  EXPECT_THROW(concat({a, Tensor::zeros({2, 3, 4, 4}, DType::i32)}, 1), Error);  // dtype
  EXPECT_THROW(concat({a, Tensor()}, 1), Error);
  EXPECT_THROW(concat({a}, 4), Error);
  EXPECT_THROW(concat({a}, -5), Error);
  EXPECT_THROW(concat({Tensor::scalar(1.0f)}, 0), Error);
  try {
    concat({a, a, Tensor::zeros({2, 3, 5, 4})}, 1);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("input 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dimension 2"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tg
