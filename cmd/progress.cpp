#include "cmd/progress.h"

#include <unistd.h>

#include <cstdio>

#include "nn/core/clock.h"

namespace tg::cli {

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string format_percent(double fraction) {
  return format_fixed(100.0 * fraction, 2) + "%";
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

Progress::Progress(int64_t total_steps, bool live, bool silent)
    : total_(total_steps), live_(live && !silent), silent_(silent) {}

void Progress::start(int64_t first_step) {
  first_ = done_ = first_step;
  t0_ = last_draw_ = Clock::now();
  if (first_step > 0) message("resuming at iteration " + std::to_string(first_step));
}

std::string Progress::eta() const {
  if (done_ <= first_) return "?";
  const double el = seconds_since(t0_);
  return format_duration(el / static_cast<double>(done_ - first_) *
                         static_cast<double>(total_ - done_));
}

void Progress::draw() {
  constexpr int kBar = 20;
  const int filled = total_ > 0 ? static_cast<int>(kBar * done_ / total_) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBar, '.');
  std::string line =
      "\rstep " + std::to_string(done_) + "/" + std::to_string(total_) + " [" + bar + "]";
  if (loss_ >= 0) line += " loss " + format_fixed(loss_, 4);
  line += " lr " + format_fixed(lr_, 6) + " " + format_fixed(ips_, 0) + " img/s ETA " + eta() +
          "\x1b[K";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
  last_draw_ = Clock::now();
}

void Progress::update(int64_t steps_done, double images_per_sec) {
  done_ = steps_done;
  ips_ = images_per_sec;
  if (live_ && seconds_since(last_draw_) >= 0.2) draw();
}

void Progress::log_step(int64_t steps_done, double loss, double lr, double images_per_sec) {
  done_ = steps_done;
  loss_ = loss;
  lr_ = lr;
  ips_ = images_per_sec;
  if (live_ || silent_) return;
  std::fprintf(stderr, "step %lld/%lld loss %.4f lr %.6g %.0f img/s ETA %s\n",
               static_cast<long long>(steps_done), static_cast<long long>(total_), loss, lr,
               images_per_sec, eta().c_str());
  std::fflush(stderr);
}

void Progress::message(const std::string& line) {
  if (silent_) return;
  if (live_ && drawn_) std::fputs("\r\x1b[K", stderr);
  std::fprintf(stderr, "%s\n", line.c_str());
  if (live_ && drawn_) draw();
  std::fflush(stderr);
}

void Progress::finish() {
  if (live_ && drawn_) {
    draw();
    std::fputs("\n", stderr);
    drawn_ = false;
  }
}

ProgressListener::ProgressListener(int64_t total_steps, int live)
    : progress_(total_steps, live == 1 || (live == -1 && ::isatty(STDERR_FILENO) == 1)) {}

void ProgressListener::evaluated(int64_t done, const train::EvalResult& r, bool ema_weights) {
  progress_.message("eval @ " + std::to_string(done) + ": test accuracy " +
                    format_percent(r.accuracy) + ", loss " + format_fixed(r.loss, 4) +
                    (ema_weights ? " (EMA weights)" : ""));
}

}  // namespace tg::cli
