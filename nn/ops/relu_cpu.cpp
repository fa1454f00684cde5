// ReLU forward and backward on the CPU: one vectorizable pass; mirrors relu_cuda.cu.
#include "nn/ops/relu_kernels.h"

namespace tg {

void relu_forward_cpu(int64_t n, const float* x, float* y) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void relu_backward_cpu(int64_t n, const float* y, const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace tg
