// Batch normalization over NCHW (N batch, C channels, H W height and width) or [N, C],
// differentiable, CPU and CUDA, with the semantics of TF-slim's non-fused batch_norm (the one the
// paper's AlexNet/GoogLeNet use: decay 0.9997, eps 0.001, offset only).
//
// Training (batch statistics, per channel over N, H, W; M = N*H*W elements per channel):
//   mean = sum(x) / M,  var = sum((x - mean)^2) / M        (POPULATION variance: tf.nn.moments)
//   y    = gamma * (x - mean) / sqrt(var + eps) + beta
//   moving_mean <- moving_mean - (1 - decay) * (moving_mean - mean)
//   moving_var  <- moving_var  - (1 - decay) * (moving_var - var)
// (TF's assign_moving_average; = decay * moving + (1 - decay) * batch up to rounding).
// The moving variance tracks the same population (biased, /M) variance the batch used, as slim's
// non-fused path does; no Bessel correction (the fused TF kernel would apply M/(M-1)).
// Backward (full batch-statistics gradient, x_hat = (x - mean) / sqrt(var + eps)):
//   dbeta = sum(dy),  dgamma = sum(dy * x_hat),
//   dx    = gamma / sqrt(var + eps) * (dy - dbeta / M - x_hat * dgamma / M)
//
// Inference (training = false): mean/var are the moving statistics, which are left unchanged;
// y is affine in x: dx = gamma * dy / sqrt(moving_var + eps), dgamma and dbeta as above.
#pragma once

#include "nn/core/tensor.h"

namespace tg {

struct BatchNormOptions {
  float decay = 0.9997f;
  float eps = 0.001f;
};

// x: [N, C, H, W] or [N, C], f32, any strides. gamma [C] may be undefined (the "offset-only"
// variant used by the paper's AlexNet/GoogLeNet: scale fixed at 1); beta [C] may be undefined
// (no offset). moving_mean / moving_var: contiguous [C] f32 on x's device, updated in place
// (never recorded) when training, only read otherwise. Returns a new contiguous tensor of x's
// shape. Differentiable in x, gamma and beta in both modes.
// Throws if x is undefined, not f32, neither 2-D nor 4-D, or (training) has no element per
// channel; if gamma, beta, moving_mean or moving_var is not f32 [C] on x's device; if a moving
// statistic is not contiguous; if decay is outside [0, 1] or eps < 0.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& moving_mean,
                  Tensor& moving_var, bool training, const BatchNormOptions& o = {});

}  // namespace tg
