// LRN forward and backward on CUDA; mirrors lrn_cpu.cpp expression for expression.
//
// Layout: contiguous [N, C, HW]. One thread owns one pixel (n, p) of one image and every channel
// of it: it walks c = 0..C-1 with a running window sum in double (channel c + r enters, channel
// c - r - 1 leaves), so each thread does O(C) work whatever r is. Consecutive threads take
// consecutive pixels, so every channel step is a coalesced load across the warp (channel stride
// HW). Grid-stride loop over the N*HW pixels.
//   forward:  writes y and norm for all C channels of its pixel.
//   backward: writes dx for all C channels of its pixel; the window sums
//             t[i] = dy[i] * y[i] / norm[i] (= dy x norm^(-beta-1)), recomputed on leaving.
#include "nn/core/cuda_check.cuh"
#include "nn/ops/lrn_kernels.h"

namespace tg {

namespace {

__global__ void lrn_forward_kernel(LrnShape s, const float* __restrict__ x, float* __restrict__ y,
                                   float* __restrict__ norm) {
  const int64_t C = s.c, HW = s.hw, r = s.radius;
  const int64_t prime = r < C ? r : C;
  const int64_t pixels = s.n * HW;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < pixels;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = i / HW, p = i - b * HW;
    const int64_t base = b * C * HW + p;
    double acc = 0.0;
    for (int64_t c = 0; c < prime; ++c) {
      const float v = x[base + c * HW];
      acc += (double)v * v;
    }
    for (int64_t c = 0; c < C; ++c) {
      if (c + r < C) {
        const float v = x[base + (c + r) * HW];
        acc += (double)v * v;
      }
      if (c - r - 1 >= 0) {
        const float v = x[base + (c - r - 1) * HW];
        acc -= (double)v * v;
      }
      const int64_t j = base + c * HW;
      // fmax(0, .): the subtracted window may leave a tiny negative residue.
      const float n = (float)((double)s.bias + (double)s.alpha * fmax(acc, 0.0));
      norm[j] = n;
      y[j] = x[j] * powf(n, -s.beta);
    }
  }
}

__device__ __forceinline__ double lrn_t(const float* __restrict__ y, const float* __restrict__ norm,
                                        const float* __restrict__ dy, int64_t i) {
  return (double)(dy[i] * y[i] / norm[i]);
}

__global__ void lrn_backward_kernel(LrnShape s, const float* __restrict__ x,
                                    const float* __restrict__ y, const float* __restrict__ norm,
                                    const float* __restrict__ dy, float* __restrict__ dx) {
  const int64_t C = s.c, HW = s.hw, r = s.radius;
  const int64_t prime = r < C ? r : C;
  const int64_t pixels = s.n * HW;
  const double k = 2.0 * (double)s.alpha * (double)s.beta;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < pixels;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = i / HW, p = i - b * HW;
    const int64_t base = b * C * HW + p;
    double acc = 0.0;
    for (int64_t c = 0; c < prime; ++c) acc += lrn_t(y, norm, dy, base + c * HW);
    for (int64_t c = 0; c < C; ++c) {
      if (c + r < C) acc += lrn_t(y, norm, dy, base + (c + r) * HW);
      if (c - r - 1 >= 0) acc -= lrn_t(y, norm, dy, base + (c - r - 1) * HW);
      const int64_t j = base + c * HW;
      const double direct = (double)dy[j] * (double)powf(norm[j], -s.beta);
      dx[j] = (float)(direct - k * (double)x[j] * acc);
    }
  }
}

}  // namespace

void lrn_forward_cuda(const LrnShape& s, const float* x, float* y, float* norm) {
  const int64_t pixels = s.n * s.hw;
  if (pixels == 0 || s.c == 0) return;
  lrn_forward_kernel<<<cuda::grid_for(pixels), 256, 0, cuda::current_stream()>>>(s, x, y, norm);
  TG_CUDA_LAUNCH_CHECK();
}

void lrn_backward_cuda(const LrnShape& s, const float* x, const float* y, const float* norm,
                       const float* dy, float* dx) {
  const int64_t pixels = s.n * s.hw;
  if (pixels == 0 || s.c == 0) return;
  lrn_backward_kernel<<<cuda::grid_for(pixels), 256, 0, cuda::current_stream()>>>(s, x, y, norm, dy,
                                                                                  dx);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
