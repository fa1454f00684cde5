#include "train/run_dir.h"

#include <filesystem>
#include <system_error>

#include "train/run_log.h"

namespace tg::train {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::string& out_dir, int64_t keep_checkpoints, bool resume,
                           bool lead, const Say& say)
    : dir_(out_dir) {
  if (out_dir.empty()) {
    TG_CHECK(!resume,
             "resume needs an output directory (the directory of the run to "
             "continue)");
    return;
  }
  files_.emplace(out_dir, keep_checkpoints);
  metrics_path_ = (fs::path(out_dir) / kMetricsName).string();
  if (lead) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    TG_CHECK(!ec && fs::is_directory(out_dir), "cannot create output directory ", out_dir, ": ",
             ec.message());
  }
  const std::vector<std::string> found = files_->candidates();
  if (!resume && lead)
    TG_CHECK(found.empty() && !fs::exists(metrics_path_), "output directory ", out_dir,
             " already holds a run (", found.empty() ? metrics_path_ : found.front(),
             "); pass --resume to continue it, or choose another --out");
  // --resume without a checkpoint starts the run (a restart loop's first attempt, or one killed
  // before its first checkpoint): whatever the directory holds of it is redone.
  if (resume) {
    candidates_ = found;
    if (found.empty())
      say("--resume: no checkpoint in " + out_dir + " yet; starting from iteration 0");
  }
}

void RunDirectory::check_resume_config(const Config& cfg) {
  std::vector<std::string> readable;
  for (const std::string& path : candidates_) {
    Checkpoint header;
    try {
      header = load_checkpoint_header(path);
    } catch (const Error& e) {
      damaged_.emplace_back(path, e.what());
      continue;
    }
    Config saved = config::parse_config(header.config_toml, path + " (embedded config)");
    const std::string want = config::to_toml(config::with_report_keys_of(saved, cfg));
    const std::string have = config::to_toml(cfg);
    TG_CHECK(want == have, "--resume: the config differs from the one ", path,
             " was written with; resuming would not reproduce the run. Differences:",
             config::config_diff(have, want, "now:        ", "checkpoint: "));
    readable.push_back(path);
  }
  candidates_ = std::move(readable);
}

void RunDirectory::stop_writing() {
  files_.reset();
  metrics_path_.clear();
}

std::optional<Checkpoint> RunDirectory::load_newest(const CheckpointSink& sink, const Say& say) {
  if (candidates_.empty() && damaged_.empty()) {
    if (!metrics_path_.empty()) truncate_metrics(metrics_path_, 0);
    return std::nullopt;
  }
  for (const std::string& path : candidates_) {
    // A file that fails its digest may have left part of itself in the sink's tensors: the next
    // one overwrites it.
    try {
      Checkpoint ckpt = load_checkpoint(path, sink);
      // The errors name the file already.
      for (const auto& [bad, why] : damaged_)
        say("--resume: skipping " + (why.rfind(bad, 0) == 0 ? why : bad + ": " + why));
      return ckpt;
    } catch (const Error& e) {
      damaged_.emplace_back(path, e.what());
    }
  }
  std::string why;
  for (const auto& [bad, what] : damaged_) why += "; " + what;
  TG_THROW("--resume: no intact checkpoint in ", dir_, why);
}

void RunDirectory::restored(const std::string& source, int64_t step) {
  if (!metrics_path_.empty()) truncate_metrics(metrics_path_, step);
  if (files_ && source == files_->latest()) files_->set_latest_step(step);
}

void RunDirectory::set_aside_damaged(const Say& say) {
  if (!files_ || damaged_.empty()) return;  // ranks other than 0 write nothing (stop_writing)
  std::vector<std::string> paths;
  for (const auto& [path, why] : damaged_) paths.push_back(path);
  for (const std::string& moved : files_->set_aside(paths)) say("--resume: set aside " + moved);
  damaged_.clear();
}

}  // namespace tg::train
