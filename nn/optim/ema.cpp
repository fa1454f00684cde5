// Parameter EMA (ema.h), TF ExponentialMovingAverage(decay, num_updates=t): the decay is warmed
// up as d = min(decay, (1 + t) / (10 + t)), and the shadow is updated in TF's
// assign_moving_average form shadow <- shadow - (shadow - params) * (1 - d), with 1 - d formed
// in f32 from the f32-rounded d as TF's float32 graph does. One fused kernel per update.
#include "nn/optim/ema.h"

#include <algorithm>

#include "nn/ops/dispatch.h"
#include "nn/optim/optim_kernels.h"

namespace tg {

Ema::Ema(const Tensor& params, double decay) : decay_(decay) {
  TG_CHECK(decay >= 0.0 && decay < 1.0, "ema: decay must be in [0, 1), got ", decay);
  check_tensor(params, "ema params", DType::f32, params.device());
  shadow_ = params.clone();
}

double Ema::effective_decay(double decay, int64_t t) {
  TG_CHECK(t >= 0, "ema: iteration t must be >= 0, got ", t);
  const double td = static_cast<double>(t);
  return std::min(decay, (1.0 + td) / (10.0 + td));
}

void Ema::update(const Tensor& params_in, int64_t t) {
  check_tensor(params_in, "ema params", DType::f32, shadow_.device());
  check_same_shape(params_in, shadow_, "ema params", "ema shadow");
  TG_CHECK(shadow_.is_contiguous(), "ema: the shadow must be contiguous, got ", shadow_.str());
  const double d = effective_decay(decay_, t);
  const float one_minus_d = 1.0f - static_cast<float>(d);
  const Tensor params = params_in.contiguous();
  const int64_t n = params.numel();
  if (n == 0) return;
  TG_DISPATCH(shadow_.device(), "ema update",
              ema_update_cpu(n, one_minus_d, params.data<float>(), shadow_.data<float>()),
              ema_update_cuda(n, one_minus_d, params.data<float>(), shadow_.data<float>()));
}

}  // namespace tg
