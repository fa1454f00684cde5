#include "cmd/bounds_recorder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/core/percentile.h"

namespace tg::cli {

std::string clip_label(double clip) {
  return "c=" + json::trim_exponent(json::number(clip));
}

namespace {

std::string combo_label(const BoundsCombo& c) {
  return std::string(tern::name(c.scaling)) + " " + clip_label(c.clip);
}

std::string row_json(int64_t iteration, int worker, const tern::BoundRow& r) {
  const tern::BoundStats& s = r.stats;
  json::Object o;
  o.add("iteration", iteration).add("worker", worker).add("tensor", r.tensor);
  o.add("numel", s.numel).add("scaling", tern::name(r.scaling)).add("clip", r.clip);
  o.add("scaler", s.scaler).add("bound_ratio", s.bound_ratio());
  o.add("inf_l1_ratio", s.inf_l1_ratio());
  o.add("g_sq", s.g_sq).add("g_l1", s.g_l1).add("g_inf", s.g_inf).add("inf_l1", s.inf_l1());
  o.add("h_sq", s.h_sq).add("h_l1", s.h_l1);
  o.add("second_moment", s.second_moment).add("variance", s.variance());
  o.add("sparsity", s.sparsity()).add("realized_sparsity", s.realized_sparsity());
  o.add("clipped_fraction", s.clipped_fraction()).add("length_ratio", s.length_ratio());
  o.add("angle_deg", s.angle_deg());
  return o.str();
}

// The TensorBoard scalars of one row: "scaler/conv1.weight/layer_c=2.5", ...
void add_scalars(const tern::BoundRow& r, std::vector<train::tensorboard::Scalar>& out) {
  const tern::BoundStats& s = r.stats;
  const std::string where = "/" + r.tensor + "/" + tern::name(r.scaling) + "_" + clip_label(r.clip);
  out.push_back({"scaler" + where, s.scaler});
  out.push_back({"sparsity" + where, s.sparsity()});
  out.push_back({"realized_sparsity" + where, s.realized_sparsity()});
  out.push_back({"bound_ratio" + where, s.bound_ratio()});
}

std::string fmt(double v, const char* spec = "%.4g") {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

std::string int_array(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

void hist_head(int64_t iteration, int worker, int workers, const tern::TensorHistograms& h,
               const char* panel, json::Object& o) {
  o.add("iteration", iteration).add("worker", worker).add("workers", workers);
  o.add("tensor", h.tensor).add("numel", h.numel).add("panel", panel);
  o.add("scaler", static_cast<double>(h.scaler));
}

std::string bins_json(int64_t iteration, int worker, int workers, const tern::TensorHistograms& h,
                      const char* panel, const tern::Histogram& b) {
  json::Object o;
  hist_head(iteration, worker, workers, h, panel, o);
  o.add("lo", b.lo).add("hi", b.hi).add_raw("counts", int_array(b.counts));
  return o.str();
}

std::string grid_json(int64_t iteration, int worker, int workers, const tern::TensorHistograms& h,
                      const char* panel, const tern::GridCounts& g) {
  json::Object o;
  hist_head(iteration, worker, workers, h, panel, o);
  std::string levels = "[";
  for (int k = -g.kmax; k <= g.kmax; ++k) {
    if (k > -g.kmax) levels += ',';
    levels += json::number(g.level(k));
  }
  o.add("step", g.step).add("kmax", g.kmax).add_raw("levels", levels + "]");
  o.add_raw("counts", int_array(g.counts));
  return o.str();
}

}  // namespace

BoundsRecorder::BoundsRecorder(std::vector<tern::GradSlot> layout, std::vector<bool> ternarized,
                               std::vector<BoundsCombo> combos, uint64_t seed,
                               const std::string& rows_path, const std::string& events_dir)
    : layout_(std::move(layout)),
      ternarized_(std::move(ternarized)),
      combos_(std::move(combos)),
      seed_(seed),
      path_(rows_path) {
  out_.open(rows_path, std::ios::out | std::ios::trunc);
  TG_CHECK(out_.good(), "cannot write ", rows_path);
  if (!events_dir.empty()) events_.emplace(events_dir);
}

void BoundsRecorder::sample(int64_t step, int worker, std::span<const float> g) {
  TG_CHECK(g.size() >= static_cast<size_t>(total()), "measure-bounds: the gradient has ", g.size(),
           " elements, the net's layout ", total());
  const tern::RealizedCodes codes{seed_, step, worker};
  std::vector<train::tensorboard::Scalar> scalars;
  for (size_t c = 0; c < combos_.size(); ++c) {
    const auto rows =
        tern::bound_rows(g, layout_, ternarized_, combos_[c].scaling, combos_[c].clip, &codes);
    for (const auto& r : rows) {
      out_ << row_json(step, worker, r) << '\n';
      add_scalars(r, scalars);
      if (c == 0 && samples_ == 0) tensors_.push_back({r.tensor, r.stats.numel});
      stats_[{r.tensor, c}].push_back(r.stats);
      ++rows_;
    }
  }
  out_.flush();
  TG_CHECK(out_.good(), "writing ", path_, " failed (disk full?)");
  if (events_) events_->scalars(step, scalars);
  ++samples_;
}

void BoundsRecorder::sharing_sample(int64_t step, int worker, int workers, double clip,
                                    std::span<const float> g) {
  TG_CHECK(g.size() >= static_cast<size_t>(total()), "measure-bounds: the gradient has ", g.size(),
           " elements, the net's layout ", total());
  TG_CHECK(worker >= 0 && worker < workers, "measure-bounds: worker ", worker, " of ", workers);
  if (step != sharing_step_) {
    sharing_workers_.clear();
    sharing_step_ = step;
  }
  sharing_clip_ = clip;
  std::vector<OwnScaler>& mine = sharing_workers_[worker];
  mine.clear();
  for (size_t t = 0; t < layout_.size(); ++t) {
    if (!ternarized_[t]) continue;
    const tern::GradSlot& sl = layout_[t];
    const float* x = g.data() + sl.offset;
    tern::TensorStats st;
    tern::tensor_stats_cpu(x, sl.numel, &st);
    OwnScaler o;
    o.scaler = tern::terngrad_scaler(st, clip);
    o.abs.resize(static_cast<size_t>(sl.numel));
    for (int64_t i = 0; i < sl.numel; ++i) {
      o.abs[i] = std::fabs(x[i]);
    }
    mine.push_back(std::move(o));
  }
  if (static_cast<int>(sharing_workers_.size()) == workers) write_sharing(step);
}

void BoundsRecorder::write_sharing(int64_t step) {
  // Expected fraction of zero codes with scaler s: 1 - sum min(|g_i| / s, 1) / n.
  auto sparsity = [](const std::vector<float>& abs, float s) {
    if (abs.empty() || !(s > 0)) return 1.0;
    double kept = 0;
    for (float a : abs) kept += std::min(static_cast<double>(a) / s, 1.0);
    return 1.0 - kept / static_cast<double>(abs.size());
  };
  size_t k = 0;
  for (size_t t = 0; t < layout_.size(); ++t) {
    if (!ternarized_[t]) continue;
    float shared = 0;
    for (const auto& [w, v] : sharing_workers_) shared = std::max(shared, v[k].scaler);
    for (const auto& [w, v] : sharing_workers_) {
      const OwnScaler& o = v[k];
      const double ratio = o.scaler > 0 ? static_cast<double>(shared) / o.scaler : std::nan("");
      const double own_sp = sparsity(o.abs, o.scaler);
      const double shared_sp = sparsity(o.abs, shared);
      json::Object r;
      r.add("record", "sharing").add("iteration", step).add("worker", w);
      r.add("tensor", layout_[t].name).add("numel", layout_[t].numel).add("clip", sharing_clip_);
      r.add("own_scaler", static_cast<double>(o.scaler));
      r.add("shared_scaler", static_cast<double>(shared)).add("shared_to_own", ratio);
      r.add("own_sparsity", own_sp).add("shared_sparsity", shared_sp);
      out_ << r.str() << '\n';
      ratios_[layout_[t].name].push_back(ratio);
      shared_sparsity_[layout_[t].name].push_back(shared_sp);
      ++rows_;
    }
    ++k;
  }
  out_.flush();
  TG_CHECK(out_.good(), "writing ", path_, " failed (disk full?)");
  sharing_workers_.clear();
}

std::string BoundsRecorder::table() const {
  std::ostringstream t;
  if (samples_ == 0) return "measure-bounds: no iteration was sampled\n";
  t << "bound_ratio = s*||h||_1 / ||h||^2 (TernGrad's E||ternary||^2 over the gradient's own "
       "||h||^2; h = g clipped to [-s, s]),\nmedian over "
    << samples_ << " sampled iteration" << (samples_ > 1 ? "s" : "")
    << "; inf_l1 = ||g||_inf*||g||_1 / ||g||^2 of the raw gradient\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-24s %10s %10s", "tensor", "numel", "inf_l1");
  t << buf;
  for (const BoundsCombo& c : combos_) {
    std::snprintf(buf, sizeof buf, " %14s", combo_label(c).c_str());
    t << buf;
  }
  t << '\n';
  for (const auto& [name, numel] : tensors_) {
    std::snprintf(buf, sizeof buf, "%-24s %10lld %10s", name.c_str(), static_cast<long long>(numel),
                  fmt(med(name, 0, &tern::BoundStats::inf_l1_ratio)).c_str());
    t << buf;
    for (size_t c = 0; c < combos_.size(); ++c) {
      std::snprintf(buf, sizeof buf, " %14s",
                    fmt(med(name, c, &tern::BoundStats::bound_ratio)).c_str());
      t << buf;
    }
    t << '\n';
  }
  // Clipping and sparsity, layer scaling (combos_[0] is layer with the config's c).
  const bool clipped = combos_[0].clip > 0;
  const size_t no_clip = clipped ? 1 : 0;  // layer c=0
  t << "\nlayer scaling: "
    << (clipped ? "clipping at " + clip_label(combos_[0].clip) +
                      " sigma: fraction clipped, ||h||/||g||, angle; "
                : "")
    << "expected fraction of zero codes (realized in brackets)\n";
  std::snprintf(buf, sizeof buf, "%-24s", "tensor");
  t << buf;
  if (clipped) {
    std::snprintf(buf, sizeof buf, " %9s %9s %8s %20s", "clipped", "length", "angle",
                  ("sparsity " + clip_label(combos_[0].clip)).c_str());
    t << buf;
  }
  std::snprintf(buf, sizeof buf, " %20s\n", "sparsity c=0");
  t << buf;
  for (const auto& [name, numel] : tensors_) {
    std::snprintf(buf, sizeof buf, "%-24s", name.c_str());
    t << buf;
    // An init-capture: clang 14 (the fuzz build) cannot capture a structured binding.
    auto sparsity = [&, &name = name](size_t c) {
      return fmt(100 * med(name, c, &tern::BoundStats::sparsity), "%.1f%%") + " (" +
             fmt(100 * med(name, c, &tern::BoundStats::realized_sparsity), "%.1f%%") + ")";
    };
    if (clipped) {
      std::snprintf(buf, sizeof buf, " %9s %9s %8s %20s",
                    fmt(100 * med(name, 0, &tern::BoundStats::clipped_fraction), "%.2f%%").c_str(),
                    fmt(med(name, 0, &tern::BoundStats::length_ratio), "%.4f").c_str(),
                    fmt(med(name, 0, &tern::BoundStats::angle_deg), "%.2f").c_str(),
                    sparsity(0).c_str());
      t << buf;
    }
    std::snprintf(buf, sizeof buf, " %20s\n", sparsity(no_clip).c_str());
    t << buf;
  }
  if (!ratios_.empty()) {
    // Scaler sharing: how far above each worker's own scaler the shared (max) one is.
    t << "\nscaler sharing (layer " << clip_label(sharing_clip_)
      << "): shared scaler / a worker's own over every worker and sampled iteration, and the "
         "expected fraction of zero codes under the shared scaler\n";
    std::snprintf(buf, sizeof buf, "%-24s %10s %10s %10s %16s %16s\n", "tensor", "median", "p90",
                  "max", "sparsity median", "sparsity max");
    t << buf;
    for (const auto& [name, numel] : tensors_) {
      const auto it = ratios_.find(name);
      if (it == ratios_.end()) continue;
      const std::vector<double>& sp = shared_sparsity_.at(name);
      std::snprintf(buf, sizeof buf, "%-24s %10s %10s %10s %16s %16s\n", name.c_str(),
                    fmt(percentile(it->second, 0.5), "%.3g").c_str(),
                    fmt(percentile(it->second, 0.9), "%.3g").c_str(),
                    fmt(percentile(it->second, 1.0), "%.3g").c_str(),
                    fmt(100 * percentile(sp, 0.5), "%.1f%%").c_str(),
                    fmt(100 * percentile(sp, 1.0), "%.1f%%").c_str());
      t << buf;
    }
  }
  return t.str();
}

int64_t BoundsRecorder::total() const {
  int64_t n = 0;
  for (const auto& s : layout_) n = std::max(n, s.offset + s.numel);
  return n;
}

double BoundsRecorder::med(const std::string& tensor, size_t combo,
                           double (tern::BoundStats::*f)() const) const {
  const auto it = stats_.find({tensor, combo});
  if (it == stats_.end()) return std::nan("");
  std::vector<double> v;
  for (const auto& s : it->second) v.push_back((s.*f)());
  return median(std::move(v));
}

HistogramRecorder::HistogramRecorder(std::vector<tern::GradSlot> layout,
                                     tern::CompressionOptions copts, std::vector<size_t> slots,
                                     int workers, int worker, int bins, const std::string& path)
    : layout_(std::move(layout)),
      copts_(std::move(copts)),
      slots_(std::move(slots)),
      grads_(static_cast<size_t>(workers)),
      worker_(worker),
      bins_(bins),
      path_(path) {
  out_.open(path, std::ios::out | std::ios::trunc);
  TG_CHECK(out_.good(), "cannot write ", path);
}

void HistogramRecorder::add(int64_t step, int worker, const Tensor& grad) {
  if (step != step_) {
    step_ = step;
    arrived_ = 0;
  }
  // A copy: on the host, to() returns the trainer's own buffer, which the next worker's
  // backward pass overwrites.
  grads_[static_cast<size_t>(worker)] =
      grad.device() == Device::cpu() ? grad.clone() : grad.to(Device::cpu());
  if (++arrived_ < static_cast<int>(grads_.size())) return;
  if (tern::floating_grad_step(copts_, step)) {
    std::fprintf(stderr,
                 "measure-bounds: iteration %lld is a floating-gradient iteration "
                 "(compression.floating_grad_epoch): no histograms\n",
                 static_cast<long long>(step));
    return;
  }
  const int n = static_cast<int>(grads_.size());
  for (const auto& h :
       tern::figure2_histograms(grads_, copts_, layout_, slots_, worker_, step, bins_)) {
    out_ << bins_json(step, worker_, n, h, "original", h.original) << '\n'
         << bins_json(step, worker_, n, h, "clipped", h.clipped) << '\n'
         << grid_json(step, worker_, n, h, "ternary", h.ternary) << '\n'
         << grid_json(step, worker_, n, h, "averaged", h.averaged) << '\n';
    rows_ += 4;
  }
  out_.flush();
  TG_CHECK(out_.good(), "writing ", path_, " failed (disk full?)");
  for (Tensor& g : grads_) g = Tensor();  // free until the next sampled iteration
}

std::vector<size_t> histogram_slots(const std::string& spec,
                                    const std::vector<tern::GradSlot>& layout,
                                    const std::vector<bool>& ternarized) {
  std::string known;
  for (size_t t = 0; t < layout.size(); ++t)
    if (ternarized[t]) known += (known.empty() ? "" : ", ") + layout[t].name;
  std::vector<size_t> slots;
  if (spec == "all") {
    for (size_t t = 0; t < layout.size(); ++t)
      if (ternarized[t]) slots.push_back(t);
    return slots;
  }
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ',')) {
    TG_CHECK(!name.empty(), "--histograms: empty tensor name in '", spec,
             "' (expected 'all' or names separated by commas: ", known, ")");
    size_t t = 0;
    while (t < layout.size() && layout[t].name != name) ++t;
    TG_CHECK(t < layout.size() && ternarized[t], "--histograms: '", name, "' is ",
             t < layout.size() ? "not ternarized by this config" : "not a tensor of this net",
             "; the ternarized tensors are: ", known);
    if (std::find(slots.begin(), slots.end(), t) == slots.end()) slots.push_back(t);
  }
  TG_CHECK(!slots.empty(), "--histograms: no tensor named (expected 'all' or: ", known, ")");
  std::sort(slots.begin(), slots.end());
  return slots;
}

}  // namespace tg::cli
