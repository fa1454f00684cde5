// The convergence claims of the paper (Theorem 1), checked numerically: the computations behind
// `terngrad convergence-check`.
//
// (a) Convergence on a strongly convex problem with a known minimum. Ridge regression on synthetic
//     data, C(w) = (1/n) sum_i [ (x_i^T w - y_i)^2 / 2 ] + (lambda / 2) ||w||^2, whose unique
//     minimum is the closed form w* = (X^T X / n + lambda I)^-1 X^T y / n (Cholesky). Data-parallel
//     SGD with N emulated workers, each drawing a minibatch of b samples (with replacement), runs
//     with the learning rate gamma_t = gamma0 / (1 + t / t0): sum gamma_t = inf, sum gamma_t^2 <
//     inf (Assumption 2). Plain SGD averages the N minibatch gradients; TernGrad ternarizes each
//     with a scaler shared across workers (s = max_w s_w, the paper's scaler sharing) and averages
//     the ternary gradients. We record E||w_t - w*||^2 (mean over independent repeats) at
//     log-spaced t and fit the rate: with gamma_t ~ c / t and 2 mu c > 1 (mu the smallest Hessian
//     eigenvalue) the error decays like 1 / t, i.e. slope -1 on a log-log plot. The scaler is
//     max|g| (clip = 0) by default: Theorem 1 is for that unbiased operator; with clip > 0 elements
//     beyond c * sigma are saturated, which biases the gradient.
//
// (b) Unbiasedness and the variance identity of the ternarizer on a given gradient (in practice a
//     real network's gradient, from `terngrad convergence-check`'s training run). For each tensor
//     (slot) with scaler s >= max|g|, D independent ternarizations t_d give
//       E[t] = g                                   (unbiasedness, the paper)
//       E||t||^2 - ||g||^2 = s ||g||_1 - ||g||^2   (the variance identity, derived)
//     and the exact per-element moments of t (values in {-s, 0, +s}, P(keep) = |g_k| / s) give
//     each measured quantity's null distribution, hence a z-score:
//       z_proj  projection of the mean error on g: (m - g) . g / ||g||, normal (two-sided); the
//               most powerful test against a rescaled estimator (E t = a g, a != 1)
//       z_sq    squared error of the mean, ||m - g||^2, against its exact mean V / D and variance
//               (a scaled chi-square matched in two moments, Wilson-Hilferty; one-sided): catches
//               any bias direction
//       z_var   (1/D) sum_d ||t_d||^2 - ||g||^2 against s ||g||_1 - ||g||^2, normal (two-sided)
//     with critical values from the family-wise false-alarm rate alpha split over all the tests
//     of the family (Bonferroni).
//
// The ternarizer is injectable (Ternarizer below) so that tests can show both checks FAIL on a
// deliberately biased one. Host memory only; deterministic for a given seed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "terngrad/compressor.h"

namespace tg::tern {

// ---- ternarizers ---------------------------------------------------------------------------

// Writes out[i] = s * code_i for the n elements of g (host pointers), with scaler s (> 0; s <= 0
// gives all zeros) and the random numbers of (seed, stream).
using Ternarizer = std::function<void(const float* g, int64_t n, float s, uint64_t seed,
                                      uint64_t stream, float* out)>;

// By name:
//   real        the code base's kernel (ternarize_pack_cpu, then unpack): P(keep) = min(|g| / s, 1)
//   half-keep   BIASED: keeps with half the probability and does not rescale: E[t] = g / 2
//   no-abs      BIASED: keep iff u < g / s (a missing fabs): negative elements are never kept,
//               E[t] = max(g, 0)
// Throws on an unknown name, listing the known ones.
Ternarizer make_ternarizer(const std::string& name);
std::vector<std::string> ternarizer_names();

// ---- small dense linear algebra (row-major, double) ----------------------------------------

// Solves A x = b for a symmetric positive definite d x d matrix A (Cholesky). Throws if A is not
// positive definite (naming the pivot).
std::vector<double> solve_spd(std::vector<double> a, std::vector<double> b, int64_t d);
// The eigenvalues of a symmetric d x d matrix, ascending (cyclic Jacobi).
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t d);

// ---- (a) ridge regression --------------------------------------------------------------------

struct RidgeOptions {
  int64_t samples = 1000;  // n
  int64_t dim = 20;        // d
  double lambda = 0.1;     // L2 coefficient
  double noise = 0.5;      // y = x . w_true + noise * N(0, 1)
  uint64_t seed = 123;
};

struct RidgeProblem {
  int64_t n = 0, d = 0;
  double lambda = 0;
  std::vector<double> x;       // [n, d]
  std::vector<double> y;       // [n]
  std::vector<double> w_star;  // [d] the closed-form minimum
  double mu = 0, L = 0;        // smallest and largest eigenvalue of H = X^T X / n + lambda I
};

// Synthetic data: x_i ~ N(0, diag(scale_j^2)) with scale_j spaced evenly in [0.5, 1.5] (a
// condition number of about 10 for the default lambda), w_true ~ N(0, I); then ridge_problem.
RidgeProblem make_ridge_problem(const RidgeOptions& o);
// The problem of given data (x [n, d], y [n]): w* by Cholesky, mu and L by Jacobi. Throws on
// mismatched sizes or lambda < 0.
RidgeProblem ridge_problem(std::vector<double> x, std::vector<double> y, int64_t n, int64_t d,
                           double lambda);
// C(w) and its full gradient (1/n) X^T (X w - y) + lambda w.
double ridge_loss(const RidgeProblem& p, const double* w);
std::vector<double> ridge_gradient(const RidgeProblem& p, const double* w);

