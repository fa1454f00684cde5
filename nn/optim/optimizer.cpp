// The optimizers of optimizer.h: validation, slots, checkpoint state, and the one device
// dispatch per step into the fused kernels of optim_kernels.h.
#include "nn/optim/optimizer.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include "nn/ops/dispatch.h"
#include "nn/optim/optim_kernels.h"

namespace tg {

namespace {

using NamedState = std::vector<std::pair<std::string, Tensor>>;

// Shared argument checks of step(): flat contiguous f32 buffers on one device, a usable lr.
void check_step_args(const std::string& opt, const Tensor& params, const Tensor& grads, double lr) {
  TG_CHECK(params.defined(), opt, " step: params are undefined");
  const std::string pw = opt + " params", gw = opt + " grads";
  check_tensor(params, pw.c_str(), DType::f32, params.device());
  check_tensor(grads, gw.c_str(), DType::f32, params.device());
  TG_CHECK(params.is_contiguous() && grads.is_contiguous(), opt,
           " step: params and grads must be contiguous (the arena's flat buffers), got ",
           params.str(), " and ", grads.str());
  TG_CHECK(params.numel() == grads.numel(), opt, " step: params have ", params.numel(),
           " elements but grads have ", grads.numel());
  TG_CHECK(std::isfinite(lr) && lr >= 0.0, opt,
           " step: learning rate must be finite and >= 0, got ", lr);
}

// A slot buffer on the params' device, zero on the first step. A slot restored by load_state
// may still sit where the checkpoint put it: it moves to the params' device here, once.
void ensure_slot(Tensor& slot, const char* name, const Tensor& params) {
  if (!slot.defined()) {
    slot = Tensor::zeros({params.numel()}, DType::f32, params.device());
    return;
  }
  TG_CHECK(slot.numel() == params.numel(), "optimizer slot '", name, "' has ", slot.numel(),
           " elements but the parameters have ", params.numel(),
           " (state restored from another model?)");
  if (slot.device() != params.device()) slot = slot.to(params.device());
}

std::string join_names(const std::vector<std::string>& names) {
  if (names.empty()) return "nothing";
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Matches a loaded state against the expected names: each exactly once, nothing else.
// Returns the tensors in the order of `expected`. Throws naming the offending entry.
std::vector<Tensor> match_state(const std::string& opt, const NamedState& state,
                                const std::vector<std::string>& expected) {
  std::vector<std::string> got;
  for (const auto& [name, t] : state) got.push_back(name);
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : state) {
    bool known = false;
    for (const auto& e : expected) known = known || e == name;
    TG_CHECK(known, opt, " load_state: unexpected entry '", name, "' (expected ",
             join_names(expected), "; got ", join_names(got), ")");
    TG_CHECK(by_name.emplace(name, t).second, opt, " load_state: entry '", name, "' appears twice");
  }
  std::vector<Tensor> out;
  for (const auto& e : expected) {
    auto it = by_name.find(e);
    TG_CHECK(it != by_name.end(), opt, " load_state: missing entry '", e, "' (expected ",
             join_names(expected), "; got ", join_names(got), ")");
    TG_CHECK(it->second.defined(), opt, " load_state: entry '", e, "' is undefined");
    out.push_back(it->second);
  }
  return out;
}

// A restored slot: 1-D f32; `numel` is the live slot's size if one exists (-1 if none).
void check_slot_tensor(const std::string& opt, const std::string& name, const Tensor& t,
                       int64_t numel) {
  TG_CHECK(t.dtype() == DType::f32 && t.ndim() == 1, opt, " load_state: '", name,
           "' must be a 1-D f32 tensor, got ", t.str());
  TG_CHECK(numel < 0 || t.numel() == numel, opt, " load_state: '", name, "' has ", t.numel(),
           " elements but this optimizer's slot has ", numel);
}

// The restored copy of a slot: into the live slot when there is one (keeps its device), else
// a private clone (the caller's tensor may change afterwards).
void restore_slot(Tensor& slot, const Tensor& src) {
  if (slot.defined()) {
    slot.copy_from(src);
  } else {
    slot = src.clone();
  }
}

// ---- sgd ---------------------------------------------------------------------------------

class SgdOptimizer final : public Optimizer {
 public:
  void step(Tensor& params, const Tensor& grads, double lr) override {
    check_step_args("sgd", params, grads, lr);
    const int64_t n = params.numel();
    if (n == 0) return;
    const float lr_f = static_cast<float>(lr);
    TG_DISPATCH(params.device(), "sgd step",
                sgd_update_cpu(n, lr_f, grads.data<float>(), params.data<float>()),
                sgd_update_cuda(n, lr_f, grads.data<float>(), params.data<float>()));
  }
  NamedState state() const override { return {}; }
  void load_state(const NamedState& state) override { match_state("sgd", state, {}); }
  std::string name() const override { return "sgd"; }
};

// ---- momentum ----------------------------------------------------------------------------

class MomentumOptimizer final : public Optimizer {
 public:
  explicit MomentumOptimizer(double momentum) : momentum_(momentum) {}

  void step(Tensor& params, const Tensor& grads, double lr) override {
    check_step_args("momentum", params, grads, lr);
    ensure_slot(accum_, kAccum, params);
    const int64_t n = params.numel();
    if (n == 0) return;
    const float lr_f = static_cast<float>(lr), m_f = static_cast<float>(momentum_);
    TG_DISPATCH(params.device(), "momentum step",
                momentum_update_cpu(n, lr_f, m_f, grads.data<float>(), accum_.data<float>(),
                                    params.data<float>()),
                momentum_update_cuda(n, lr_f, m_f, grads.data<float>(), accum_.data<float>(),
                                     params.data<float>()));
  }

