// Full reductions of a tensor to a scalar, differentiable, CPU and CUDA: the statistics TernGrad
// compression needs (max |g| for the scaler, norms for gradient clipping and diagnostics).
// Input: an f32 tensor of any shape (n elements) on any device; the result is a scalar tensor
// (shape {}) on the same device. Sums accumulate in double and are bit-reproducible run to run
// (see reduce_kernels.h). Throws on a non-f32 input, and for mean of an empty tensor.
#pragma once

#include "nn/core/tensor.h"
#include "nn/ops/reduce_kernels.h"

namespace tg {

// Backward: d/dx = dy everywhere.
Tensor sum(const Tensor& x);
// Backward: dy / n everywhere. n == 0 throws.
Tensor mean(const Tensor& x);
// max_i |x_i| (0 for an empty tensor). Backward: sign(x_k) dy at the FIRST index k attaining
// the maximum, 0 elsewhere.
Tensor max_abs(const Tensor& x);
// sum_i x_i^2. Backward: 2 x dy.
Tensor sum_squares(const Tensor& x);
// sum_i |x_i|. Backward: sign(x) dy (0 at x == 0).
Tensor l1_norm(const Tensor& x);
// The one entry point the named functions call.
Tensor reduce(const Tensor& x, ReduceOp op);

}  // namespace tg
