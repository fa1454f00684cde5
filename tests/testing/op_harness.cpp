#include "tests/testing/op_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "nn/core/philox.h"
#include "nn/init/init.h"

namespace tg::testing {

Tensor random_uniform(const Shape& shape, float lo, float hi, uint64_t seed, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  init::uniform_(t, lo, hi, seed, rng_stream(RngPurpose::test, stream));
  return t;
}

Tensor random_normal(const Shape& shape, float std, uint64_t seed, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  init::normal_(t, 0.0f, std, seed, rng_stream(RngPurpose::test, stream, 1));
  return t;
}

Tensor random_distinct(const Shape& shape, float gap, uint64_t seed) {
  const int64_t n = numel_of(shape);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates with Philox words.
  for (int64_t i = n - 1; i > 0; --i) {
    const uint32_t w = philox_word(seed, rng_stream(RngPurpose::test, 99), i);
    std::swap(order[i], order[w % (i + 1)]);
  }
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = (static_cast<float>(order[i]) - 0.5f * static_cast<float>(n)) * gap + 0.25f * gap;
  return Tensor::from_vector(v, shape);
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<float> f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what << ": size mismatch";
  size_t worst = 0, bad = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tol = atol + rtol * std::fabs(expected[i]);
    const double err = std::fabs(actual[i] - expected[i]);
    const double excess = std::isnan(actual[i]) ? INFINITY : err - tol;
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << actual.size()
                     << " elements out of tolerance (atol " << atol << ", rtol " << rtol
                     << "); worst at " << worst << ": got " << actual[worst] << ", expected "
                     << expected[worst];
}

void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape())
      << what << ": shape " << shape_str(actual.shape()) << " vs " << shape_str(expected.shape());
  expect_close(to_doubles(actual), to_doubles(expected), atol, rtol, what);
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol,
                  double rtol, const std::string& what) {
  expect_close(to_doubles(actual), expected, atol, rtol, what);
}

void expect_bitwise_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to_vector<float>(), b = expected.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": first mismatch at " << i << ": got " << a[i] << ", expected "
                    << b[i];
      return;
    }
  }
}

namespace {

double project(const Tensor& out, const std::vector<double>& r) {
  const std::vector<float> o = out.to_vector<float>();
  double s = 0;
  for (size_t i = 0; i < o.size(); ++i) s += static_cast<double>(o[i]) * r[i];
  return s;
}

}  // namespace

void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
               std::vector<Tensor> inputs, const GradcheckOptions& opt) {
  clear_tape();
  Tensor out = fn(inputs);
  ASSERT_TRUE(out.requires_grad()) << "gradcheck: output does not require grad";
  Tensor r = random_uniform(out.shape(), -1.0f, 1.0f, opt.seed, 77);
  const std::vector<double> rd = to_doubles(r);
  backward(out, r.to(out.device()));

  NoGradGuard no_grad;
  for (size_t in = 0; in < inputs.size(); ++in) {
    Tensor& x = inputs[in];
    if (!x.defined() || !x.requires_grad()) continue;
    ASSERT_TRUE(x.device().is_cpu()) << "gradcheck: input " << in << " must be on the CPU";
    ASSERT_TRUE(x.grad().defined()) << "gradcheck: input " << in << " received no gradient";
    const std::vector<double> analytic = to_doubles(x.grad());
    float* p = x.data<float>();
    const int64_t n = x.numel();
    std::vector<int64_t> coords;
    if (n <= opt.max_coords) {
      for (int64_t k = 0; k < n; ++k) coords.push_back(k);
    } else {
      for (int j = 0; j < opt.max_coords; ++j)
        coords.push_back(philox_word(opt.seed, rng_stream(RngPurpose::test, 5, in), j) % n);
    }
    int kinks = 0, checked = 0;
    for (int64_t k : coords) {
      const float orig = p[k];
      const double l0 = project(fn(inputs), rd);
      p[k] = static_cast<float>(orig + opt.eps);
      const double lp = project(fn(inputs), rd);
      p[k] = static_cast<float>(orig - opt.eps);
      const double lm = project(fn(inputs), rd);
      p[k] = orig;
      const double h = opt.eps;
      const double fd = (lp - lm) / (2 * h);
      const double dp = (lp - l0) / h, dm = (l0 - lm) / h;
      const double tol = opt.atol + opt.rtol * std::fabs(fd);
      if (std::fabs(dp - dm) > 10 * tol) {  // derivative jumps inside [x-h, x+h]: a kink
        ++kinks;
        continue;
      }
      ++checked;
      EXPECT_NEAR(analytic[k], fd,
                  opt.atol + opt.rtol * std::max(std::fabs(fd), std::fabs(analytic[k])))
          << "input " << in << " coordinate " << k << " (of " << n << ")";
    }
    EXPECT_LE(kinks, opt.max_kink_fraction * static_cast<double>(coords.size()))
        << "input " << in << ": too many coordinates skipped as kinks";
    EXPECT_GT(checked, 0) << "input " << in << ": no coordinate checked";
  }
  clear_tape();
}

}  // namespace tg::testing
