// Wall-clock time for timings and deadlines: the one monotonic clock and the one "seconds since"
// every floor uses (std::chrono::steady_clock, never the system clock, so a clock change during
// a run cannot make a phase negative or a deadline jump).
#pragma once

#include <chrono>

namespace tg {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace tg
