// What a run writes as it goes, and the sums it reports: metrics.jsonl records, each also the
// TensorBoard scalars of its step (RunLog), and the per-iteration accounting of a stretch of
// steps (StepTotals: wire bytes, phase seconds). The Trainer (train/trainer.h) owns one of each.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "nn/core/json.h"
#include "train/evaluate.h"
#include "train/step.h"
#include "train/summary.h"
#include "train/tensorboard.h"

namespace tg::comm {
class ProcessGroup;
}

namespace tg::train {

inline constexpr const char* kMetricsName = "metrics.jsonl";

// One metrics.jsonl record. Its numbers are also the TensorBoard scalars "<type>/<key>" of the
// same step, taken from the same values (strings are left out: TensorBoard plots numbers).
class Record {
 public:
  Record(const std::string& type, int64_t step) : type_(type), step_(step) {
    o_.add("type", type).add("step", step);
  }
  template <class T>
  Record& add(std::string_view key, T value) {
    o_.add(key, value);
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
      scalars_.push_back({type_ + "/" + std::string(key), static_cast<double>(value)});
    return *this;
  }
  int64_t step() const { return step_; }
  std::string json() const { return o_.str(); }
  const std::vector<tensorboard::Scalar>& scalars() const { return scalars_; }

 private:
  std::string type_;
  int64_t step_;
  json::Object o_;
  std::vector<tensorboard::Scalar> scalars_;
};

// An evaluation's record: accuracy (top-5 too when the net has more than 5 classes), loss,
// examples and which weights were evaluated ("ema" or "raw").
Record eval_record(const EvalResult& r, int64_t step, int64_t num_classes, const char* weights);

// metrics.jsonl and, with train.tensorboard, a TensorBoard event file beside it: each record goes
// to both and is flushed as it is written. Until open() (ranks other than 0, runs without an
// output directory) write() does nothing.
class RunLog {
 public:
  // resumed_at: the checkpoint's step when resuming (-1 otherwise): TensorBoard then drops the
  // points after it from earlier event files, as truncate_metrics dropped their lines.
  void open(const std::string& dir, bool tensorboard, int64_t resumed_at);
  void write(const Record& r);

 private:
  std::ofstream out_;
  std::string path_;
  std::optional<tensorboard::EventWriter> events_;
};

// Rewrites metrics.jsonl keeping only records of steps <= `step` (records of a run that died
// after its last checkpoint, and a torn last line, are dropped: the resumed run redoes them).
void truncate_metrics(const std::string& path, int64_t step);

// Sums of a stretch of steps on this rank: bytes sent and received, phase seconds.
struct StepTotals {
  double sent = 0, received = 0;
  double inter_sent = 0, inter_received = 0;  // of them, to and from other nodes
  double compute_s = 0, compress_s = 0, comm_s = 0, exposed_s = 0;
  int64_t steps = 0, timed_steps = 0;
  void add_step(uint64_t s, uint64_t r);
  void add_inter(const comm::WireBytes& w);
  void add_times(const StepTimes& t);
  // Per worker and iteration, averaged over the ranks: collective in a group.
  IterationCost per_iter(comm::ProcessGroup* group, int total_workers) const;
};

}  // namespace tg::train
