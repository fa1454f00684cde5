// Batch normalization on CUDA; mirrors batchnorm_cpu.cpp.
//
// Layout: contiguous [N, C, HW]; channel c of image n is the run x[(n*C + c)*HW .. +HW).
// Per-channel reductions (stats, backward sums): one block of kThreads threads per channel
// (blockIdx.x = c). Thread t accumulates elements e = t, t + kThreads, ... of the channel's
// M = N*HW elements in double, then a fixed shared-memory tree combines the kThreads partials:
// no atomics, so the result is deterministic run to run. Stats take two passes (mean, then
// centred squares) like the CPU.
// Elementwise passes (apply, dx): one thread per element, grid-stride.
// Moving-statistic update: one thread per channel.
#include "nn/core/cuda_check.cuh"
#include "nn/ops/batchnorm_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;  // reduction block size: a power of two (tree below)

__device__ __forceinline__ float inv_std_of(float var, float eps) {
  return 1.0f / sqrtf(var + eps);
}

// Sum of v over the block, returned to every thread. `sh` holds kThreads doubles; it is free
// again when this returns.
__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) sh[threadIdx.x] += sh[threadIdx.x + stride];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads)
    stats_kernel(BatchNormShape s, const float* __restrict__ x, float* __restrict__ mean,
                 float* __restrict__ var) {
  __shared__ double sh[kThreads];
  const int64_t c = blockIdx.x, C = s.c, HW = s.hw, M = s.n * HW;
  double sum = 0.0;
  for (int64_t e = threadIdx.x; e < M; e += kThreads) {
    const int64_t b = e / HW, p = e - b * HW;
    sum += x[(b * C + c) * HW + p];
  }
  const double mu = block_sum(sum, sh) / (double)M;
  double sq = 0.0;
  for (int64_t e = threadIdx.x; e < M; e += kThreads) {
    const int64_t b = e / HW, p = e - b * HW;
    const double d = (double)x[(b * C + c) * HW + p] - mu;
    sq += d * d;
  }
  const double total = block_sum(sq, sh);
  if (threadIdx.x == 0) {
    mean[c] = (float)mu;
    var[c] = (float)(total / (double)M);
  }
}

__global__ void update_moving_kernel(int64_t c, float decay, const float* __restrict__ mean,
                                     const float* __restrict__ var, float* __restrict__ moving_mean,
                                     float* __restrict__ moving_var) {
  const float k = 1.0f - decay;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c;
       i += (int64_t)gridDim.x * blockDim.x) {
    moving_mean[i] -= k * (moving_mean[i] - mean[i]);
    moving_var[i] -= k * (moving_var[i] - var[i]);
  }
}

__global__ void apply_kernel(BatchNormShape s, const float* __restrict__ x,
                             const float* __restrict__ mean, const float* __restrict__ var,
                             const float* __restrict__ gamma, const float* __restrict__ beta,
                             float eps, float* __restrict__ y) {
  const int64_t n = s.n * s.c * s.hw;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = (i / s.hw) % s.c;
    const float scale = (gamma ? gamma[c] : 1.0f) * inv_std_of(var[c], eps);
    const float shift = beta ? beta[c] : 0.0f;
    y[i] = (x[i] - mean[c]) * scale + shift;
  }
}

__global__ void __launch_bounds__(kThreads)
    backward_reduce_kernel(BatchNormShape s, const float* __restrict__ x,
                           const float* __restrict__ dy, const float* __restrict__ mean,
                           const float* __restrict__ var, float eps, float* __restrict__ dgamma,
                           float* __restrict__ dbeta) {
  __shared__ double sh[kThreads];
  const int64_t c = blockIdx.x, C = s.c, HW = s.hw, M = s.n * HW;
  const float mu = mean[c], is = inv_std_of(var[c], eps);
  double sum_dy = 0.0, sum_dy_xhat = 0.0;
  for (int64_t e = threadIdx.x; e < M; e += kThreads) {
    const int64_t b = e / HW, p = e - b * HW;
    const int64_t i = (b * C + c) * HW + p;
    const float xhat = (x[i] - mu) * is;
    sum_dy += dy[i];
    sum_dy_xhat += (double)dy[i] * xhat;
  }
  const double total_dy = block_sum(sum_dy, sh);
  const double total_dy_xhat = block_sum(sum_dy_xhat, sh);
  if (threadIdx.x == 0) {
    dgamma[c] = (float)total_dy_xhat;
    dbeta[c] = (float)total_dy;
  }
}

