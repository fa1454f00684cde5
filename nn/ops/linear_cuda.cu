// Bias kernels of linear on CUDA; mirrors linear_cpu.cpp (the products are cuBLAS GEMMs).
//   fill_bias_kernel: one thread per y element (grid-stride), y[n, j] = bias[j].
//   bias_grad_kernel: one thread per column j, summing dy[n, j] over the rows in row order
//                     (neighbouring threads read neighbouring columns: coalesced; fixed order:
//                     deterministic). Accumulates in double like the CPU.
#include "nn/core/cuda_check.cuh"
#include "nn/ops/linear_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

__global__ void fill_bias_kernel(int64_t rows, int64_t cols, const float* __restrict__ bias,
                                 float* __restrict__ y) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = bias[i % cols];
}

__global__ void bias_grad_kernel(int64_t rows, int64_t cols, const float* __restrict__ dy,
                                 float* __restrict__ dbias) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
       j += (int64_t)gridDim.x * blockDim.x) {
    double acc = 0.0;
    for (int64_t n = 0; n < rows; ++n) acc += dy[n * cols + j];
    dbias[j] = static_cast<float>(acc);
  }
}

}  // namespace

void linear_fill_bias_cuda(int64_t rows, int64_t cols, const float* bias, float* y) {
  if (rows * cols == 0) return;
  fill_bias_kernel<<<cuda::grid_for(rows * cols, kThreads), kThreads, 0, cuda::current_stream()>>>(
      rows, cols, bias, y);
  TG_CUDA_LAUNCH_CHECK();
}

void linear_bias_grad_cuda(int64_t rows, int64_t cols, const float* dy, float* dbias) {
  if (cols == 0) return;
  bias_grad_kernel<<<cuda::grid_for(cols, kThreads), kThreads, 0, cuda::current_stream()>>>(
      rows, cols, dy, dbias);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
