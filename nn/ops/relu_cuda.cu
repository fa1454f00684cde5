// ReLU forward and backward on CUDA; mirrors relu_cpu.cpp.
// n contiguous f32 elements; one thread per element (grid-stride loop), element i owned by the
// thread whose global index is congruent to i. Same comparisons as the CPU, so bit-identical.
#include "nn/core/cuda_check.cuh"
#include "nn/ops/relu_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

__global__ void relu_forward_kernel(int64_t n, const float* __restrict__ x, float* __restrict__ y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
}

__global__ void relu_backward_kernel(int64_t n, const float* __restrict__ y,
                                     const float* __restrict__ dy, float* __restrict__ dx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

void relu_forward_cuda(int64_t n, const float* x, float* y) {
  if (n == 0) return;
  relu_forward_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(n, x,
                                                                                            y);
  TG_CUDA_LAUNCH_CHECK();
}

void relu_backward_cuda(int64_t n, const float* y, const float* dy, float* dx) {
  if (n == 0) return;
  relu_backward_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(
      n, y, dy, dx);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
