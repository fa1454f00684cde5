// relu: naive double reference for forward and backward, NaN/-0 behaviour, gradients away from
// the kink, errors.
#include "nn/ops/relu.h"

#include <cmath>
#include <limits>

#include "nn/autograd/tape.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;

// relu copies or zeroes values and routes dy unchanged: exact.
constexpr double kExact = 0.0;
// random_distinct keeps every value >= gap/4 away from 0; gap/4 > eps = 1e-2 means no finite
// difference straddles the kink.
constexpr float kDistinctGap = 0.1f;

std::vector<double> reference_forward(const Tensor& x) {
  std::vector<double> y = testing::to_doubles(x);
  for (double& v : y) v = v > 0 ? v : 0.0;
  return y;
}

std::vector<double> reference_backward(const Tensor& x, const Tensor& dy) {
  const auto xv = testing::to_doubles(x), g = testing::to_doubles(dy);
  std::vector<double> dx(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) dx[i] = xv[i] > 0 ? g[i] : 0.0;
  return dx;
}

const Shape kShapes[] = {{}, {1}, {7}, {3, 5}, {2, 3, 4, 5}, {4, 16, 33, 33}};

TEST(Relu, MatchesReference) {
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_str(s));
    Tensor x = testing::random_uniform(s, -1, 1, seed++);
    const Tensor dy = testing::random_uniform(s, -1, 1, seed++);
    x.set_requires_grad(true);
    Tensor y = relu(x);
    ASSERT_EQ(y.shape(), s);
    expect_close(y, reference_forward(x), kExact, kExact, "forward");
    backward(y, dy);
    expect_close(x.grad(), reference_backward(x, dy), kExact, kExact, "backward");
  }
}

TEST(Relu, NanPropagatesAndZeroHasZeroGradient) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({nan, -0.0f, 0.0f, -2.0f, 3.0f}, {5});
  x.set_requires_grad(true);
  Tensor y = relu(x);
  const std::vector<float> yv = y.to_vector<float>();
  EXPECT_TRUE(std::isnan(yv[0])) << "NaN must not be masked";
  EXPECT_EQ(yv[1], 0.0f);
  EXPECT_EQ(yv[2], 0.0f);
  EXPECT_EQ(yv[3], 0.0f);
  EXPECT_EQ(yv[4], 3.0f);
  backward(y, Tensor::full({5}, 1.0));
  // The subgradient at 0 (and for NaN) is 0: dx = dy only where y > 0.
  expect_close(x.grad(), {0, 0, 0, 0, 1}, kExact, kExact, "dx");
}

TEST(Relu, NonContiguousInput) {
  const Tensor big = testing::random_uniform({4, 6}, -1, 1, 3);
  const Tensor x = big.slice(1, 1, 4);
  expect_close(relu(x), reference_forward(x.contiguous()), kExact, kExact, "strided");
}

TEST(Relu, Gradients) {
  uint64_t seed = 50;
  for (const Shape& s : {Shape{7}, Shape{2, 3, 4, 5}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor x = testing::random_distinct(s, kDistinctGap, seed++);
    x.set_requires_grad(true);
    testing::GradcheckOptions go;
    go.max_kink_fraction = 0.0;  // no value within eps of 0
    testing::gradcheck([](const std::vector<Tensor>& in) { return relu(in[0]); }, {x}, go);
  }
}

TEST(Relu, RecordsOnlyWhenNeeded) {
  clear_tape();
  EXPECT_FALSE(relu(Tensor::zeros({3})).requires_grad());
  EXPECT_EQ(tape_size(), 0u);
}

TEST(Relu, Errors) {
  EXPECT_THROW(relu(Tensor()), Error);
  EXPECT_THROW(relu(Tensor::zeros({3}, DType::i32)), Error);
}

}  // namespace
}  // namespace tg
