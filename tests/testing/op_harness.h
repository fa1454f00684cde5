// Shared harness of the op tests: random inputs from Philox, closeness checks with named
// tolerances, a finite-difference gradient checker, and the CUDA-skip guard.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "nn/autograd/tape.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"

namespace tg::testing {

// Skips the current test unless a CUDA device is present (CPU-only build or no GPU).
#define TG_REQUIRE_CUDA()                                                     \
  do {                                                                        \
    if (::tg::cuda::device_count() == 0)                                      \
      GTEST_SKIP() << "no CUDA device: " << ::tg::cuda::unavailable_reason(); \
  } while (0)

// Host f32 tensor, uniform in [lo, hi), deterministic in (seed, stream).
Tensor random_uniform(const Shape& shape, float lo, float hi, uint64_t seed, uint64_t stream = 0);
Tensor random_normal(const Shape& shape, float std, uint64_t seed, uint64_t stream = 0);
// Values whose pairwise gaps are all >= `gap` (a shuffled, jittered grid): no ties and no
// kinks within +-gap/2 for max-pool / ReLU gradient checks.
Tensor random_distinct(const Shape& shape, float gap, uint64_t seed);

std::vector<double> to_doubles(const Tensor& t);

// Expects |actual - expected| <= atol + rtol * |expected| element-wise; reports the worst index.
void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const std::string& what);
void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol,
                  const std::string& what);
void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol,
                  double rtol, const std::string& what);

// Expects the two f32 tensors to hold the same bits element by element (same shape); reports the
// first mismatch. For results defined to be identical across devices (dropout masks, ReLU,
// max-pool argmax routing).
void expect_bitwise_equal(const Tensor& actual, const Tensor& expected, const std::string& what);

struct GradcheckOptions {
  double eps = 1e-2;                // central-difference step (f32 forward: not smaller)
  double atol = 2e-3;               // absolute tolerance on d(loss)/d(x_k)
  double rtol = 2e-2;               // relative tolerance
  int max_coords = 48;              // sampled coordinates per input (all if fewer)
  double max_kink_fraction = 0.25;  // coordinates skipped as kinks may not exceed this
  uint64_t seed = 1234;
};

// Checks the tape's gradient of loss = sum(fn(inputs) * R) (R fixed random) against central
// finite differences, for every input with requires_grad(). Inputs must be CPU f32 tensors.
// A coordinate whose one-sided differences disagree (a kink: ReLU at 0, max-pool ties) is
// skipped; the fraction skipped is bounded by max_kink_fraction.
void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
               std::vector<Tensor> inputs, const GradcheckOptions& opt = {});

}  // namespace tg::testing
