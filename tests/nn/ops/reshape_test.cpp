// reshape / flatten: values (row-major order preserved), view vs copy, -1 inference, gradients
// reshaped back, autograd metadata of views, errors.
#include "nn/ops/reshape.h"

#include "nn/autograd/tape.h"
#include "nn/ops/elementwise.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;

// Reshaping moves no values: exact.
constexpr double kExact = 0.0;

TEST(Reshape, ContiguousInputGivesAView) {
  const Tensor x = testing::random_uniform({2, 3, 4}, -1, 1, 1);
  Tensor y = reshape(x, {4, -1});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_TRUE(y.shares_storage_with(x));
  EXPECT_EQ(y.raw_data(), x.raw_data());
  expect_close(y, testing::to_doubles(x), kExact, kExact, "values in row-major order");
}

TEST(Reshape, NonContiguousInputGivesACopy) {
  const Tensor big = testing::random_uniform({4, 6}, -1, 1, 2);
  const Tensor x = big.slice(1, 1, 4);  // [4, 3], row stride 6
  Tensor y = reshape(x, {12});
  EXPECT_FALSE(y.shares_storage_with(big));
  expect_close(y, testing::to_doubles(x.contiguous()), kExact, kExact, "copied values");
}

TEST(Reshape, Flatten) {
  const Tensor x = testing::random_uniform({2, 3, 4, 5}, -1, 1, 3);
  Tensor y = flatten(x);
  EXPECT_EQ(y.shape(), (Shape{2, 60}));
  expect_close(y, testing::to_doubles(x), kExact, kExact, "flatten values");
  EXPECT_EQ(flatten(Tensor::zeros({0, 3, 2})).shape(), (Shape{0, 6}));
  EXPECT_EQ(flatten(Tensor::zeros({5})).shape(), (Shape{5, 1}));
}

TEST(Reshape, BackwardReshapesDyBack) {
  Tensor x = testing::random_uniform({2, 3, 4}, -1, 1, 4);
  x.set_requires_grad(true);
  Tensor y = reshape(x, {6, 4});
  ASSERT_TRUE(y.requires_grad());
  EXPECT_TRUE(x.autograd_meta()->is_leaf) << "the view must not take over x's metadata";
  const Tensor dy = testing::random_uniform({6, 4}, -1, 1, 5);
  backward(y, dy);
  ASSERT_EQ(x.grad().shape(), x.shape());
  expect_close(x.grad(), testing::to_doubles(dy), kExact, kExact, "dx");
}

TEST(Reshape, Gradients) {
  Tensor x = testing::random_uniform({2, 3, 2, 2}, -1, 1, 6);
  x.set_requires_grad(true);
  testing::gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {3, -1, 2}); }, {x});
  x.autograd_meta()->grad = Tensor();
  // flatten after an op, then an op on the flat view: the chain NCHW -> [N, CHW] -> fc.
  testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        return affine(flatten(affine(in[0], 2.0f, 0.5f)), -1.5f, 0.0f);
      },
      {x});
}

TEST(Reshape, NoGradNoRecordAndFreshMetadata) {
  clear_tape();
  Tensor x = testing::random_uniform({2, 3}, -1, 1, 7);
  x.set_requires_grad(false);
  Tensor y = reshape(x, {3, 2});
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(tape_size(), 0u);
  y.set_requires_grad(true);
  EXPECT_FALSE(x.requires_grad()) << "the view must not share x's autograd metadata";
}

TEST(Reshape, Errors) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(reshape(x, {4, 2}), Error);    // wrong numel
  EXPECT_THROW(reshape(x, {-1, -1}), Error);  // two -1
  EXPECT_THROW(reshape(x, {4, -1}), Error);   // not divisible
  EXPECT_THROW(reshape(Tensor(), {1}), Error);
  EXPECT_THROW(flatten(Tensor::scalar(1.0f)), Error);
}

}  // namespace
}  // namespace tg
