// Fused optimizer and EMA updates on CUDA (optim_kernels.h); mirrors optim_cpu.cpp.
// One thread per element (grid-stride loop); each element's slots are read once and written
// once. The arithmetic uses round-to-nearest intrinsics (__fmaf_rn, __fdiv_rn, __fsqrt_rn,
// __fadd_rn, __fsub_rn, __fmul_rn), which nvcc never contracts or approximates, so the results
// are the CPU's bit for bit whatever --fmad / --use_fast_math say.
#include "nn/core/cuda_check.cuh"
#include "nn/optim/optim_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

__global__ void sgd_kernel(int64_t n, float neg_lr, const float* __restrict__ g,
                           float* __restrict__ w) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    w[i] = __fmaf_rn(neg_lr, g[i], w[i]);
}

__global__ void momentum_kernel(int64_t n, float neg_lr, float momentum,
                                const float* __restrict__ g, float* __restrict__ a,
                                float* __restrict__ w) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float ai = __fmaf_rn(a[i], momentum, g[i]);
    a[i] = ai;
    w[i] = __fmaf_rn(neg_lr, ai, w[i]);
  }
}

__global__ void adam_kernel(int64_t n, AdamScalars s, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, float* __restrict__ w) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float gi = g[i], m0 = m[i], v0 = v[i];
    const float mi = __fmaf_rn(__fsub_rn(gi, m0), s.one_minus_beta1, m0);
    const float vi = __fmaf_rn(__fmaf_rn(gi, gi, -v0), s.one_minus_beta2, v0);
    m[i] = mi;
    v[i] = vi;
    const float step = __fdiv_rn(__fmul_rn(mi, s.lr_t), __fadd_rn(__fsqrt_rn(vi), s.epsilon));
    w[i] = __fsub_rn(w[i], step);
  }
}

__global__ void ema_kernel(int64_t n, float one_minus_decay, const float* __restrict__ params,
                           float* __restrict__ shadow) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float s = shadow[i];
    shadow[i] = __fmaf_rn(__fsub_rn(params[i], s), one_minus_decay, s);
  }
}

}  // namespace

void sgd_update_cuda(int64_t n, float lr, const float* g, float* w) {
  if (n == 0) return;
  sgd_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(n, -lr, g, w);
  TG_CUDA_LAUNCH_CHECK();
}

void momentum_update_cuda(int64_t n, float lr, float momentum, const float* g, float* a, float* w) {
  if (n == 0) return;
  momentum_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(
      n, -lr, momentum, g, a, w);
  TG_CUDA_LAUNCH_CHECK();
}

void adam_update_cuda(int64_t n, const AdamScalars& s, const float* g, float* m, float* v,
                      float* w) {
  if (n == 0) return;
  adam_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(n, s, g, m, v,
                                                                                    w);
  TG_CUDA_LAUNCH_CHECK();
}

void ema_update_cuda(int64_t n, float one_minus_decay, const float* params, float* shadow) {
  if (n == 0) return;
  ema_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(
      n, one_minus_decay, params, shadow);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