__global__ void backward_dx_kernel(BatchNormShape s, bool training, const float* __restrict__ x,
                                   const float* __restrict__ dy, const float* __restrict__ mean,
                                   const float* __restrict__ var, const float* __restrict__ gamma,
                                   float eps, const float* __restrict__ dgamma,
                                   const float* __restrict__ dbeta, float* __restrict__ dx) {
  const int64_t n = s.n * s.c * s.hw;
  const float inv_m = 1.0f / (float)(s.n * s.hw);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = (i / s.hw) % s.c;
    const float is = inv_std_of(var[c], eps);
    const float scale = (gamma ? gamma[c] : 1.0f) * is;
    if (training) {
      const float mean_dy = dbeta[c] * inv_m, mean_dy_xhat = dgamma[c] * inv_m;
      const float xhat = (x[i] - mean[c]) * is;
      dx[i] = scale * (dy[i] - mean_dy - xhat * mean_dy_xhat);
    } else {
      dx[i] = scale * dy[i];
    }
  }
}

}  // namespace

void batch_norm_stats_cuda(const BatchNormShape& s, const float* x, float* mean, float* var) {
  if (s.c == 0) return;
  stats_kernel<<<(unsigned)s.c, kThreads, 0, cuda::current_stream()>>>(s, x, mean, var);
  TG_CUDA_LAUNCH_CHECK();
}

void batch_norm_update_moving_cuda(int64_t c, float decay, const float* mean, const float* var,
                                   float* moving_mean, float* moving_var) {
  if (c == 0) return;
  update_moving_kernel<<<cuda::grid_for(c), 256, 0, cuda::current_stream()>>>(
      c, decay, mean, var, moving_mean, moving_var);
  TG_CUDA_LAUNCH_CHECK();
}

void batch_norm_apply_cuda(const BatchNormShape& s, const float* x, const float* mean,
                           const float* var, const float* gamma, const float* beta, float eps,
                           float* y) {
  const int64_t n = s.n * s.c * s.hw;
  if (n == 0) return;
  apply_kernel<<<cuda::grid_for(n), 256, 0, cuda::current_stream()>>>(s, x, mean, var, gamma, beta,
                                                                      eps, y);
  TG_CUDA_LAUNCH_CHECK();
}

void batch_norm_backward_reduce_cuda(const BatchNormShape& s, const float* x, const float* dy,
                                     const float* mean, const float* var, float eps, float* dgamma,
                                     float* dbeta) {
  if (s.c == 0) return;
  backward_reduce_kernel<<<(unsigned)s.c, kThreads, 0, cuda::current_stream()>>>(
      s, x, dy, mean, var, eps, dgamma, dbeta);
  TG_CUDA_LAUNCH_CHECK();
}

void batch_norm_backward_dx_cuda(const BatchNormShape& s, bool training, const float* x,
                                 const float* dy, const float* mean, const float* var,
                                 const float* gamma, float eps, const float* dgamma,
                                 const float* dbeta, float* dx) {
  const int64_t n = s.n * s.c * s.hw;
  if (n == 0) return;
  backward_dx_kernel<<<cuda::grid_for(n), 256, 0, cuda::current_stream()>>>(
      s, training, x, dy, mean, var, gamma, eps, dgamma, dbeta, dx);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
