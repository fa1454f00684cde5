// Progress reporting of a long run on stderr. On a terminal: one live line redrawn at most 5
// times a second ("step 1200/10000 [####......] loss 0.0712 lr 0.00894 2950 img/s ETA 2m58s").
// Otherwise (pipes, CI logs): one plain line per logged step. Messages (evaluations, resumes)
// go on their own line in both modes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

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
  std::chrono::steady_clock::time_point t0_, last_draw_;
};

std::string format_percent(double fraction);         // "99.12%"
std::string format_fixed(double v, int decimals);    // "0.0712"
std::string format_duration(double seconds);         // "2m58s", "1h02m", "14s"

}  // namespace tg::cli
