// Raw kernels of relu.h over n contiguous f32 elements.
#pragma once

#include <cstdint>

namespace tg {

// y[i] = x[i] < 0 ? 0 : x[i]   (NaN passes through, so divergence is not masked)
void relu_forward_cpu(int64_t n, const float* x, float* y);
void relu_forward_cuda(int64_t n, const float* x, float* y);

// dx[i] = y[i] > 0 ? dy[i] : 0   (y is the forward output)
void relu_backward_cpu(int64_t n, const float* y, const float* dy, float* dx);
void relu_backward_cuda(int64_t n, const float* y, const float* dy, float* dx);

}  // namespace tg
