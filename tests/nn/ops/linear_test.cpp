// matmul and linear: naive triple-loop references (double accumulation) for the product and
// each gradient, finite-difference gradient checks, and argument errors.
#include "nn/ops/linear.h"

#include <functional>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// f32 GEMM sums of up to ~300 products of O(1) values against a double reference.
constexpr double kAtol = 1e-4, kRtol = 1e-4;

// c[m, n] = sum_k a[m, k] * b[k, n] with a [M, K] and b [K, N] given by element accessors.
std::vector<double> ref_product(int64_t M, int64_t N, int64_t K,
                                const std::function<double(int64_t, int64_t)>& a,
                                const std::function<double(int64_t, int64_t)>& b) {
  std::vector<double> c(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) c[m * N + n] += a(m, k) * b(k, n);
  return c;
}

struct Dims {
  int64_t M, K, N;
};
const Dims kDims[] = {{1, 1, 1}, {4, 3, 5}, {7, 16, 1}, {64, 300, 10}, {3, 0, 2}};

TEST(Matmul, ForwardAndBackwardMatchReference) {
  uint64_t seed = 1;
  for (const Dims& d : kDims) {
    SCOPED_TRACE("M=" + std::to_string(d.M) + " K=" + std::to_string(d.K) +
                 " N=" + std::to_string(d.N));
    Tensor a = random_uniform({d.M, d.K}, -1, 1, seed, 0),
           b = random_uniform({d.K, d.N}, -1, 1, seed, 1);
    ++seed;
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    const auto av = testing::to_doubles(a), bv = testing::to_doubles(b);
    Tensor y = matmul(a, b);
    EXPECT_EQ(y.shape(), (Shape{d.M, d.N}));
    expect_close(y,
                 ref_product(
                     d.M, d.N, d.K, [&](int64_t m, int64_t k) { return av[m * d.K + k]; },
                     [&](int64_t k, int64_t n) { return bv[k * d.N + n]; }),
                 kAtol, kRtol, "y");
    const Tensor dy = random_uniform({d.M, d.N}, -1, 1, seed, 2);
    const auto gv = testing::to_doubles(dy);
    backward(y, dy);
    // da = dy b^T, db = a^T dy, written out from the definition of the transposes.
    expect_close(a.grad(),
                 ref_product(
                     d.M, d.K, d.N, [&](int64_t m, int64_t n) { return gv[m * d.N + n]; },
                     [&](int64_t n, int64_t k) { return bv[k * d.N + n]; }),
                 kAtol, kRtol, "da");
    expect_close(b.grad(),
                 ref_product(
                     d.K, d.N, d.M, [&](int64_t k, int64_t m) { return av[m * d.K + k]; },
                     [&](int64_t m, int64_t n) { return gv[m * d.N + n]; }),
                 kAtol, kRtol, "db");
  }
}

TEST(Linear, ForwardAndBackwardMatchReference) {
  uint64_t seed = 20;
  for (const Dims& d : kDims) {
    SCOPED_TRACE("N=" + std::to_string(d.M) + " in=" + std::to_string(d.K) +
                 " out=" + std::to_string(d.N));
    for (bool with_bias : {true, false}) {
      Tensor x = random_uniform({d.M, d.K}, -1, 1, seed, 0),
             w = random_uniform({d.K, d.N}, -1, 1, seed, 1);
      Tensor b = with_bias ? random_uniform({d.N}, -1, 1, seed, 2) : Tensor();
      ++seed;
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      if (with_bias) b.set_requires_grad(true);
      const auto xv = testing::to_doubles(x), wv = testing::to_doubles(w);
      std::vector<double> ref = ref_product(
          d.M, d.N, d.K, [&](int64_t m, int64_t k) { return xv[m * d.K + k]; },
          [&](int64_t k, int64_t n) { return wv[k * d.N + n]; });
      if (with_bias) {
        const auto bv = testing::to_doubles(b);
        for (int64_t m = 0; m < d.M; ++m)
          for (int64_t n = 0; n < d.N; ++n) ref[m * d.N + n] += bv[n];
      }
      Tensor y = linear(x, w, b);
      expect_close(y, ref, kAtol, kRtol, with_bias ? "y" : "y without bias");
      const Tensor dy = random_uniform({d.M, d.N}, -1, 1, seed, 3);
      const auto gv = testing::to_doubles(dy);
      backward(y, dy);
      expect_close(x.grad(),
                   ref_product(
                       d.M, d.K, d.N, [&](int64_t m, int64_t n) { return gv[m * d.N + n]; },
                       [&](int64_t n, int64_t k) { return wv[k * d.N + n]; }),
                   kAtol, kRtol, "dx");
      expect_close(w.grad(),
                   ref_product(
                       d.K, d.N, d.M, [&](int64_t k, int64_t m) { return xv[m * d.K + k]; },
                       [&](int64_t m, int64_t n) { return gv[m * d.N + n]; }),
                   kAtol, kRtol, "dw");
      if (with_bias) {
        std::vector<double> db(d.N, 0.0);
        for (int64_t m = 0; m < d.M; ++m)
          for (int64_t n = 0; n < d.N; ++n) db[n] += gv[m * d.N + n];
        expect_close(b.grad(), db, kAtol, kRtol, "dbias");
      }
    }
  }
}

TEST(Linear, OnlyRequestedGradients) {
  Tensor x = random_uniform({5, 4}, -1, 1, 30), w = random_uniform({4, 3}, -1, 1, 31),
         b = random_uniform({3}, -1, 1, 32);
  b.set_requires_grad(true);
  Tensor y = linear(x, w, b);
  backward(y, Tensor::full({5, 3}, 1.0));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  expect_close(b.grad(), std::vector<double>(3, 5.0), kAtol, kRtol, "dbias of ones");
}

TEST(Linear, NonContiguousInputs) {
  const Tensor big = random_uniform({6, 8}, -1, 1, 40);
  const Tensor a = big.slice(1, 2, 7);  // [6, 5], row stride 8
  const Tensor b = random_uniform({5, 3}, -1, 1, 41);
  expect_close(matmul(a, b), matmul(a.contiguous(), b), 0, 0, "strided a");
}

TEST(Linear, Gradcheck) {
  Tensor a = random_uniform({4, 6}, -1, 1, 50), b = random_uniform({6, 3}, -1, 1, 51);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  testing::gradcheck([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {a, b});
  Tensor x = random_uniform({5, 7}, -1, 1, 52), w = random_uniform({7, 4}, -1, 1, 53),
         bias = random_uniform({4}, -1, 1, 54);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  bias.set_requires_grad(true);
  testing::gradcheck([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
                     {x, w, bias});
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Linear, Errors) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  const std::string msg = error_of([&] { matmul(a, b); });
  EXPECT_NE(msg.find("inner dimensions 3 and 4 differ"), std::string::npos) << msg;
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 2})), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 3, 1}), Tensor::zeros({3, 2})), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 2}), Tensor()), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), Tensor::zeros({3})), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}, DType::i32), Tensor()), Error);
  EXPECT_THROW(linear(Tensor::zeros({3}), Tensor::zeros({3, 2}), Tensor()), Error);
}

}  // namespace
}  // namespace tg
