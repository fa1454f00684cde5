// Rectified linear unit, differentiable, CPU and CUDA.
#pragma once

#include "nn/core/tensor.h"

namespace tg {

// y = max(x, 0) element-wise (NaN propagates). x: f32 of any shape on any device; y: a new
// contiguous tensor. Backward: dx = dy where y > 0, else 0. Throws on an undefined/non-f32 input.
Tensor relu(const Tensor& x);

}  // namespace tg
