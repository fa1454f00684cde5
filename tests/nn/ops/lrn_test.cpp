// lrn: naive O(C*r) double reference for forward and backward, the paper's two configurations,
// C smaller than the window, odd H/W, drift of the running window, gradient checks, errors.
#include "nn/ops/lrn.h"

#include <cmath>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// f32 kernel vs double reference: a pow and a few roundings per element.
constexpr double kAtol = 1e-6, kRtol = 2e-5;

const LrnOptions kCifarNet{4, 1.0f, 0.001f / 9.0f, 0.75f};
const LrnOptions kAlexNet{2, 2.0f, 1e-4f, 0.75f};

struct Reference {
  std::vector<double> y, dx;
};

// Direct window sums over channels at each pixel (O(C*r)), everything in double.
Reference reference(const Tensor& x, const Tensor& dy, const LrnOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
  const auto xv = testing::to_doubles(x), gv = testing::to_doubles(dy);
  const double bias = o.bias, alpha = o.alpha, beta = o.beta;
  std::vector<double> norm(xv.size());
  Reference r{std::vector<double>(xv.size()), std::vector<double>(xv.size())};
  auto at = [&](int64_t n, int64_t c, int64_t p) { return (n * C + c) * HW + p; };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, c - o.depth_radius);
             k <= std::min<int64_t>(C - 1, c + o.depth_radius); ++k)
          sq += xv[at(n, k, p)] * xv[at(n, k, p)];
        norm[at(n, c, p)] = bias + alpha * sq;
        r.y[at(n, c, p)] = xv[at(n, c, p)] * std::pow(norm[at(n, c, p)], -beta);
      }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < C; ++j)
      for (int64_t p = 0; p < HW; ++p) {
        double s = 0;
        for (int64_t i = std::max<int64_t>(0, j - o.depth_radius);
             i <= std::min<int64_t>(C - 1, j + o.depth_radius); ++i)
          s += gv[at(n, i, p)] * xv[at(n, i, p)] * std::pow(norm[at(n, i, p)], -beta - 1);
        const int64_t q = at(n, j, p);
        r.dx[q] = gv[q] * std::pow(norm[q], -beta) - 2 * alpha * beta * xv[q] * s;
      }
  return r;
}

struct Case {
  Shape shape;
  LrnOptions o;
  float scale;  // inputs uniform in [-scale, scale): CifarNet/AlexNet activations are O(1..10)
  const char* what;
};
const Case kCases[] = {
    {{2, 64, 3, 5}, kCifarNet, 4.0f, "CifarNet"},
    {{2, 48, 5, 3}, kAlexNet, 8.0f, "AlexNet"},
    {{2, 3, 4, 5}, LrnOptions{}, 1.0f, "TF defaults, C=3 < window 11"},
    {{1, 7, 5, 3}, LrnOptions{2, 1.0f, 0.5f, 0.75f}, 1.0f, "odd H/W, big alpha"},
    {{3, 1, 3, 3}, LrnOptions{}, 1.0f, "C=1"},
    {{2, 6, 1, 1}, LrnOptions{0, 0.5f, 2.0f, 1.0f}, 1.0f, "radius 0"},
    {{1, 5, 17, 19}, LrnOptions{6, 1.0f, 0.1f, 0.5f}, 1.0f, "window exactly spans C"},
    {{2, 10, 300, 1}, kCifarNet, 4.0f, "HW > one CPU chunk"},
};

TEST(Lrn, ForwardBackwardMatchReference) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    Tensor x = random_uniform(c.shape, -c.scale, c.scale, 1);
    Tensor dy = random_uniform(c.shape, -1, 1, 2);
    const Reference ref = reference(x, dy, c.o);
    x.set_requires_grad(true);
    Tensor y = lrn(x, c.o);
    expect_close(y, ref.y, kAtol, kRtol, std::string("forward ") + c.what);
    backward(y, dy);
    expect_close(x.grad(), ref.dx, kAtol, kRtol, std::string("backward ") + c.what);
  }
}

// The running window adds and later subtracts each x^2; a huge channel (x^2 ~ 1e8) next to tiny
// ones must not leave a residue that shifts the far channels' norm (an f32 running sum would
// leave ~10 behind; the double one leaves ~1e-8).
TEST(Lrn, RunningWindowDoesNotDrift) {
  const int64_t C = 32;
  std::vector<float> v(C * 4);
  for (int64_t c = 0; c < C; ++c)
    for (int p = 0; p < 4; ++p) v[c * 4 + p] = (c == 3 ? 3e3f : 1e-3f) * (1 + p);
  Tensor x = Tensor::from_vector(v, {1, C, 2, 2});
  const LrnOptions o{2, 1.0f, 1.0f, 0.75f};
  Tensor dy = random_uniform(x.shape(), -1, 1, 3);
  const Reference ref = reference(x, dy, o);
  x.set_requires_grad(true);
  Tensor y = lrn(x, o);
  expect_close(y, ref.y, 0, kRtol, "forward");
  backward(y, dy);
  expect_close(x.grad(), ref.dx, 0, 1e-4 /* dx sums terms of both signs */, "backward");
}

TEST(Lrn, NonContiguousInput) {
  Tensor big = random_uniform({2, 8, 4, 6}, -2, 2, 4);
  Tensor x = big.slice(1, 2, 7);  // [2, 5, 4, 6], channel-sliced view
  Tensor dy = random_uniform(x.shape(), -1, 1, 5);
  const Reference ref = reference(x.contiguous(), dy, kAlexNet);
  expect_close(lrn(x, kAlexNet), ref.y, kAtol, kRtol, "strided forward");
}

TEST(Lrn, RecordsOnlyWhenNeeded) {
  clear_tape();
  Tensor x = random_uniform({1, 4, 2, 2}, -1, 1, 6);
  lrn(x);
  EXPECT_EQ(tape_size(), 0u);
  x.set_requires_grad(true);
  {
    NoGradGuard g;
    lrn(x);
    EXPECT_EQ(tape_size(), 0u);
  }
  lrn(x);
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
}

TEST(Lrn, Gradcheck) {
  const LrnOptions configs[] = {LrnOptions{}, kCifarNet, kAlexNet, LrnOptions{1, 0.5f, 1.5f, 0.9f}};
  for (const LrnOptions& o : configs) {
    SCOPED_TRACE("radius " + std::to_string(o.depth_radius) + " alpha " + std::to_string(o.alpha));
    Tensor x = random_uniform({2, 7, 3, 3}, -1.5f, 1.5f, 7);
    x.set_requires_grad(true);
    testing::gradcheck([&o](const std::vector<Tensor>& in) { return lrn(in[0], o); }, {x});
  }
}

TEST(Lrn, Errors) {
  EXPECT_THROW(lrn(Tensor::zeros({2, 3, 4})), Error);        // 3-D
  EXPECT_THROW(lrn(Tensor::zeros({2, 3, 4, 4, 1})), Error);  // 5-D
  EXPECT_THROW(lrn(Tensor::zeros({1, 3, 2, 2}, DType::i32)), Error);
  EXPECT_THROW(lrn(Tensor()), Error);
  EXPECT_THROW(lrn(Tensor::zeros({1, 3, 2, 2}), LrnOptions{-1, 1, 1, 0.5f}), Error);
}

}  // namespace
}  // namespace tg
