// Matrix product and fully connected layer, differentiable, CPU (OpenBLAS) and CUDA (cuBLAS).
// Weights in TensorFlow layout [in, out]: y = x * w + b. Inputs f32 on one device, 2-D
// (non-contiguous inputs are copied); results are new contiguous tensors. Throws (naming the
// argument and both shapes) on dtype, device or shape mismatch.
#pragma once

#include "nn/core/tensor.h"

namespace tg {

// a [M, K] x b [K, N] -> [M, N]. Backward: da = dy * b^T, db = a^T * dy.
Tensor matmul(const Tensor& a, const Tensor& b);

// x [N, in], w [in, out], bias [out] or undefined -> [N, out]. Backward adds dbias = column
// sums of dy.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);

}  // namespace tg
