// Concatenation along one dimension (dim 1 = channels for NCHW: Inception branches),
// differentiable, CPU and CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/core/tensor.h"

namespace tg {

// xs: one or more tensors of one dtype on one device, with the same number of dimensions and
// equal sizes in every dimension except `dim` (negative counts from the end). Returns a new
// contiguous tensor whose size along `dim` is the sum of theirs. Backward: each f32 input that
// requires grad receives its slice of dy. Throws naming the first offending input otherwise.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace tg
