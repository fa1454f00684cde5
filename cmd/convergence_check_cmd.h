// `terngrad convergence-check`: the paper's convergence claims (Theorem 1), checked numerically
// with terngrad/analysis/convergence.h, one verdict per check:
//   ridge-sgd, ridge-terngrad   (a) on ridge regression (unique closed-form minimum w*), N-worker
//                               SGD and TernGrad with gamma_t = gamma0 / (1 + t / t0) reach
//                               E||w_T - w*||^2 <= 1e-3 ||w_0 - w*||^2 with a decreasing trend
//                               (fitted log-log rate <= -0.5; the theory's is -1)
//   unbiased@K, variance@K      (b) at each sampled iteration K of a real training run of the
//                               configured network (the Trainer's gradient hook), worker 0's
//                               gradient ternarized D times with the scaler shared over the
//                               workers (clip = 0): E[t] = g, and E||t||^2 - ||g||^2 =
//                               s||g||_1 - ||g||^2, per tensor, as z-tests at family-wise
//                               significance alpha (Bonferroni over every tensor, test and K)
// Prints a table per check and one "PASS"/"FAIL" verdict line per check (stdout; with --json,
// one JSON object per check on stdout and the verdict lines on stderr). Exit 0 when every check
// passes, 2 when one fails (a line names them); errors (bad config, flag) exit 1 via main.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct ConvergenceCheckArgs {
  std::string config_path;             // "" = built-in defaults (LeNet on MNIST)
  std::vector<std::string> overrides;  // --set section.key=value
  std::vector<std::string> checks;     // ridge, real (default both)
  // (a)
  int64_t iterations = 100000;
  int64_t dim = 20;
  int workers = 2;
  int repeats = 8;
  double clip = 0;
  // (b)
  std::vector<int64_t> sample_steps;  // default 0, 10, 100
  int64_t draws = 1024;
  double alpha = 1e-3;
  // both
  std::string ternarizer = "real";  // real | half-keep | no-abs (biased, to see a FAIL)
  uint64_t seed = 123;
  bool json = false;
};

constexpr int kExitCheckFailed = 2;

// Adds the `convergence-check` subcommand with its options bound to `args`; returns it.
CLI::App* add_convergence_check_command(CLI::App& app, ConvergenceCheckArgs& args);

// Runs the checks; returns 0 if all pass, kExitCheckFailed otherwise. Throws tg::Error on bad
// input (config file or key, an unknown check or ternarizer).
int run_convergence_check(const ConvergenceCheckArgs& args);

}  // namespace tg::cli
