// (b) of `terngrad convergence-check`: the ternarizer's moments on a real run's gradients.
#include "cmd/convergence_moments.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "cmd/default_data.h"
#include "cmd/progress.h"
#include "config/config.h"
#include "nn/core/clock.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/nets/net.h"
#include "train/options.h"
#include "train/trainer.h"

namespace tg::cli::convergence_check {

using namespace tg::train;
using namespace tg::config;

namespace {

using tern::MomentCheck;
using tern::TensorMoments;

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

}  // namespace

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

}  // namespace tg::cli::convergence_check
