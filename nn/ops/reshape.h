// Differentiable reshape and flatten: the autograd-aware versions of Tensor::view.
#pragma once

#include "nn/core/tensor.h"

namespace tg {

// x: any dtype, shape and device. `shape` has x.numel() elements; one entry may be -1 (inferred).
// Returns a view sharing x's storage when x is contiguous, else a contiguous copy. Backward:
// dx = dy reshaped to x's shape. Throws on an undefined input or an incompatible shape.
Tensor reshape(const Tensor& x, Shape shape);

// x: [N, ...] with at least one dimension -> [N, product of the rest] (e.g. NCHW -> [N, C*H*W]).
Tensor flatten(const Tensor& x);

}  // namespace tg
