// reduce: naive double reference, the raw kernel API over many sizes, determinism across runs
// and OpenMP thread counts, gradient checks, and the exact backward of each reduction.
#include "nn/ops/reduce.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// Both sides accumulate in double; only the final rounding to f32 (half an ulp) remains.
constexpr double kRtol = 1e-6, kAtol = 1e-6;
// Backward formulas are one or two f32 multiplications: exact up to an ulp.
constexpr double kGradTol = 1e-6;

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max_abs,
                             ReduceOp::sum_squares, ReduceOp::l1};
const int64_t kSizes[] = {1, 3, 1000, 8192, 8193, (1 << 20) + 7};

// Naive reference: one sequential double loop.
double reference(ReduceOp op, const std::vector<double>& x) {
  double acc = 0.0;
  for (double v : x) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        acc += v;
        break;
      case ReduceOp::max_abs:
        acc = std::max(acc, std::fabs(v));
        break;
      case ReduceOp::sum_squares:
        acc += v * v;
        break;
      case ReduceOp::l1:
        acc += std::fabs(v);
        break;
    }
  }
  return op == ReduceOp::mean ? acc / static_cast<double>(x.size()) : acc;
}

// Naive reference of dx for the seed dy.
std::vector<double> reference_grad(ReduceOp op, const std::vector<double>& x, double dy) {
  std::vector<double> g(x.size(), 0.0);
  size_t first_max = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i]) > std::fabs(x[first_max])) first_max = i;
  for (size_t i = 0; i < x.size(); ++i) {
    const double sign = x[i] > 0 ? 1.0 : x[i] < 0 ? -1.0 : 0.0;
    switch (op) {
      case ReduceOp::sum:
        g[i] = dy;
        break;
      case ReduceOp::mean:
        g[i] = dy / static_cast<double>(x.size());
        break;
      case ReduceOp::max_abs:
        g[i] = i == first_max ? sign * dy : 0.0;
        break;
      case ReduceOp::sum_squares:
        g[i] = 2 * x[i] * dy;
        break;
      case ReduceOp::l1:
        g[i] = sign * dy;
        break;
    }
  }
  return g;
}

std::string label(ReduceOp op, int64_t n) {
  return std::string(reduce_op_name(op)) + " n=" + std::to_string(n);
}

TEST(Reduce, MatchesReferenceOverSizes) {
  for (int64_t n : kSizes) {
    // Centred data (sums with cancellation) and large one-signed data (big magnitudes).
    for (auto [lo, hi] : {std::pair{-2.f, 2.f}, std::pair{900.f, 1000.f}}) {
      Tensor x = random_uniform({n}, lo, hi, static_cast<uint64_t>(n));
      const auto xv = testing::to_doubles(x);
      for (ReduceOp op : kOps) {
        const double ref = reference(op, xv);
        float raw = NAN;
        reduce_cpu(op, x.data<float>(), n, &raw);
        EXPECT_NEAR(raw, ref, kAtol + kRtol * std::fabs(ref)) << "reduce_cpu " << label(op, n);
        Tensor out = reduce(x, op);
        EXPECT_EQ(out.shape(), Shape{});
        EXPECT_TRUE(out.device().is_cpu());
        EXPECT_NEAR(out.item<float>(), ref, kAtol + kRtol * std::fabs(ref)) << label(op, n);
      }
    }
  }
}

TEST(Reduce, NamedFrontendsAndShapes) {
  Tensor x = random_uniform({3, 4, 5}, -1, 1, 7);
  const auto xv = testing::to_doubles(x);
  const auto near = [](const Tensor& t, double ref) {
    return std::fabs(t.item<float>() - ref) <= kAtol + kRtol * std::fabs(ref);
  };
  EXPECT_TRUE(near(sum(x), reference(ReduceOp::sum, xv)));
  EXPECT_TRUE(near(mean(x), reference(ReduceOp::mean, xv)));
  EXPECT_TRUE(near(max_abs(x), reference(ReduceOp::max_abs, xv)));
  EXPECT_TRUE(near(sum_squares(x), reference(ReduceOp::sum_squares, xv)));
  EXPECT_TRUE(near(l1_norm(x), reference(ReduceOp::l1, xv)));
  // A scalar input, and a non-contiguous view.
  EXPECT_FLOAT_EQ(sum(Tensor::scalar(-2.5f)).item<float>(), -2.5f);
  Tensor big = random_uniform({6, 8}, -1, 1, 8);
  Tensor v = big.slice(1, 2, 7);
  ASSERT_FALSE(v.is_contiguous());
  const auto vv = testing::to_doubles(v.contiguous());
  for (ReduceOp op : kOps)
    EXPECT_TRUE(near(reduce(v, op), reference(op, vv))) << reduce_op_name(op) << " strided";
}

