// `terngrad convergence-check` (see convergence_check_cmd.h): (a) ridge regression with SGD and
// TernGrad, (b) the ternarizer's moments on a real network's gradients; the computations are
// terngrad/analysis/convergence.h, the gradients come from the Trainer's gradient hook.
#include "cmd/convergence_check_cmd.h"
#include "cmd/default_data.h"

#include "cmd/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "config/config.h"
#include "nn/core/clock.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/nets/net.h"
#include "terngrad/analysis/convergence.h"
#include "train/options.h"
#include "train/trainer.h"

namespace tg::cli {

using namespace tg::train;
using namespace tg::config;

namespace {

using tern::ConvergenceCriteria;
using tern::ConvergenceCurve;
using tern::MomentCheck;
using tern::TensorMoments;

struct Verdict {
  std::string check;
  bool pass = false;
  std::string detail;
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

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

// ---- (b) real gradients --------------------------------------------------------------------

// The gradients (b) checks: every worker's, at the sampled iterations of a real training run.
struct SampledGradients {
  Config cfg;
  std::vector<int64_t> steps;  // sorted, unique
  std::vector<tern::GradSlot> layout;
  std::map<int64_t, std::map<int, Tensor>> grads;  // step -> worker -> host copy
};

SampledGradients sample_gradients(const ConvergenceCheckArgs& a) {
  SampledGradients out;
  Config& cfg = out.cfg;
  cfg = a.config_path.empty() ? default_config(a.overrides)
                              : load_config_file(a.config_path, a.overrides);
  choose_default_data(cfg, a.config_path, a.overrides);
  std::vector<int64_t>& steps = out.steps;
  steps = a.sample_steps;
  if (steps.empty()) steps = {0, 10, 100};
  for (int64_t s : steps)
    TG_CHECK(s >= 0, "--sample-steps: iteration ", s, " is negative (expected >= 0)");
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  // The run is only a source of gradients: it stops after the last sampled iteration and
  // evaluates on one test example.
  cfg.train.iterations = steps.back() + 1;
  cfg.data.eval_limit = 1;
  const std::set<int64_t> wanted(steps.begin(), steps.end());

  const auto net = make_net(cfg.model.name, net_options(cfg), Device::cpu());
  out.layout = grad_layout(*net);
  TrainOptions opt;
  ProgressListener progress(cfg.train.iterations, /*live=*/0);
  opt.listener = &progress;
  opt.gradient_hook = [&](int64_t step, int worker, const Tensor& g) {
    if (!wanted.count(step)) return;
    out.grads[step][worker] = g.device().is_cpu() ? g.clone() : g.to(Device::cpu());
  };
  std::fprintf(stderr,
               "convergence-check: training %s on %s (%lld workers, compression %s) for %lld "
               "iterations to sample gradients ...\n",
               cfg.model.name.c_str(), cfg.data.dataset.name.c_str(),
               static_cast<long long>(cfg.workers.count),
               std::string(enum_name(tern::kMethods, cfg.compression.method)).c_str(),
               static_cast<long long>(cfg.train.iterations));
  TG_CHECK(!Trainer(cfg, opt).run().interrupted,
           "convergence-check: the training run was interrupted");
  for (int64_t k : steps)
    TG_CHECK(out.grads.count(k) && out.grads[k].count(0),
             "convergence-check: no gradient of worker 0 was seen at iteration ", k);
  return out;
}

// The moment check of worker 0's gradient at iteration k, with the scaler the workers share
// there (clip = 0: the max over workers of max|g|).
MomentCheck check_iteration(const ConvergenceCheckArgs& a, const tern::Ternarizer& tz,
                            const SampledGradients& sg, int64_t k) {
  const auto& ws = sg.grads.at(k);
  std::vector<float> s(sg.layout.size(), 0.0f);
  for (const auto& [w, g] : ws) {
    const std::vector<float> sw = tern::max_abs_scalers(g.data<float>(), sg.layout);
    for (size_t t = 0; t < s.size(); ++t) s[t] = std::max(s[t], sw[t]);
  }
  tern::MomentOptions mo;
  mo.draws = a.draws;
  mo.alpha = a.alpha;
  mo.family = 3 * static_cast<int64_t>(sg.layout.size() * sg.steps.size());
  mo.seed = a.seed;
  mo.step = static_cast<uint64_t>(k);
  mo.worker = 0;
  int64_t total = 0;
  for (const auto& sl : sg.layout) total += sl.numel;
  std::fprintf(stderr,
               "convergence-check: iteration %lld: %lld ternarizations of worker 0's gradient "
               "(%lld elements, %zu tensors) ...\n",
               static_cast<long long>(k), static_cast<long long>(a.draws),
               static_cast<long long>(total), sg.layout.size());
  const auto t_start = Clock::now();
  const MomentCheck c = tern::check_ternary_moments(ws.at(0).data<float>(), sg.layout, s, tz, mo);
  std::fprintf(stderr, "convergence-check: iteration %lld checked in %.1f s\n",
               static_cast<long long>(k), seconds_since(t_start));
  return c;
}

// The two verdicts of a moment check: unbiased, and the variance identity.
std::pair<Verdict, Verdict> moment_verdicts(const MomentCheck& c, int64_t k) {
  double max_proj = 0, max_sq = -INFINITY, max_var = 0;
  for (const TensorMoments& t : c.tensors) {
    if (!t.tested) continue;
    max_proj = std::max(max_proj, std::fabs(t.z_proj));
    max_sq = std::max(max_sq, t.z_sq);
    max_var = std::max(max_var, std::fabs(t.z_var));
  }
  const std::string crit =
      "(alpha " + fmt("%g", c.alpha) + " over " + std::to_string(c.family) + " tests, Bonferroni)";
  Verdict vm, vv;
  vm.check = "unbiased@" + std::to_string(k);
  vm.pass = c.pass_mean;
  vm.detail = "E[t] = g: max |z_proj| " + fmt("%.2f", max_proj) + " vs " +
              fmt("%.2f", c.z_crit_two) + ", max z_sq " + fmt("%.2f", max_sq) + " vs " +
              fmt("%.2f", c.z_crit_one) + " " + crit;
  vv.check = "variance@" + std::to_string(k);
  vv.pass = c.pass_var;
  vv.detail = "E||t||^2 - ||g||^2 = s||g||_1 - ||g||^2: max |z_var| " + fmt("%.2f", max_var) +
              " vs " + fmt("%.2f", c.z_crit_two) + " " + crit;
  for (const TensorMoments& t : c.tensors)
    if (!t.tested) {
      if (!t.pass_mean) vm.detail += "; all-zero tensor '" + t.name + "' gave non-zero codes";
      if (!t.pass_var) vv.detail += "; all-zero tensor '" + t.name + "' gave non-zero codes";
    }
  return {vm, vv};
}

void print_moments_json(const ConvergenceCheckArgs& a, const SampledGradients& sg, int64_t k,
                        const MomentCheck& c, const Verdict& vm, const Verdict& vv) {
  for (int kind = 0; kind < 2; ++kind) {
    const Verdict& v = kind == 0 ? vm : vv;
    json::Object o;
    o.add("check", v.check).add("pass", v.pass).add("kind", kind == 0 ? "unbiased" : "variance");
    o.add("step", k).add("worker", 0).add("workers", static_cast<int64_t>(sg.grads.at(k).size()));
    o.add("model", sg.cfg.model.name).add("dataset", sg.cfg.data.dataset.name);
    o.add("ternarizer", a.ternarizer).add("draws", c.draws).add("alpha", c.alpha);
    o.add("family", c.family).add("z_crit", c.z_crit_two);
    if (kind == 0) o.add("z_crit_sq", c.z_crit_one);
    std::string arr = "[";
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      const TensorMoments& t = c.tensors[i];
      json::Object e;
      e.add("name", t.name).add("numel", t.numel).add("s", t.s).add("l1", t.l1);
      e.add("l2sq", t.l2sq).add("tested", t.tested);
      if (kind == 0) {
        e.add("rel_error", t.rel_error).add("rel_error_expected", t.rel_error_expected);
        e.add("z_proj", t.z_proj).add("z_sq", t.z_sq).add("pass", t.pass_mean);
      } else {
        e.add("excess_measured", t.excess_measured).add("excess_expected", t.excess_expected);
        e.add("mse_measured", t.mse_measured).add("z_var", t.z_var).add("pass", t.pass_var);
      }
      arr += (i ? "," : "") + e.str();
    }
    o.add_raw("tensors", arr + "]");
    std::printf("%s\n", o.str().c_str());
  }
}

void print_moments_table(const ConvergenceCheckArgs& a, const SampledGradients& sg, int64_t k,
                         const MomentCheck& c) {
  std::printf(
      "(b) %s on %s, iteration %lld: worker 0 of %zu, %lld ternarizations per tensor "
      "by %s; scaler shared over the workers, max|g| (clip = 0)\n",
      sg.cfg.model.name.c_str(), sg.cfg.data.dataset.name.c_str(), static_cast<long long>(k),
      sg.grads.at(k).size(), static_cast<long long>(c.draws),
      a.ternarizer == "real" ? "the real kernel" : ("the BIASED '" + a.ternarizer + "'").c_str());
  std::printf("    %-22s %8s %10s %6s %10s %10s %7s %7s %12s %12s %7s\n", "tensor", "numel", "s",
              "keep", "|m-g|/|g|", "expected", "z_proj", "z_sq", "E|t|^2-|g|^2", "s|g|1-|g|^2",
              "z_var");
  for (const TensorMoments& t : c.tensors) {
    if (!t.tested) {
      std::printf("    %-22s %8lld %10.3e   (all zero: codes %s)\n", t.name.c_str(),
                  static_cast<long long>(t.numel), t.s,
                  t.pass_mean && t.pass_var ? "all zero" : "NOT all zero");
      continue;
    }
    std::printf("    %-22s %8lld %10.3e %6.3f %10.3e %10.3e %7.2f %7.2f %12.4e %12.4e %7.2f%s\n",
                t.name.c_str(), static_cast<long long>(t.numel), t.s,
                t.l1 / (t.s * static_cast<double>(t.numel)), t.rel_error, t.rel_error_expected,
                t.z_proj, t.z_sq, t.excess_measured, t.excess_expected, t.z_var,
                t.pass_mean && t.pass_var ? "" : "  <-");
  }
  std::printf(
      "    keep = ||g||_1 / (n s), the expected fraction of non-zero codes; critical "
      "|z| %.2f (z_sq %.2f, one-sided)\n\n",
      c.z_crit_two, c.z_crit_one);
}

// (b): the ternarizer's moments on a real run's gradients, at each sampled iteration.
void real_checks(const ConvergenceCheckArgs& a, const tern::Ternarizer& tz,
                 std::vector<Verdict>& verdicts) {
  const SampledGradients sg = sample_gradients(a);
  for (int64_t k : sg.steps) {
    const MomentCheck c = check_iteration(a, tz, sg, k);
    const auto [vm, vv] = moment_verdicts(c, k);
    verdicts.push_back(vm);
    verdicts.push_back(vv);
    if (a.json)
      print_moments_json(a, sg, k, c, vm, vv);
    else
      print_moments_table(a, sg, k, c);
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
