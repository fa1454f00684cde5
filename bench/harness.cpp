#include "bench/harness.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/core/cuda_runtime.h"
#include "nn/core/device.h"

namespace tg::bench {

void Stopwatch::restart() {
  start_ = lap_ = Clock::now();
  cpu_start_ms_ = 0;
  cpu_start_ms_ = cpu_ms();
}

double Stopwatch::ms() const {
  return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
}

double Stopwatch::lap_ms() {
  const auto now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - lap_).count();
  lap_ = now;
  return ms;
}

double Stopwatch::cpu_ms() const {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6 - cpu_start_ms_;
}

Timing summarize(const std::vector<double>& samples_ms) {
  if (samples_ms.empty()) return {};
  return {percentile(samples_ms, 0.5), percentile(samples_ms, 0.1), percentile(samples_ms, 0.9),
          static_cast<int>(samples_ms.size())};
}

Timing time_it(const std::function<void()>& fn, const std::function<void()>& sync,
               double min_seconds, int warmup, int min_reps) {
  for (int i = 0; i < warmup; ++i) fn();
  sync();
  std::vector<double> ms;
  const Stopwatch total;
  while (static_cast<int>(ms.size()) < min_reps || total.ms() < 1e3 * min_seconds) {
    const Stopwatch rep;
    fn();
    sync();
    ms.push_back(rep.ms());
    if (ms.size() >= 10000) break;
  }
  return summarize(std::move(ms));
}

namespace {
std::string quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}
}  // namespace

JsonLine& JsonLine::add(const std::string& key, double v) {
  std::ostringstream os;
  if (std::isfinite(v)) {
    os.precision(6);
    os << v;
  } else {
    os << "null";
  }
  fields_.emplace_back(key, os.str());
  return *this;
}

JsonLine& JsonLine::add(const std::string& key, const std::string& v) {
  fields_.emplace_back(key, quote(v));
  return *this;
}

JsonLine& JsonLine::add_timing(const Timing& t) {
  return add("median_ms", t.median_ms)
      .add("p10_ms", t.p10_ms)
      .add("p90_ms", t.p90_ms)
      .add("reps", t.reps);
}

void JsonLine::print() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i) s += ", ";
    s += quote(fields_[i].first) + ": " + fields_[i].second;
  }
  s += "}\n";
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

std::string cpu_model() {
  return cpu_model_name();
}

std::string gpu_name() {
  if (cuda::device_count() == 0) return "";
  return cuda::device_name(0);
}

}  // namespace tg::bench
