// Local response normalization across channels, TensorFlow semantics (tf.nn.lrn), differentiable,
// CPU and CUDA. Layout NCHW: N batch, C channels, H W height and width; the window runs over
// channels at each pixel (channel stride H*W).
//
//   sqr_sum[c] = sum_{c' = max(0, c - r)}^{min(C - 1, c + r)} x[c']^2      (r = depth_radius)
//   norm[c]    = bias + alpha * sqr_sum[c]          (alpha is NOT divided by the window size)
//   y[c]       = x[c] * norm[c]^(-beta)
//
// Backward (TF's LRNGrad):
//   dx[j] = dy[j] norm[j]^(-beta) - 2 alpha beta x[j] sum_{|i-j|<=r} dy[i] x[i] norm[i]^(-beta-1)
//
// Networks: CifarNet r 4, bias 1, alpha 0.001/9, beta 0.75; AlexNet r 2, bias 2, alpha 1e-4,
// beta 0.75. The defaults below are TF's.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"

namespace tg {

struct LrnOptions {
  int64_t depth_radius = 5;
  float bias = 1.0f, alpha = 1.0f, beta = 0.5f;
};

// x: [N, C, H, W] f32 on any device (any strides). Returns a new contiguous tensor of x's shape on
// x's device. norm must stay positive (bias > 0 and alpha >= 0 guarantee it) or the result is NaN.
// Throws if x is undefined, not f32, not 4-D, or depth_radius < 0.
Tensor lrn(const Tensor& x, const LrnOptions& o = {});

}  // namespace tg