struct SgdOptions {
  int64_t iterations = 100000;  // T
  int workers = 2;              // N emulated workers
  int64_t batch = 8;            // samples per worker per step (with replacement)
  double lr0 = 0;               // gamma0; 0 = 0.25 / L
  double t0 = 0;                // decay time; 0 = such that mu * gamma0 * t0 = 2 (2 mu c = 4 > 1)
  double clip = 0;              // TernGrad scaler: 0 = max|g| (the theory's); c > 0: c * sigma
  int repeats = 8;              // independent runs averaged into E||w_t - w*||^2
  int points_per_decade = 4;    // checkpoints at t = round(10^(k / points_per_decade)) and T
  uint64_t seed = 123;
};

// What counts as converged: E||w_T - w*||^2 <= max_rel_error * ||w_0 - w*||^2 (w_0 = 0) AND the
// fitted log-log slope over the last two decades (t >= T / 100) <= max_rate (a decreasing trend;
// theory: -1).
struct ConvergenceCriteria {
  double max_rel_error = 1e-3;
  double max_rate = -0.5;  // halfway between "no decrease" (0) and the theory's -1
};

struct ConvergenceCurve {
  std::string method;         // "sgd" or "terngrad"
  std::vector<int64_t> t;     // checkpoints, 0 first, T last
  std::vector<double> lr;     // gamma_t at each checkpoint
  std::vector<double> error;  // E||w_t - w*||^2 over the repeats
  double initial = 0, final = 0;
  double rel_error = 0;  // final / initial
  double rate = 0;       // least-squares slope of log error vs log t, t >= fit_from
  int64_t fit_from = 0;
  double lr0 = 0, t0 = 0;  // the schedule actually used
  double two_mu_c = 0;     // 2 mu gamma0 t0: > 1 is the condition for the 1/t rate
  bool finite = true;      // no NaN / inf met
  bool pass = false;       // by the criteria
};

// Runs N-worker SGD (tern == nullptr) or TernGrad (with that ternarizer) on p. Each repeat r has
// its own data order and ternarization randomness; in repeat r, worker w's step-t ternarization
// uses seed rng_stream(RngPurpose::test, seed, r) and stream rng_stream(RngPurpose::ternarize, t,
// w, 0), the keys the compressor uses. Throws on invalid options.
ConvergenceCurve run_ridge_sgd(const RidgeProblem& p, const SgdOptions& o, const Ternarizer* tern,
                               const ConvergenceCriteria& criteria = {});
// The schedule run_ridge_sgd resolves from o and p (lr0, t0 filled in).
SgdOptions resolve_schedule(const RidgeProblem& p, SgdOptions o);
// Least-squares slope of log(error) against log(t) over the points with t >= from (and t > 0,
// error > 0); NaN with fewer than two such points.
double loglog_slope(const std::vector<int64_t>& t, const std::vector<double>& error, int64_t from);

// ---- (b) unbiasedness and the variance identity ----------------------------------------------

// Upper-tail quantile of the standard normal: z with P(Z > z) = q (0 < q < 1).
double normal_upper_quantile(double q);

struct MomentOptions {
  int64_t draws = 1024;  // D independent ternarizations per tensor
  double alpha = 1e-3;   // family-wise false-alarm rate
  int64_t family = 0;    // tests alpha is split over; 0 = this call's (3 per tested tensor)
  uint64_t seed = 123;   // draw d uses seed rng_stream(RngPurpose::test, seed, d)
  uint64_t step = 0;     // stream = rng_stream(RngPurpose::ternarize, step, worker, tensor)
  int worker = 0;
};

struct TensorMoments {
  std::string name;
  int64_t numel = 0;
  double s = 0, l1 = 0, l2sq = 0;  // scaler, ||g||_1, ||g||^2
  bool tested = false;             // false: an all-zero tensor (its codes must all be 0)
  // Unbiasedness: m = the mean of the draws.
  double rel_error = 0;           // ||m - g|| / ||g||
  double rel_error_expected = 0;  // sqrt(E||m - g||^2) / ||g|| = sqrt(V / D) / ||g||
  double z_proj = 0, z_sq = 0;
  // Variance identity.
  double excess_expected = 0;  // s ||g||_1 - ||g||^2 = V
  double excess_measured = 0;  // (1/D) sum_d ||t_d||^2 - ||g||^2
  double z_var = 0;
  double mse_measured = 0;  // (1/D) sum_d ||t_d - g||^2 (equals V in expectation when unbiased)
  bool pass_mean = true, pass_var = true;
};

struct MomentCheck {
  std::vector<TensorMoments> tensors;
  int64_t draws = 0, family = 0;
  double alpha = 0;
  double z_crit_two = 0;  // |z_proj|, |z_var| above it fail
  double z_crit_one = 0;  // z_sq above it fails
  bool pass_mean = true, pass_var = true;
};

// Ternarizes the flat gradient g (host, layout's total elements) D times, tensor by tensor with
// scalers[t] (one per slot; each must be >= max|g| over the slot, i.e. clip = 0, or the identity
// does not hold: checked), and tests the moments as described at the top. Throws on a layout
// that does not fit, a scaler below the slot's max|g|, draws < 2 or alpha outside (0, 1).
MomentCheck check_ternary_moments(const float* g, std::span<const GradSlot> layout,
                                  std::span<const float> scalers, const Ternarizer& tern,
                                  const MomentOptions& o);
// max|g| of each slot: the unclipped scalers of one worker.
std::vector<float> max_abs_scalers(const float* g, std::span<const GradSlot> layout);

}  // namespace tg::tern
