// The one percentile rule of the project (benchmarks' median/p10/p90, measure-bounds' tables,
// perf-model's calibration): nearest rank, the sorted finite samples' value at index
// round(p (n - 1)). So the median of an even count is the upper of the two middle values (no
// averaging: every reported value is one that was measured), p = 0 is the minimum and p = 1 the
// maximum. Non-finite samples (NaN for "not measured") are left out; with none left the result
// is NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tg {

inline double percentile(std::vector<double> samples, double p) {
  std::erase_if(samples, [](double x) { return !std::isfinite(x); });
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(samples.begin(), samples.end());
  const auto last = static_cast<double>(samples.size() - 1);
  return samples[static_cast<size_t>(std::clamp(p, 0.0, 1.0) * last + 0.5)];
}

inline double median(std::vector<double> samples) {
  return percentile(std::move(samples), 0.5);
}

}  // namespace tg
