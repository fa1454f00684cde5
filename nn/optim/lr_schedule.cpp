// Learning-rate policies of lr_schedule.h, evaluated in double:
//   polynomial  = tf.train.polynomial_decay(cycle=False): the step is clipped at T, so
//                 lr(step >= T) = end_lr.
//   exponential = tf.train.exponential_decay: rate^(step / D), staircase: rate^floor(step / D).
//   step        = lr0 * rate^k, k = the number of boundaries b with b <= step (the rate applies
//                 from the boundary step itself on; TF's piecewise_constant switches one step
//                 later, at step > b).
#include "nn/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "nn/core/error.h"

namespace tg {

namespace {

bool finite_nonneg(double x) {
  return std::isfinite(x) && x >= 0.0;
}
bool finite_pos(double x) {
  return std::isfinite(x) && x > 0.0;
}

}  // namespace

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  const LrScheduleOptions& o = options_;
  const std::string_view p = enum_name(kLrPolicies, o.policy);
  TG_CHECK(finite_nonneg(o.lr), "lr_schedule: lr must be finite and >= 0 for policy '", p,
           "', got ", o.lr);
  if (o.policy == LrPolicy::polynomial) {
    TG_CHECK(o.decay_steps > 0, "lr_schedule: decay_steps must be > 0 for policy '", p, "', got ",
             o.decay_steps);
    TG_CHECK(finite_nonneg(o.end_lr), "lr_schedule: end_lr must be finite and >= 0 for policy '", p,
             "', got ", o.end_lr);
    TG_CHECK(finite_pos(o.power), "lr_schedule: power must be finite and > 0 for policy '", p,
             "', got ", o.power);
  } else if (o.policy == LrPolicy::exponential) {
    TG_CHECK(o.decay_steps > 0, "lr_schedule: decay_steps must be > 0 for policy '", p, "', got ",
             o.decay_steps);
    TG_CHECK(finite_pos(o.decay_rate),
             "lr_schedule: decay_rate must be finite and > 0 for policy '", p, "', got ",
             o.decay_rate);
  } else if (o.policy == LrPolicy::step) {
    TG_CHECK(finite_pos(o.decay_rate),
             "lr_schedule: decay_rate must be finite and > 0 for policy '", p, "', got ",
             o.decay_rate);
    TG_CHECK(!o.boundaries.empty(), "lr_schedule: boundaries must not be empty for policy '", p,
             "'");
    TG_CHECK(o.boundaries[0] >= 0, "lr_schedule: boundaries[0] must be >= 0 for policy '", p,
             "', got ", o.boundaries[0]);
    for (size_t i = 1; i < o.boundaries.size(); ++i) {
      TG_CHECK(o.boundaries[i] > o.boundaries[i - 1],
               "lr_schedule: boundaries must be strictly increasing for policy '", p,
               "', got boundaries[", i - 1, "] = ", o.boundaries[i - 1], " and boundaries[", i,
               "] = ", o.boundaries[i]);
    }
  }
}

double LrSchedule::operator()(int64_t step) const {
  TG_CHECK(step >= 0, "lr_schedule: step must be >= 0, got ", step);
  const LrScheduleOptions& o = options_;
  if (o.policy == LrPolicy::polynomial) {
    const double frac = static_cast<double>(std::min(step, o.decay_steps)) / o.decay_steps;
    return (o.lr - o.end_lr) * std::pow(1.0 - frac, o.power) + o.end_lr;
  }
  if (o.policy == LrPolicy::exponential) {
    const double e = o.staircase ? static_cast<double>(step / o.decay_steps)
                                 : static_cast<double>(step) / o.decay_steps;
    return o.lr * std::pow(o.decay_rate, e);
  }
  if (o.policy == LrPolicy::step) {
    const auto k =
        std::upper_bound(o.boundaries.begin(), o.boundaries.end(), step) - o.boundaries.begin();
    return o.lr * std::pow(o.decay_rate, static_cast<double>(k));
  }
  return o.lr;  // constant (the constructor admitted no other policy)
}

}  // namespace tg
