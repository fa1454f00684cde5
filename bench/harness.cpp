#include "bench/harness.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/core/cuda_runtime.h"
#include "nn/core/device.h"

namespace tg::bench {

Timing time_it(const std::function<void()>& fn, const std::function<void()>& sync,
               double min_seconds, int warmup, int min_reps) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) fn();
  sync();
  std::vector<double> ms;
  const auto start = clock::now();
  while (static_cast<int>(ms.size()) < min_reps ||
         std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    fn();
    sync();
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    if (ms.size() >= 10000) break;
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * (ms.size() - 1) + 0.5))];
  };
  return {pct(0.5), pct(0.1), pct(0.9), static_cast<int>(ms.size())};
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

JsonLine& JsonLine::add(const std::string& key, long long v) {
  fields_.emplace_back(key, std::to_string(v));
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

std::string cpu_model() { return cpu_model_name(); }

std::string gpu_name() {
  if (cuda::device_count() == 0) return "";
  return cuda::device_name(0);
}

}  // namespace tg::bench
