// The benchmark harness: warm-up, device sync, repeat until ~200 ms, report median/p10/p90 and
// derived rates as one JSON object per line on stdout (human notes go to stderr).
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tg::bench {

struct Timing {
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  int reps = 0;
};

// Runs fn() `warmup` times, then repeatedly (sync() after each) until min_seconds have passed
// and at least min_reps samples exist.
Timing time_it(const std::function<void()>& fn, const std::function<void()>& sync,
               double min_seconds = 0.2, int warmup = 2, int min_reps = 5);

// One JSON line: {"k": v, ...}. Values are numbers or strings.
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double v);
  JsonLine& add(const std::string& key, long long v);
  JsonLine& add(const std::string& key, int v) { return add(key, static_cast<long long>(v)); }
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
