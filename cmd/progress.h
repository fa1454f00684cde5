// Progress reporting of a long run on stderr. On a terminal: one live line redrawn at most 5
// times a second ("step 1200/10000 [####......] loss 0.0712 lr 0.00894 2950 img/s ETA 2m58s").
// Otherwise (pipes, CI logs): one plain line per logged step. Messages (evaluations, resumes)
// go on their own line in both modes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "nn/core/clock.h"
#include "train/trainer.h"

namespace tg::cli {

class Progress {
 public:
  // silent: prints nothing at all (the ranks other than 0 of a multi-process run).
  Progress(int64_t total_steps, bool live, bool silent = false);
  void start(int64_t first_step);
  // After each step: redraws the live line when due.
  void update(int64_t steps_done, double images_per_sec);
  // After each logged step: records the loss; prints a plain line when not live.
  void log_step(int64_t steps_done, double loss, double lr, double images_per_sec);
  void message(const std::string& line);
  void finish();  // ends the live line

 private:
  void draw();
  std::string eta() const;
  int64_t total_, first_ = 0, done_ = 0;
  bool live_;
  bool silent_;
  bool drawn_ = false;
  double loss_ = -1.0, lr_ = 0.0, ips_ = 0.0;
  Clock::time_point t0_, last_draw_;
};

// A training run's events (train/trainer.h) on a Progress: the CLI's view of a run.
class ProgressListener : public train::TrainListener {
 public:
  // live: 1 on, 0 off (plain lines), -1 = when stderr is a terminal.
  ProgressListener(int64_t total_steps, int live);
  void message(const std::string& line) override { progress_.message(line); }
  void started(int64_t first_step) override { progress_.start(first_step); }
  void stepped(int64_t done, double images_per_sec) override {
    progress_.update(done, images_per_sec);
  }
  void logged(int64_t done, double loss, double lr, double images_per_sec) override {
    progress_.log_step(done, loss, lr, images_per_sec);
  }
  void evaluated(int64_t done, const train::EvalResult& r, bool ema_weights) override;
  void finished() override { progress_.finish(); }

 private:
  Progress progress_;
};

std::string format_percent(double fraction);       // "99.12%"
std::string format_fixed(double v, int decimals);  // "0.0712"
std::string format_duration(double seconds);       // "2m58s", "1h02m", "14s"

}  // namespace tg::cli
