// 2-D convolution (cross-correlation), NCHW, differentiable, CPU and CUDA. Shape letters and
// the exact formula: nn/ops/conv2d_kernels.h.
//   x    [N, C, H, W]     f32
//   w    [K, C/groups, R, S]
//   bias [K] or undefined
//   y    [N, K, P, Q]     P, Q from padded_dim() (TensorFlow SAME / VALID, or explicit pad)
#pragma once

#include <vector>

#include "nn/core/tensor.h"
#include "nn/ops/conv2d_kernels.h"
#include "nn/ops/padding.h"

namespace tg {

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  Padding padding = Padding::same;
  int64_t pad_h = 0, pad_w = 0;  // Padding::explicit_pad only: symmetric pad per side
  int64_t groups = 1;
};

// Validates x/w shapes and options and returns the kernel shape. Throws (naming the argument)
// unless x is 4-D, w is 4-D, groups > 0 divides both C and K, w's input channels == C/groups,
// strides are positive and the window fits (VALID / explicit).
Conv2dShape conv2d_shape(const Shape& x, const Shape& w, const Conv2dOptions& o);

// y = conv(x, w) + bias. All inputs f32 on one device (non-contiguous inputs are copied);
// the result is a new contiguous tensor. Throws on dtype, device or shape mismatch.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o = {});

// For the memory plan (train/memory_plan.h): while recording is on, the shape of every
// convolution run (forward or backward) is kept, once each; the scratch each needs at another
// batch is conv2d_workspace_floats of the shape with that N. Process-wide, thread-safe.
void conv2d_record_shapes(bool on);
std::vector<Conv2dShape> conv2d_recorded_shapes();

}  // namespace tg
