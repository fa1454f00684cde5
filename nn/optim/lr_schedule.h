// Learning-rate policies (the reference code's, TF semantics), lr(step) for step = 0, 1, ...:
//   constant:     lr0
//   polynomial:   (lr0 - end) * (1 - min(step, T) / T)^power + end     (T = decay_steps)
//   exponential:  lr0 * rate^(step / D)        staircase: rate^floor(step / D)   (D = decay_steps)
//   step:         lr0 * rate^(number of boundaries <= step)   (boundaries = explicit steps)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/core/enum_names.h"

namespace tg {

enum class LrPolicy { constant, polynomial, exponential, step };
inline constexpr EnumTable<LrPolicy, 4> kLrPolicies = {{{LrPolicy::constant, "constant"},
                                                        {LrPolicy::polynomial, "polynomial"},
                                                        {LrPolicy::exponential, "exponential"},
                                                        {LrPolicy::step, "step"}}};

// The defaults are the paper's LeNet recipe (polynomial decay to 0 with power 0.5). decay_steps
// must be set for polynomial and exponential (a config's 0 means the run's iterations, which the
// solver puts here: train/options.cpp).
struct LrScheduleOptions {
  LrPolicy policy = LrPolicy::polynomial;
  double lr = 0.01;
  double end_lr = 0.0;              // polynomial
  double power = 0.5;               // polynomial
  int64_t decay_steps = 0;          // polynomial T, exponential D
  double decay_rate = 0.1;          // exponential, step
  bool staircase = true;            // exponential
  std::vector<int64_t> boundaries;  // step
  bool operator==(const LrScheduleOptions&) const = default;
};

class LrSchedule {
 public:
  // Throws on bad values (negative lr, decay_steps <= 0 where needed,
  // unsorted boundaries), naming the field.
  explicit LrSchedule(LrScheduleOptions options);
  double operator()(int64_t step) const;
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
};

}  // namespace tg