  NamedState state() const override {
    if (!accum_.defined()) return {};
    return {{kAccum, accum_.clone()}};
  }

  void load_state(const NamedState& state) override {
    if (state.empty()) {
      accum_ = Tensor();
      return;
    }
    const std::vector<Tensor> t = match_state("momentum", state, {kAccum});
    check_slot_tensor("momentum", kAccum, t[0], accum_.defined() ? accum_.numel() : -1);
    restore_slot(accum_, t[0]);
  }

  std::string name() const override { return "momentum"; }

 private:
  static constexpr const char* kAccum = "momentum/accum";
  double momentum_;
  Tensor accum_;
};

// ---- adam --------------------------------------------------------------------------------

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(double beta1, double beta2, double epsilon)
      : beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}

  void step(Tensor& params, const Tensor& grads, double lr) override {
    check_step_args("adam", params, grads, lr);
    ensure_slot(m_, kM, params);
    ensure_slot(v_, kV, params);
    ++t_;
    // Bias correction in double on the host (TF keeps beta^t in f32 variables); the per-element
    // math is f32, with 1 - beta formed in f32 as TF's graph does.
    const double t = static_cast<double>(t_);
    const double lr_t = lr * std::sqrt(1.0 - std::pow(beta2_, t)) / (1.0 - std::pow(beta1_, t));
    AdamScalars s;
    s.lr_t = static_cast<float>(lr_t);
    s.one_minus_beta1 = 1.0f - static_cast<float>(beta1_);
    s.one_minus_beta2 = 1.0f - static_cast<float>(beta2_);
    s.epsilon = static_cast<float>(epsilon_);
    const int64_t n = params.numel();
    if (n == 0) return;
    TG_DISPATCH(params.device(), "adam step",
                adam_update_cpu(n, s, grads.data<float>(), m_.data<float>(), v_.data<float>(),
                                params.data<float>()),
                adam_update_cuda(n, s, grads.data<float>(), m_.data<float>(), v_.data<float>(),
                                 params.data<float>()));
  }

  NamedState state() const override {
    if (t_ == 0) return {};
    return {{kM, m_.clone()}, {kV, v_.clone()}, {kStep, Tensor::from_vector<int64_t>({t_}, {1})}};
  }

  void load_state(const NamedState& state) override {
    if (state.empty()) {
      m_ = Tensor();
      v_ = Tensor();
      t_ = 0;
      return;
    }
    const std::vector<Tensor> t = match_state("adam", state, {kM, kV, kStep});
    const int64_t live = m_.defined() ? m_.numel() : -1;
    check_slot_tensor("adam", kM, t[0], live);
    check_slot_tensor("adam", kV, t[1], live);
    TG_CHECK(t[0].numel() == t[1].numel(), "adam load_state: '", kM, "' has ", t[0].numel(),
             " elements but '", kV, "' has ", t[1].numel());
    TG_CHECK(t[2].dtype() == DType::i64 && t[2].numel() == 1, "adam load_state: '", kStep,
             "' must be a 1-element i64 tensor, got ", t[2].str());
    const int64_t step = t[2].item<int64_t>();
    TG_CHECK(step >= 1, "adam load_state: '", kStep, "' must be >= 1 (m and v exist only after ",
             "a step), got ", step);
    restore_slot(m_, t[0]);
    restore_slot(v_, t[1]);
    t_ = step;
  }

  std::string name() const override { return "adam"; }

 private:
  static constexpr const char* kM = "adam/m";
  static constexpr const char* kV = "adam/v";
  static constexpr const char* kStep = "adam/step";
  double beta1_, beta2_, epsilon_;
  Tensor m_, v_;
  int64_t t_ = 0;  // steps taken
};

void check_unit_interval(const char* opt, const char* field, double x) {
  TG_CHECK(x >= 0.0 && x < 1.0, "optimizer '", opt, "': ", field, " must be in [0, 1), got ", x);
}

// The one name -> factory table of the optimizers.
using Factory = std::function<std::unique_ptr<Optimizer>(const OptimizerOptions&)>;
const std::vector<std::pair<std::string, Factory>>& optimizer_table() {
  static const std::vector<std::pair<std::string, Factory>> kTable = {
      {"sgd", [](const OptimizerOptions&) { return std::make_unique<SgdOptimizer>(); }},
      {"momentum",
       [](const OptimizerOptions& o) {
         check_unit_interval("momentum", "momentum", o.momentum);
         return std::make_unique<MomentumOptimizer>(o.momentum);
       }},
      {"adam",
       [](const OptimizerOptions& o) {
         check_unit_interval("adam", "beta1", o.beta1);
         check_unit_interval("adam", "beta2", o.beta2);
         TG_CHECK(std::isfinite(o.epsilon) && o.epsilon > 0.0,
                  "optimizer 'adam': epsilon must be finite and > 0, got ", o.epsilon);
         return std::make_unique<AdamOptimizer>(o.beta1, o.beta2, o.epsilon);
       }},
  };
  return kTable;
}

}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const auto& entry : optimizer_table()) names.push_back(entry.first);
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o) {
  std::vector<std::string> known;
  for (const auto& [name, factory] : optimizer_table()) {
    if (name == o.name) return factory(o);
    known.push_back(name);
  }
  TG_THROW("unknown optimizer '", o.name, "' (known: ", join_names(known), ")");
}

}  // namespace tg
