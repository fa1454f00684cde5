// The benchmark harness: warm-up, device sync, repeat until ~200 ms, report median/p10/p90 and
// derived rates as one JSON object per line on stdout (human notes go to stderr). Every program
// in bench/ times with Stopwatch (on nn/core/clock.h's clock), summarises samples with
// summarize() or tg::percentile() (nn/core/percentile.h, the project's one rule) and writes its
// records with JsonLine; none keeps a clock, a percentile rule or a JSON writer of its own.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/core/clock.h"
#include "nn/core/percentile.h"

namespace tg::bench {

// The one clock of the bench programs: wall time on std::chrono::steady_clock and this process's
// CPU time (all its threads, e.g. Gloo's network thread) on CLOCK_PROCESS_CPUTIME_ID, both from
// the construction or the last restart().
class Stopwatch {
 public:
  Stopwatch() { restart(); }
  void restart();
  double ms() const;      // wall milliseconds since the start
  double lap_ms();        // wall milliseconds since the start or the previous lap; starts a new lap
  double cpu_ms() const;  // CPU milliseconds of this process since the start

 private:
  Clock::time_point start_, lap_;
  double cpu_start_ms_ = 0;
};

struct Timing {
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  int reps = 0;
};

// median, p10 and p90 of samples in milliseconds (by tg::percentile), and their count; all 0
// for no samples.
Timing summarize(const std::vector<double>& samples_ms);

// Runs fn() `warmup` times, then repeatedly (sync() after each) until min_seconds have passed
// and at least min_reps samples exist (at most 10,000).
Timing time_it(const std::function<void()>& fn, const std::function<void()>& sync,
               double min_seconds = 0.2, int warmup = 2, int min_reps = 5);

// One JSON line: {"k": v, ...}. Values are numbers (non-finite ones print as null) or strings.
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double v);
  template <std::integral T>  // every integer type (a bool prints as 0 or 1)
  JsonLine& add(const std::string& key, T v) {
    fields_.emplace_back(key, std::to_string(v));
    return *this;
  }
  JsonLine& add(const std::string& key, const std::string& v);
  JsonLine& add(const std::string& key, const char* v) { return add(key, std::string(v)); }
  JsonLine& add_timing(const Timing& t);
  void print() const;  // to stdout, flushed

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// A short description of this machine: CPU model, core count, BLAS threads, GPU name if any.
std::string cpu_model();
std::string gpu_name();  // "" without a GPU

}  // namespace tg::bench
