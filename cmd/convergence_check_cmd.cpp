// `terngrad convergence-check` (see convergence_check_cmd.h): its options, (a) ridge regression
// with SGD and TernGrad, and the verdicts; (b), the ternarizer's moments on a real network's
// gradients, is convergence_moments.cpp. The computations are terngrad/analysis/convergence.h.
#include "cmd/convergence_check_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cmd/convergence_moments.h"
#include "nn/core/clock.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "terngrad/analysis/convergence.h"

namespace tg::cli {

namespace {

using convergence_check::fmt;
using convergence_check::real_checks;
using convergence_check::Verdict;
using tern::ConvergenceCriteria;
using tern::ConvergenceCurve;

std::string json_array(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json::number(v[i]);
  return s + "]";
}

std::string json_array(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// ---- (a) ridge regression ----------------------------------------------------------------------

void ridge_checks(const ConvergenceCheckArgs& a, const tern::Ternarizer& tz,
                  std::vector<Verdict>& verdicts) {
  tern::RidgeOptions ro;
  ro.dim = a.dim;
  ro.seed = a.seed;
  const tern::RidgeProblem p = tern::make_ridge_problem(ro);
  tern::SgdOptions so;
  so.iterations = a.iterations;
  so.workers = a.workers;
  so.repeats = a.repeats;
  so.clip = a.clip;
  so.seed = a.seed;
  const ConvergenceCriteria crit;
  std::fprintf(stderr,
               "convergence-check: ridge regression (n = %lld, d = %lld): SGD and TernGrad, "
               "%lld iterations x %d repeats ...\n",
               static_cast<long long>(p.n), static_cast<long long>(p.d),
               static_cast<long long>(so.iterations), so.repeats);
  const auto t_start = Clock::now();
  const ConvergenceCurve sgd = tern::run_ridge_sgd(p, so, nullptr, crit);
  const ConvergenceCurve tg = tern::run_ridge_sgd(p, so, &tz, crit);
  std::fprintf(stderr, "convergence-check: ridge regression done in %.1f s\n",
               seconds_since(t_start));

  const std::string tern_desc = a.ternarizer == "real"
                                    ? "the real ternarizer (terngrad/ternary_kernels.h)"
                                    : "the deliberately BIASED ternarizer '" + a.ternarizer + "'";
  if (!a.json) {
    std::printf(
        "(a) ridge regression: n = %lld, d = %lld, lambda = %g, y = x.w + 0.5 N(0,1); "
        "Hessian eigenvalues mu = %.4g, L = %.4g (condition %.1f)\n",
        static_cast<long long>(p.n), static_cast<long long>(p.d), p.lambda, p.mu, p.L, p.L / p.mu);
    std::printf(
        "    %d workers x batch %lld, gamma_t = gamma0 / (1 + t / t0), gamma0 = %.4g, "
        "t0 = %.4g: sum gamma = inf, sum gamma^2 < inf; 2 mu gamma0 t0 = %.2f %s\n",
        so.workers, static_cast<long long>(so.batch), sgd.lr0, sgd.t0, sgd.two_mu_c,
        sgd.two_mu_c > 1 ? "> 1 (rate 1/t expected)" : "<= 1 (slower than 1/t)");
    std::printf("    TernGrad: %s, one scaler shared by the workers (max over workers of %s)\n",
                tern_desc.c_str(),
                so.clip > 0 ? fmt("%g * sigma: CLIPPED, a biased operator", so.clip).c_str()
                            : "max|g|; clip = 0: Theorem 1's unbiased operator");
    std::printf("    E||w_t - w*||^2 over %d repeats (w_0 = 0):\n", so.repeats);
    std::printf("    %9s %10s %12s %12s %9s\n", "t", "gamma_t", "SGD", "TernGrad", "Tern/SGD");
    for (size_t i = 0; i < sgd.t.size(); ++i)
      std::printf("    %9lld %10.4g %12.4e %12.4e %9.2f\n", static_cast<long long>(sgd.t[i]),
                  sgd.lr[i], sgd.error[i], tg.error[i],
                  sgd.error[i] > 0 ? tg.error[i] / sgd.error[i] : NAN);
    std::printf(
        "    fitted rate (slope of log error vs log t, t >= %lld): SGD %.3f, TernGrad "
        "%.3f (theory -1)\n\n",
        static_cast<long long>(sgd.fit_from), sgd.rate, tg.rate);
  }
  for (const ConvergenceCurve* c : {&sgd, &tg}) {
    Verdict v;
    v.check = "ridge-" + c->method;
    v.pass = c->pass;
    v.detail = "E||w_T - w*||^2 / ||w_0 - w*||^2 = " + fmt("%.3e", c->rel_error) +
               (c->rel_error <= crit.max_rel_error ? " <= " : " > ") +
               fmt("%.0e", crit.max_rel_error) + ", rate " + fmt("%.3f", c->rate) +
               (c->rate <= crit.max_rate ? " <= " : " > (or NaN) ") + fmt("%.2f", crit.max_rate) +
               (c->finite ? "" : ", DIVERGED (non-finite iterate)");
    verdicts.push_back(v);
    if (a.json) {
      json::Object o;
      o.add("check", v.check).add("pass", v.pass).add("method", c->method);
      if (c->method == "terngrad") o.add("ternarizer", a.ternarizer).add("clip", so.clip);
      o.add("n", p.n).add("d", p.d).add("lambda", p.lambda).add("mu", p.mu).add("L", p.L);
      o.add("workers", so.workers).add("batch", so.batch).add("iterations", so.iterations);
      o.add("repeats", so.repeats).add("lr0", c->lr0).add("t0", c->t0);
      o.add("two_mu_c", c->two_mu_c);
      o.add_raw("t", json_array(c->t)).add_raw("lr", json_array(c->lr));
      o.add_raw("error", json_array(c->error));
      o.add("initial", c->initial).add("final", c->final).add("rel_error", c->rel_error);
      o.add("rate", c->rate).add("fit_from", c->fit_from).add("finite", c->finite);
      o.add("max_rel_error", crit.max_rel_error).add("max_rate", crit.max_rate);
      std::printf("%s\n", o.str().c_str());
    }
  }
}

}  // namespace

CLI::App* add_convergence_check_command(CLI::App& app, ConvergenceCheckArgs& a) {
  // One short line in `terngrad --help`; the detail in `terngrad convergence-check --help`.
  auto* cmd = app.add_subcommand("convergence-check",
                                 "Check the paper's convergence claims numerically (PASS/FAIL)");
  cmd->footer(
      "One PASS/FAIL verdict per check: (a) SGD and TernGrad converge to the closed-form minimum "
      "of ridge regression with sum gamma = inf, sum gamma^2 < inf (rate fitted); (b) on a "
      "configured network's real gradients, the ternarizer is unbiased and obeys E||t||^2 - "
      "||g||^2 = s||g||_1 - ||g||^2. Exit 0 if all pass, 2 if one fails, 1 on an error.");
  cmd->add_option("-c,--config", a.config_path,
                  "(b) TOML config of the training run that supplies gradients (default: the "
                  "built-in LeNet/MNIST recipe)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", a.overrides, "(b) Override a config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--checks", a.checks, "Which checks: ridge, real (comma-separated; default both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"ridge", "real"}));
  cmd->add_option("--iterations", a.iterations, "(a) SGD iterations T (default 100000)")
      ->check(CLI::Range(int64_t{100}, int64_t{1} << 40));
  cmd->add_option("--dim", a.dim, "(a) ridge dimension d (default 20; n = 1000 samples)")
      ->check(CLI::Range(1, 200));
  cmd->add_option("--workers", a.workers, "(a) emulated workers N, batch 8 each (default 2)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--repeats", a.repeats,
                  "(a) independent runs averaged into E||w_t - w*||^2 (default 8)")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--clip", a.clip,
                  "(a) TernGrad scaler c * sigma instead of max|g| (default 0 = max|g|, the "
                  "theory's; c > 0 saturates the tails: a biased ablation)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--sample-steps", a.sample_steps,
                  "(b) training iterations whose gradients are tested (default 0,10,100; the run "
                  "stops after the last)")
      ->delimiter(',');
  cmd->add_option("--draws", a.draws, "(b) independent ternarizations per tensor (default 1024)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--alpha", a.alpha,
                  "(b) family-wise false-alarm rate of all the (b) tests together (default 1e-3)")
      ->check(CLI::Range(1e-12, 0.5));
  cmd->add_option("--ternarizer", a.ternarizer,
                  "real (default) | half-keep | no-abs: deliberately biased variants that show "
                  "the checks failing (half-keep: E[t] = g/2; no-abs: E[t] = max(g, 0))")
      ->check(CLI::IsMember(tern::ternarizer_names()));
  cmd->add_option("--seed", a.seed,
                  "Seed of the synthetic problem and every random draw (default 123)");
  cmd->add_flag("--json", a.json,
                "One JSON object per check on stdout (verdict lines go to stderr)");
  return cmd;
}

int run_convergence_check(const ConvergenceCheckArgs& a) {
  const std::vector<std::string> checks =
      a.checks.empty() ? std::vector<std::string>{"ridge", "real"} : a.checks;
  for (const auto& c : checks)
    TG_CHECK(c == "ridge" || c == "real", "--checks '", c, "': expected ridge or real");
  const tern::Ternarizer tz = tern::make_ternarizer(a.ternarizer);
  std::vector<Verdict> verdicts;
  if (std::find(checks.begin(), checks.end(), "ridge") != checks.end())
    ridge_checks(a, tz, verdicts);
  if (std::find(checks.begin(), checks.end(), "real") != checks.end()) real_checks(a, tz, verdicts);

  FILE* vout = a.json ? stderr : stdout;
  std::vector<std::string> failed;
  for (const Verdict& v : verdicts) {
    std::fprintf(vout, "%s %s: %s\n", v.pass ? "PASS" : "FAIL", v.check.c_str(), v.detail.c_str());
    if (!v.pass) failed.push_back(v.check);
  }
  if (failed.empty()) {
    std::fprintf(vout, "convergence-check: all %zu checks passed\n", verdicts.size());
  } else {
    std::string list;
    for (const auto& f : failed) list += (list.empty() ? "" : ", ") + f;
    std::fprintf(vout, "convergence-check: FAILED %zu of %zu checks: %s\n", failed.size(),
                 verdicts.size(), list.c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return failed.empty() ? 0 : kExitCheckFailed;
}

}  // namespace tg::cli
