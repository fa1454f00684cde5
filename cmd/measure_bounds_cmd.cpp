// `terngrad measure-bounds` (see measure_bounds_cmd.h): training through train::Trainer with a
// gradient hook that samples one worker's gradient every K iterations, the statistics of
// terngrad/analysis/bounds.h, JSON lines and a summary table.
#include "cmd/measure_bounds_cmd.h"
#include "cmd/cli.h"
#include "cmd/default_data.h"

#include "cmd/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <utility>

#include "cmd/bounds_recorder.h"
#include "config/config.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/nets/net.h"
#include "terngrad/analysis/bounds.h"
#include "terngrad/analysis/histograms.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/trainer.h"

namespace tg::cli {

using namespace tg::train;
using namespace tg::config;

namespace fs = std::filesystem;

namespace {

constexpr const char* kRowsName = "bounds.jsonl";
constexpr const char* kTableName = "bounds.txt";
constexpr const char* kHistName = "histograms.jsonl";
constexpr const char* kTrainDirName = "train";
constexpr const char* kScratchDirName = "checkpoint_step";  // --checkpoint: removed at the end

void check_absent(const fs::path& p, const std::string& dir) {
  TG_CHECK(!fs::exists(p), "measure-bounds: ", p.string(),
           " already exists; measure-bounds never overwrites: choose another --out than ", dir,
           " or remove it");
}

// --out, or a new folder per run (TensorBoard's runs/ convention).
std::string output_dir(const MeasureBoundsArgs& a) {
  if (!a.out_dir.empty()) return a.out_dir;
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  const std::string dir = std::string("runs/measure-bounds-") + stamp;
  std::fprintf(stderr, "measure-bounds: no --out: writing to %s\n", dir.c_str());
  return dir;
}

// The config of the measured run, and with --checkpoint the checkpoint it continues.
struct MeasuredRun {
  Config cfg;
  std::optional<Checkpoint> ck;
};

MeasuredRun load_run(const MeasureBoundsArgs& a) {
  std::vector<std::string> overrides = a.overrides;
  if (!a.device.empty()) overrides.push_back("device=" + a.device);
  MeasuredRun r;
  if (!a.checkpoint.empty()) {
    r.ck = load_checkpoint(a.checkpoint);
    r.cfg = a.config_path.empty()
                ? parse_config(r.ck->config_toml, a.checkpoint + " (embedded config)", overrides)
                : load_config_file(a.config_path, overrides);
    TG_CHECK(r.cfg.model.name == r.ck->net, a.checkpoint, ": holds model '", r.ck->net,
             "' but the config says '", r.cfg.model.name, "'");
  } else {
    r.cfg = a.config_path.empty() ? default_config(overrides)
                                  : load_config_file(a.config_path, overrides);
    choose_default_data(r.cfg, a.config_path, overrides);
  }
  TG_CHECK(a.worker >= 0 && a.worker < r.cfg.workers.count, "measure-bounds: --worker ", a.worker,
           " is out of range: the config has workers.count = ", r.cfg.workers.count,
           " (expected 0 .. ", r.cfg.workers.count - 1, ")");
  return r;
}

// The scalings and clips each sample is measured with: the config's clip, and no clipping,
// each with layer-wise and one model-wide scaler.
std::vector<BoundsCombo> combos_of(double clip) {
  TG_CHECK(clip >= 0, "compression.clip must be >= 0, got ", clip);
  std::vector<BoundsCombo> combos = {{tern::Scaling::layer, clip}};
  if (clip > 0) combos.push_back({tern::Scaling::layer, 0.0});
  combos.push_back({tern::Scaling::model, clip});
  if (clip > 0) combos.push_back({tern::Scaling::model, 0.0});
  return combos;
}

// One more iteration of the checkpoint's run: a copy of the checkpoint whose config ends there,
// resumed in the scratch directory run_dir (the trainer restores parameters, optimizer and data
// order exactly), evaluated on one example only; the directory is removed afterwards. True when
// interrupted.
bool run_checkpoint_step(const Config& cfg, const Checkpoint& ck, const fs::path& run_dir,
                         TrainOptions opt, int live) {
  Config one = cfg;
  one.train.iterations = ck.step + 1;
  one.train.checkpoint_every = 0;
  one.train.eval_every = 0;
  one.train.log_every = 1;
  one.data.eval_limit = 1;
  Checkpoint copy = ck;
  copy.config_toml = to_toml(one);
  std::error_code ec;
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
  return Trainer(one, opt).run().interrupted;
}

}  // namespace

CLI::App* add_measure_bounds_command(CLI::App& app, MeasureBoundsArgs& a) {
  // One short line in `terngrad --help`; the detail in `terngrad measure-bounds --help`.
  auto* cmd = app.add_subcommand("measure-bounds",
                                 "Measure TernGrad's gradient-bound quantities while training");
  cmd->footer(
      "Measures TernGrad's bound quantities while training (Assumption 3, Figure 2): per "
      "ternarized tensor and for the model, ||g||^2, ||g||_inf*||g||_1, bound_ratio = "
      "s*||h||_1/||h||^2 with layer-wise vs one model-wide scaler and with vs without clipping, "
      "the ternary variance, code sparsity, and the clipped fraction, length ratio and angle. "
      "Writes DIR/bounds.jsonl (one row per iteration, tensor, scaling, clip), DIR/bounds.txt "
      "(median table, also on stdout) and the run in DIR/train; paper/bounds.py draws the "
      "figures. Unless train.tensorboard = false, DIR/events.out.tfevents.* holds each sampled "
      "tensor's scaler, sparsity, realized_sparsity and bound_ratio and DIR/train the run's "
      "TensorBoard scalars: view them with tensorboard --logdir DIR.");
  cmd->add_option("-c,--config", a.config_path,
                  "TOML config file (default: built-in defaults, the LeNet/MNIST recipe; with "
                  "--checkpoint: the checkpoint's own config)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", a.overrides, "Override a config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option(
      "-o,--out", a.out_dir,
      "Output directory (created; must not hold bounds.jsonl, bounds.txt, train/ or, with "
      "--histograms, histograms.jsonl; default: a new runs/measure-bounds-<UTC time>)");
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
  const std::string out_dir = output_dir(a);
  TG_CHECK(a.every >= 1, "measure-bounds: --every must be >= 1, got ", a.every);
  const MeasuredRun run = load_run(a);
  const Config& cfg = run.cfg;

  const fs::path dir(out_dir);
  const fs::path rows_path = dir / kRowsName, table_path = dir / kTableName;
  const fs::path hist_path = dir / kHistName;
  const fs::path run_dir = dir / (run.ck ? kScratchDirName : kTrainDirName);
  for (const fs::path& p : {rows_path, table_path, run_dir}) check_absent(p, out_dir);
  if (!a.histograms.empty()) check_absent(hist_path, out_dir);
  TG_CHECK(a.bins >= 1, "measure-bounds: --bins must be >= 1, got ", a.bins);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TG_CHECK(!ec && fs::is_directory(dir), "cannot create output directory ", out_dir, ": ",
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
  const std::vector<BoundsCombo> combos = combos_of(copts.clip);
  std::vector<size_t> hist_slots;
  if (!a.histograms.empty()) {
    hist_slots = histogram_slots(a.histograms, layout, ternarized);
    TG_CHECK(copts.scaler_sharing == tern::ScalerSharing::max,
             "--histograms needs compression.scaler_sharing = \"max\" (got \"",
             enum_name(tern::kScalerSharings, copts.scaler_sharing),
             "\"): with per-worker scalers the averaged gradient lies on no grid");
  }

  BoundsRecorder rec(layout, ternarized, combos, copts.seed, rows_path.string(),
                     cfg.train.tensorboard ? a.out_dir : "");
  std::optional<HistogramRecorder> hist;
  if (!hist_slots.empty())
    hist.emplace(layout, copts, hist_slots, cfg.workers.count, a.worker, a.bins,
                 hist_path.string());
  const int64_t only_step = run.ck ? run.ck->step : -1;
  TrainOptions opt;
  const int live = a.progress_on ? 1 : a.progress_off ? 0 : -1;
  const int workers = static_cast<int>(cfg.workers.count);
  opt.gradient_hook = [&](int64_t step, int worker, const Tensor& grad) {
    if (only_step >= 0 ? step != only_step : step % a.every != 0) return;
    if (hist) hist->add(step, worker, grad);
    if (worker != a.worker && workers < 2) return;
    const Tensor h = grad.to(Device::cpu()).contiguous();
    const std::span<const float> g(h.data<float>(), h.numel());
    if (workers >= 2) rec.sharing_sample(step, worker, workers, copts.clip, g);
    if (worker == a.worker) rec.sample(step, worker, g);
  };

  bool interrupted = false;
  if (run.ck) {
    interrupted = run_checkpoint_step(cfg, *run.ck, run_dir, opt, live);
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
    std::fprintf(stderr,
                 "measure-bounds: %lld histogram rows in %s (paper/histograms.py draws "
                 "them)\n",
                 static_cast<long long>(hist->rows()), hist_path.string().c_str());
  return interrupted ? kExitInterrupted : 0;
}

}  // namespace tg::cli
