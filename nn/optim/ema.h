// Exponential moving average of the parameters, TF ExponentialMovingAverage with num_updates,
// as the paper's reference code (github.com/wenwei202/terngrad) evaluates:
//   d = min(decay, (1 + t) / (10 + t)),  shadow <- d * shadow + (1 - d) * params,
// computed in TF's assign_moving_average form shadow <- shadow - (shadow - params) * (1 - d)
// (f32, 1 - d formed in f32 like TF's graph). The shadow starts as a copy of the parameters.
// Evaluation uses the shadow weights. Throws on decay outside [0, 1), t < 0, or params of
// another shape, dtype or device than the shadow.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"

namespace tg {

class Ema {
 public:
  // params: the arena's flat f32 buffer; the shadow is a copy on the same device.
  Ema(const Tensor& params, double decay);
  // t = the iteration just completed (0-based).
  void update(const Tensor& params, int64_t t);
  static double effective_decay(double decay, int64_t t);
  const Tensor& shadow() const { return shadow_; }
  Tensor& shadow() { return shadow_; }
  double decay() const { return decay_; }

 private:
  double decay_;
  Tensor shadow_;
};

}  // namespace tg
