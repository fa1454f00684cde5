// `terngrad measure-bounds` (see measure_bounds_cmd.h): training through train::Trainer with a
// gradient hook that samples one worker's gradient every K iterations, the statistics of
// terngrad/bounds.h, JSON lines and a summary table.
#include "cmd/measure_bounds_cmd.h"

#include "cmd/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <utility>

#include "train/checkpoint.h"
#include "train/config.h"
#include "train/options.h"
#include "train/json.h"
#include "train/trainer.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/nets/net.h"
#include "terngrad/bounds.h"
#include "terngrad/histograms.h"

namespace tg::cli {

using namespace tg::train;

namespace fs = std::filesystem;

namespace {

constexpr int kExitInterrupted = 130;
constexpr const char* kRowsName = "bounds.jsonl";
constexpr const char* kTableName = "bounds.txt";
constexpr const char* kHistName = "histograms.jsonl";
constexpr const char* kTrainDirName = "train";
constexpr const char* kScratchDirName = "checkpoint_step";  // --checkpoint: removed at the end

struct Combo {
  tern::Scaling scaling;
  double clip;
};

std::string clip_label(double clip) {
  return "c=" + json::trim_exponent(json::number(clip));
}

std::string combo_label(const Combo& c) {
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

// Median of the finite values; NaN when there are none.
double median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string fmt(double v, const char* spec = "%.4g") {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

// Collects the rows of every sample and writes them as they come.
class Recorder {
 public:
  Recorder(std::vector<tern::GradSlot> layout, std::vector<bool> ternarized,
           std::vector<Combo> combos, uint64_t seed, const std::string& rows_path)
      : layout_(std::move(layout)),
        ternarized_(std::move(ternarized)),
        combos_(std::move(combos)),
        seed_(seed),
        path_(rows_path) {
    out_.open(rows_path, std::ios::out | std::ios::trunc);
    TG_CHECK(out_.good(), "cannot write ", rows_path);
  }

  // g: one worker's flat gradient on the host.
  void sample(int64_t step, int worker, std::span<const float> g) {
    TG_CHECK(g.size() >= static_cast<size_t>(total()), "measure-bounds: the gradient has ",
             g.size(), " elements, the net's layout ", total());
    const tern::RealizedCodes codes{seed_, step, worker};
    for (size_t c = 0; c < combos_.size(); ++c) {
      const auto rows =
          tern::bound_rows(g, layout_, ternarized_, combos_[c].scaling, combos_[c].clip, &codes);
      for (const auto& r : rows) {
        out_ << row_json(step, worker, r) << '\n';
        if (c == 0 && samples_ == 0) tensors_.push_back({r.tensor, r.stats.numel});
        stats_[{r.tensor, c}].push_back(r.stats);
        ++rows_;
      }
    }
    out_.flush();
    TG_CHECK(out_.good(), "writing ", path_, " failed (disk full?)");
    ++samples_;
  }

  int64_t samples() const { return samples_; }
  int64_t rows() const { return rows_; }

  // The two summary tables.
  std::string table() const {
    std::ostringstream t;
    if (samples_ == 0) return "measure-bounds: no iteration was sampled\n";
    t << "bound_ratio = s*||h||_1 / ||h||^2 (TernGrad's E||ternary||^2 over the gradient's own "
         "||h||^2; h = g clipped to [-s, s]),\nmedian over "
      << samples_ << " sampled iteration" << (samples_ > 1 ? "s" : "")
      << "; inf_l1 = ||g||_inf*||g||_1 / ||g||^2 of the raw gradient\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-24s %10s %10s", "tensor", "numel", "inf_l1");
    t << buf;
    for (const Combo& c : combos_) {
      std::snprintf(buf, sizeof buf, " %14s", combo_label(c).c_str());
      t << buf;
    }
    t << '\n';
    for (const auto& [name, numel] : tensors_) {
      std::snprintf(buf, sizeof buf, "%-24s %10lld %10s", name.c_str(),
                    static_cast<long long>(numel),
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
      auto sparsity = [&](size_t c) {
        return fmt(100 * med(name, c, &tern::BoundStats::sparsity), "%.1f%%") + " (" +
               fmt(100 * med(name, c, &tern::BoundStats::realized_sparsity), "%.1f%%") + ")";
      };
      if (clipped) {
        std::snprintf(
            buf, sizeof buf, " %9s %9s %8s %20s",
            fmt(100 * med(name, 0, &tern::BoundStats::clipped_fraction), "%.2f%%").c_str(),
            fmt(med(name, 0, &tern::BoundStats::length_ratio), "%.4f").c_str(),
            fmt(med(name, 0, &tern::BoundStats::angle_deg), "%.2f").c_str(), sparsity(0).c_str());
        t << buf;
      }
      std::snprintf(buf, sizeof buf, " %20s\n", sparsity(no_clip).c_str());
      t << buf;
    }
    return t.str();
  }

 private:
  int64_t total() const {
    int64_t n = 0;
    for (const auto& s : layout_) n = std::max(n, s.offset + s.numel);
    return n;
  }
  double med(const std::string& tensor, size_t combo, double (tern::BoundStats::*f)() const) const {
    const auto it = stats_.find({tensor, combo});
    if (it == stats_.end()) return std::nan("");
    std::vector<double> v;
    for (const auto& s : it->second) v.push_back((s.*f)());
    return median(std::move(v));
  }

  std::vector<tern::GradSlot> layout_;
  std::vector<bool> ternarized_;
  std::vector<Combo> combos_;
  uint64_t seed_;
  std::string path_;
  std::ofstream out_;
  int64_t samples_ = 0, rows_ = 0;
  std::vector<std::pair<std::string, int64_t>> tensors_;  // row order of the first sample
  std::map<std::pair<std::string, size_t>, std::vector<tern::BoundStats>> stats_;
};

std::string int_array(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
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
  for (int k = -g.kmax; k <= g.kmax; ++k)
    levels += (k > -g.kmax ? "," : "") + json::number(g.level(k));
  o.add("step", g.step).add("kmax", g.kmax).add_raw("levels", levels + "]");
  o.add_raw("counts", int_array(g.counts));
  return o.str();
}

// Figure 2's histograms: collects every worker's gradient of a sampled iteration (the hook sees
// them one by one) and, once all have arrived, writes the four panels of each chosen tensor.
class HistogramRecorder {
 public:
  HistogramRecorder(std::vector<tern::GradSlot> layout, tern::CompressionOptions copts,
                    std::vector<size_t> slots, int workers, int worker, int bins,
                    const std::string& path)
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

  void add(int64_t step, int worker, const Tensor& grad) {
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
      std::fprintf(stderr, "measure-bounds: iteration %lld is a floating-gradient iteration "
                   "(compression.floating_grad_epoch): no histograms\n",
                   static_cast<long long>(step));
      return;
    }
    const int n = static_cast<int>(grads_.size());
    for (const auto& h : tern::figure2_histograms(grads_, copts_, layout_, slots_, worker_, step,
                                                  bins_)) {
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

  int64_t rows() const { return rows_; }

 private:
  std::vector<tern::GradSlot> layout_;
  tern::CompressionOptions copts_;
  std::vector<size_t> slots_;
  std::vector<Tensor> grads_;
  int worker_, bins_;
  std::string path_;
  std::ofstream out_;
  int64_t step_ = -1, rows_ = 0;
  int arrived_ = 0;
};

// The slots named by --histograms ("all": every ternarized one), in layout order.
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

void check_absent(const fs::path& p, const std::string& dir) {
  TG_CHECK(!fs::exists(p), "measure-bounds: ", p.string(),
           " already exists; measure-bounds never overwrites: choose another --out than ", dir,
           " or remove it");
}

}  // namespace

CLI::App* add_measure_bounds_command(CLI::App& app, MeasureBoundsArgs& a) {
  auto* cmd = app.add_subcommand(
      "measure-bounds",
      "Measure TernGrad's bound quantities while training (digest 2.4-2.5): per ternarized "
      "tensor and for the model, ||g||^2, ||g||_inf*||g||_1, bound_ratio = s*||h||_1/||h||^2 "
      "with layer-wise vs one model-wide scaler and with vs without clipping, the ternary "
      "variance, code sparsity, and the clipped fraction, length ratio and angle. Writes "
      "DIR/bounds.jsonl (one row per iteration, tensor, scaling, clip), DIR/bounds.txt (median "
      "table, also on stdout) and the run in DIR/train; paper/bounds.py draws the figures");
  cmd->add_option("-c,--config", a.config_path,
                  "TOML config file (default: built-in defaults, the LeNet/MNIST recipe; with "
                  "--checkpoint: the checkpoint's own config)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", a.overrides, "Override a config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("-o,--out", a.out_dir,
                  "Output directory (created; must not hold bounds.jsonl, bounds.txt, train/ or, with "
                  "--histograms, histograms.jsonl)")
      ->required();
  cmd->add_option("--every", a.every,
                  "Sample every K iterations: 0, K, 2K, ... (the gradient of that iteration, "
                  "before its update)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--worker", a.worker,
                  "Whose gradient: worker W of workers.count (raw, before compression)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--checkpoint", a.checkpoint,
                  "No training: the gradient of the batch the run would train on next, at this "
                  "checkpoint's parameters (one sample)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--histograms", a.histograms,
                  "Also write Figure 2's gradient histograms of these tensors (comma-separated "
                  "names, or 'all') at every sampled iteration to DIR/histograms.jsonl: (a) the "
                  "worker's original gradient, (b) clipped, (c) its ternary codes, (d) the "
                  "aggregate of all workers, as the compressor makes them; paper/histograms.py "
                  "draws them");
  cmd->add_option("--bins", a.bins, "Bins of the original and clipped histograms (default 101)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--device", a.device, "Shortcut for --set device=... (cpu, cuda, cuda:N)");
  cmd->add_flag("--progress", a.progress_on, "Force the live progress line");
  cmd->add_flag("--no-progress", a.progress_off, "Plain log lines even on a terminal");
  return cmd;
}

int run_measure_bounds(const MeasureBoundsArgs& a) {
  TG_CHECK(!a.out_dir.empty(), "measure-bounds: --out DIR is required");
  TG_CHECK(a.every >= 1, "measure-bounds: --every must be >= 1, got ", a.every);
  std::vector<std::string> overrides = a.overrides;
  if (!a.device.empty()) overrides.push_back("device=" + a.device);

  // The config, and with --checkpoint the one-step run that reproduces its next iteration.
  std::optional<Checkpoint> ck;
  Config cfg;
  if (!a.checkpoint.empty()) {
    ck = load_checkpoint(a.checkpoint);
    cfg = a.config_path.empty()
              ? parse_config(ck->config_toml, a.checkpoint + " (embedded config)", overrides)
              : load_config_file(a.config_path, overrides);
    TG_CHECK(cfg.model.name == ck->net, a.checkpoint, ": holds model '", ck->net,
             "' but the config says '", cfg.model.name, "'");
  } else {
    cfg = a.config_path.empty() ? default_config(overrides)
                                : load_config_file(a.config_path, overrides);
  }
  TG_CHECK(a.worker >= 0 && a.worker < cfg.workers.count, "measure-bounds: --worker ", a.worker,
           " is out of range: the config has workers.count = ", cfg.workers.count,
           " (expected 0 .. ", cfg.workers.count - 1, ")");

  const fs::path dir(a.out_dir);
  const fs::path rows_path = dir / kRowsName, table_path = dir / kTableName;
  const fs::path hist_path = dir / kHistName;
  const fs::path run_dir = dir / (ck ? kScratchDirName : kTrainDirName);
  for (const fs::path& p : {rows_path, table_path, run_dir}) check_absent(p, a.out_dir);
  if (!a.histograms.empty()) check_absent(hist_path, a.out_dir);
  TG_CHECK(a.bins >= 1, "measure-bounds: --bins must be >= 1, got ", a.bins);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TG_CHECK(!ec && fs::is_directory(dir), "cannot create output directory ", a.out_dir, ": ",
           ec.message());

  // The layout of the net's gradient (built on the host: only the layout is needed) and which
  // tensors the config's compressor would ternarize.
  std::vector<tern::GradSlot> layout;
  {
    const std::unique_ptr<Net> net = make_net(cfg.model.name, net_options(cfg), Device::cpu());
    layout = grad_layout(*net);
  }
  const tern::CompressionOptions copts = compression_options(cfg, cfg.train.batch_size);
  const std::vector<bool> ternarized = tern::ternarized_slots(layout, copts);
  TG_CHECK(std::count(ternarized.begin(), ternarized.end(), true) > 0,
           "measure-bounds: no tensor of '", cfg.model.name,
           "' would be ternarized (compression.min_size = ", copts.min_size,
           ", compression.quantize_logits = ", copts.quantize_logits ? "true" : "false", ")");
  TG_CHECK(copts.clip >= 0, "compression.clip must be >= 0, got ", copts.clip);
  std::vector<Combo> combos = {{tern::Scaling::layer, copts.clip}};
  if (copts.clip > 0) combos.push_back({tern::Scaling::layer, 0.0});
  combos.push_back({tern::Scaling::model, copts.clip});
  if (copts.clip > 0) combos.push_back({tern::Scaling::model, 0.0});

  std::vector<size_t> hist_slots;
  if (!a.histograms.empty()) {
    hist_slots = histogram_slots(a.histograms, layout, ternarized);
    TG_CHECK(copts.scaler_sharing == "max",
             "--histograms needs compression.scaler_sharing = \"max\" (got \"",
             copts.scaler_sharing, "\"): with per-worker scalers the averaged gradient lies on no grid");
  }

  Recorder rec(layout, ternarized, combos, copts.seed, rows_path.string());
  std::optional<HistogramRecorder> hist;
  if (!hist_slots.empty())
    hist.emplace(layout, copts, hist_slots, cfg.workers.count, a.worker, a.bins,
                 hist_path.string());
  const int64_t only_step = ck ? ck->step : -1;
  TrainOptions opt;
  const int live = a.progress_on ? 1 : a.progress_off ? 0 : -1;
  opt.gradient_hook = [&](int64_t step, int worker, const Tensor& grad) {
    if (only_step >= 0 ? step != only_step : step % a.every != 0) return;
    if (hist) hist->add(step, worker, grad);
    if (worker != a.worker) return;
    const Tensor h = grad.to(Device::cpu()).contiguous();
    rec.sample(step, worker, std::span<const float>(h.data<float>(), h.numel()));
  };

  bool interrupted = false;
  if (ck) {
    // One more iteration of the checkpoint's run: a copy of the checkpoint whose config ends
    // there, resumed in a scratch directory (the trainer restores parameters, optimizer and
    // data order exactly), evaluated on one example only; the directory is removed afterwards.
    Config one = cfg;
    one.train.iterations = ck->step + 1;
    one.train.checkpoint_every = 0;
    one.train.eval_every = 0;
    one.train.log_every = 1;
    one.data.eval_limit = 1;
    Checkpoint copy = *ck;
    copy.config_toml = to_toml(one);
    fs::create_directories(run_dir, ec);
    TG_CHECK(!ec, "cannot create ", run_dir.string(), ": ", ec.message());
    struct RemoveDir {
      fs::path p;
      ~RemoveDir() {
        std::error_code e;
        fs::remove_all(p, e);
      }
    } scratch{run_dir};
    save_checkpoint((run_dir / "checkpoint.tgckpt").string(), copy);
    opt.out_dir = run_dir.string();
    opt.resume = true;
    ProgressListener progress(one.train.iterations, live);
    opt.listener = &progress;
    interrupted = Trainer(one, opt).run().interrupted;
  } else {
    opt.out_dir = (dir / kTrainDirName).string();
    ProgressListener progress(cfg.train.iterations, live);
    opt.listener = &progress;
    interrupted = Trainer(cfg, opt).run().interrupted;
  }

  const std::string table = rec.table();
  write_file_atomic(table_path.string(), table);
  std::printf("%s", table.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "measure-bounds: %lld sampled iteration%s, %lld rows in %s; table in %s\n",
               static_cast<long long>(rec.samples()), rec.samples() == 1 ? "" : "s",
               static_cast<long long>(rec.rows()), rows_path.string().c_str(),
               table_path.string().c_str());
  if (hist)
    std::fprintf(stderr, "measure-bounds: %lld histogram rows in %s (paper/histograms.py draws "
                 "them)\n", static_cast<long long>(hist->rows()), hist_path.string().c_str());
  return interrupted ? kExitInterrupted : 0;
}

}  // namespace tg::cli
