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

struct LrScheduleOptions {
  LrPolicy policy = LrPolicy::constant;
  double lr = 0.01;
  double end_lr = 0.0;              // polynomial
  double power = 0.5;               // polynomial
  int64_t decay_steps = 0;          // polynomial T (0 = the run's iterations), exponential D
  double decay_rate = 0.1;          // exponential, step
  bool staircase = true;            // exponential
  std::vector<int64_t> boundaries;  // step
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