TEST(Reduce, EmptyInput) {
  Tensor e = Tensor::zeros({0});
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max_abs, ReduceOp::sum_squares, ReduceOp::l1}) {
    EXPECT_EQ(reduce(e, op).item<float>(), 0.f) << reduce_op_name(op);
    float raw = NAN;
    reduce_cpu(op, nullptr, 0, &raw);
    EXPECT_EQ(raw, 0.f) << reduce_op_name(op);
  }
  EXPECT_THROW(mean(e), Error);
  float raw = 0;
  EXPECT_THROW(reduce_cpu(ReduceOp::mean, nullptr, 0, &raw), Error);
  int64_t k = 7;
  argmax_abs_cpu(nullptr, 0, &k);
  EXPECT_EQ(k, -1);
}

TEST(Reduce, Errors) {
  EXPECT_THROW(sum(Tensor::zeros({3}, DType::i32)), Error);
  EXPECT_THROW(max_abs(Tensor()), Error);
  try {
    mean(Tensor::zeros({2, 0}));
    ADD_FAILURE() << "mean of an empty tensor did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mean"), std::string::npos) << e.what();
  }
}

// Same bits every run, and for every OpenMP thread count (the block partition is fixed by n).
TEST(Reduce, DeterministicAcrossRunsAndThreadCounts) {
  const int64_t n = (1 << 20) + 7;
  Tensor x = testing::random_normal({n}, 3.0f, 21);
  const int saved = omp_get_max_threads();
  for (ReduceOp op : kOps) {
    float first = NAN;
    reduce_cpu(op, x.data<float>(), n, &first);
    for (int threads : {1, 2, 3, 8}) {
      omp_set_num_threads(threads);
      float again = NAN;
      reduce_cpu(op, x.data<float>(), n, &again);
      EXPECT_EQ(std::memcmp(&first, &again, sizeof(float)), 0)
          << label(op, n) << " with " << threads << " threads: " << first << " vs " << again;
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(reduce(x, op).item<float>(), reduce(x, op).item<float>()) << label(op, n);
  }
}

TEST(Reduce, ArgmaxAbsTakesTheFirstMaximum) {
  const std::vector<float> v = {1.f, -3.f, 2.f, 3.f, -3.f};
  int64_t k = -7;
  argmax_abs_cpu(v.data(), 5, &k);
  EXPECT_EQ(k, 1);
  // Ties across the CPU blocks: the earliest block wins.
  const int64_t n = 3 * 8192 + 5;
  std::vector<float> w(n, 0.5f);
  w[n - 2] = -9.f;
  w[8192 + 17] = 9.f;
  w[2 * 8192] = 9.f;
  argmax_abs_cpu(w.data(), n, &k);
  EXPECT_EQ(k, 8192 + 17);
}

TEST(Reduce, BackwardMatchesReference) {
  const float dy = 0.7f;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{(1 << 20) + 7}}) {
    Tensor base = random_uniform({n}, -2, 2, static_cast<uint64_t>(n) + 5);
    if (n >= 3) {  // a zero (l1 subgradient 0) and a tie for max |x| (first index wins)
      float* p = base.data<float>();
      p[0] = 0.f;
      p[1] = -2.5f;
      p[n - 1] = 2.5f;
    }
    const auto xv = testing::to_doubles(base);
    for (ReduceOp op : kOps) {
      Tensor x = base.clone();
      x.set_requires_grad(true);
      Tensor y = reduce(x, op);
      ASSERT_TRUE(y.requires_grad());
      backward(y, Tensor::scalar(dy));
      expect_close(x.grad(), reference_grad(op, xv, dy), kGradTol, kGradTol,
                   "grad " + label(op, n));
    }
  }
}

TEST(Reduce, NoTapeWithoutGrad) {
  clear_tape();
  Tensor x = random_uniform({10}, -1, 1, 3);
  (void)sum(x);
  EXPECT_EQ(tape_size(), 0u);
  x.set_requires_grad(true);
  {
    NoGradGuard guard;
    (void)sum(x);
  }
  EXPECT_EQ(tape_size(), 0u);
  (void)sum(x);
  EXPECT_EQ(tape_size(), 1u);
  clear_tape();
}

TEST(Reduce, Gradients) {
  // Smooth everywhere: any inputs.
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::sum_squares}) {
    SCOPED_TRACE(reduce_op_name(op));
    Tensor x = random_uniform({3, 4}, -2, 2, 31);
    x.set_requires_grad(true);
    testing::gradcheck([op](const std::vector<Tensor>& in) { return reduce(in[0], op); }, {x});
  }
  // Kinks at 0 and at ties of |x|: distinct values >= 0.025 away from 0, |x| gaps >= 0.05,
  // both far beyond the gradcheck step (1e-2).
  for (ReduceOp op : {ReduceOp::max_abs, ReduceOp::l1}) {
    SCOPED_TRACE(reduce_op_name(op));
    Tensor x = testing::random_distinct({3, 4}, 0.1f, 32);
    x.set_requires_grad(true);
    testing::gradcheck([op](const std::vector<Tensor>& in) { return reduce(in[0], op); }, {x});
  }
}

}  // namespace
}  // namespace tg
