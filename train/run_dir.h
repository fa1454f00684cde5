// A run's output directory as the Trainer (train/trainer.h) uses it: rank 0 writes the
// checkpoints (CheckpointFiles) and metrics.jsonl there; on --resume every rank reads the newest
// intact checkpoint back, falling past damaged ones, which rank 0 then sets aside.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "train/checkpoint.h"

namespace tg::train {

using config::Config;

class RunDirectory {
 public:
  using Say = std::function<void(const std::string&)>;

  // out_dir "": a run that writes nothing (resume is then an error). Rank 0 (`lead`) creates the
  // directory, and without `resume` refuses one that already holds a run. With `resume` the
  // directory's checkpoints, newest first, are the candidates to restore (none: the run starts
  // from iteration 0, and says so).
  RunDirectory(const std::string& out_dir, int64_t keep_checkpoints, bool resume, bool lead,
               const Say& say);

  // --resume: the embedded config of each candidate must be `cfg` (less the keys that may change
  // on resume), compared from the headers before anything is built. A file whose header cannot
  // be read is damaged, not a mismatch.
  void check_resume_config(const Config& cfg);
  // Ranks other than 0 read the checkpoints but write nothing.
  void stop_writing();

  // A checkpoint to restore exists (the run's random initial values would be overwritten).
  bool has_candidates() const { return !candidates_.empty(); }
  // --resume: the newest candidate that loads whole (digest verified; `sink` as load_checkpoint's),
  // naming the damaged ones passed through `say`; nullopt when there was none to try. Throws when
  // every candidate is damaged. Without a checkpoint, metrics.jsonl keeps nothing of the attempt
  // before.
  std::optional<Checkpoint> load_newest(const CheckpointSink& sink, const Say& say);
  // The run now stands at `step`, restored from `source`: metrics.jsonl drops the records after
  // it, and the next save keeps `source` when it is the newest file.
  void restored(const std::string& source, int64_t step);
  // Rank 0 renames the checkpoints the resume skipped to "<name>.damaged" (after the rendezvous,
  // so every rank has read what it needed): newer than the run's state, they would otherwise be
  // kept or tried again.
  void set_aside_damaged(const Say& say);

  // Where checkpoints are written (null: nowhere on this rank), and metrics.jsonl ("" likewise).
  CheckpointFiles* files() { return files_ ? &*files_ : nullptr; }
  const std::string& metrics_path() const { return metrics_path_; }

 private:
  std::string dir_;
  std::optional<CheckpointFiles> files_;
  std::string metrics_path_;
  std::vector<std::string> candidates_;
  std::vector<std::pair<std::string, std::string>> damaged_;  // path, why
};

}  // namespace tg::train
