// Max and average pooling on CUDA, NCHW; mirrors pool2d_cpu.cpp line for line.
// x: contiguous [N, C, H, W]; y, argmax, dy: contiguous [N, C, P, Q].
// Forward kernels: one thread per output element (n, c, p, q) (grid-stride), scanning its clipped
// window in row-major order with a strict > so the first maximum wins, exactly as the CPU loop.
// Backward kernels: one thread per input element (n, c, ih, iw), gathering over the outputs
// whose window covers it in row-major (p, q) order. That is the order in which the CPU scatter
// (max) or gather (avg) adds into the same cell, so dx is bit-identical to the CPU's and needs
// no atomics (deterministic). Napkin math: a 3x3/2 window covers each cell at most 2x2 times.
#include "nn/core/cuda_check.cuh"
#include "nn/ops/pool2d_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

struct Window {
  int64_t h0, h1, w0, w1;  // clipped to the image: rows [h0, h1), columns [w0, w1)
};

__device__ __forceinline__ Window window_of(const Pool2dShape& s, int64_t p, int64_t q) {
  const int64_t hs = p * s.sh - s.pad_top, ws = q * s.sw - s.pad_left;
  return {max(hs, int64_t{0}), min(hs + s.kh, s.h), max(ws, int64_t{0}), min(ws + s.kw, s.w)};
}

// Outputs whose window covers input cell (ih, iw): rows [p0, p1), columns [q0, q1).
__device__ __forceinline__ void covering(const Pool2dShape& s, int64_t ih, int64_t iw, int64_t& p0,
                                         int64_t& p1, int64_t& q0, int64_t& q1) {
  // p covers ih iff p*sh - pad_top <= ih < p*sh - pad_top + kh.
  const int64_t a = ih + s.pad_top - s.kh + 1, b = iw + s.pad_left - s.kw + 1;
  p0 = a <= 0 ? 0 : (a + s.sh - 1) / s.sh;
  q0 = b <= 0 ? 0 : (b + s.sw - 1) / s.sw;
  p1 = min((ih + s.pad_top) / s.sh + 1, s.p);
  q1 = min((iw + s.pad_left) / s.sw + 1, s.q);
}

__global__ void max_pool2d_forward_kernel(Pool2dShape s, int64_t total, const float* __restrict__ x,
                                          float* __restrict__ y, int32_t* __restrict__ argmax) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t q = o % s.q, p = (o / s.q) % s.p, nc = o / (s.p * s.q);
    const float* xp = x + nc * s.h * s.w;
    const Window win = window_of(s, p, q);
    float best = 0.0f;
    int64_t best_i = -1;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const int64_t i = ih * s.w + iw;
        const float v = xp[i];
        if (best_i < 0 || v > best) {
          best = v;
          best_i = i;
        }
      }
    }
    y[o] = best;
    argmax[o] = static_cast<int32_t>(best_i);
  }
}

__global__ void max_pool2d_backward_kernel(Pool2dShape s, int64_t total,
                                           const float* __restrict__ dy,
                                           const int32_t* __restrict__ argmax,
                                           float* __restrict__ dx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t iw = i % s.w, ih = (i / s.w) % s.h, nc = i / (s.h * s.w);
    const int64_t cell = ih * s.w + iw;
    const float* dyp = dy + nc * s.p * s.q;
    const int32_t* amp = argmax + nc * s.p * s.q;
    int64_t p0, p1, q0, q1;
    covering(s, ih, iw, p0, p1, q0, q1);
    float sum = 0.0f;
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t q = q0; q < q1; ++q) {
        if (amp[p * s.q + q] == cell) sum += dyp[p * s.q + q];
      }
    }
    dx[i] = sum;
  }
}

__global__ void avg_pool2d_forward_kernel(Pool2dShape s, int64_t total, const float* __restrict__ x,
                                          float* __restrict__ y) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t q = o % s.q, p = (o / s.q) % s.p, nc = o / (s.p * s.q);
    const float* xp = x + nc * s.h * s.w;
    const Window win = window_of(s, p, q);
    float sum = 0.0f;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += xp[ih * s.w + iw];
    const int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
    // __fdiv_rn: IEEE division whatever the fast-math flags, as on the CPU.
    y[o] = count > 0 ? __fdiv_rn(sum, static_cast<float>(count)) : 0.0f;
  }
}

__global__ void avg_pool2d_backward_kernel(Pool2dShape s, int64_t total,
                                           const float* __restrict__ dy, float* __restrict__ dx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t iw = i % s.w, ih = (i / s.w) % s.h, nc = i / (s.h * s.w);
    const float* dyp = dy + nc * s.p * s.q;
    int64_t p0, p1, q0, q1;
    covering(s, ih, iw, p0, p1, q0, q1);
    float sum = 0.0f;
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t q = q0; q < q1; ++q) {
        const Window win = window_of(s, p, q);
        const int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
        sum += __fdiv_rn(dyp[p * s.q + q], static_cast<float>(count));
      }
    }
    dx[i] = sum;
  }
}

}  // namespace

void max_pool2d_forward_cuda(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t total = s.n * s.c * s.p * s.q;
  if (total == 0) return;
  max_pool2d_forward_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0,
                              cuda::current_stream()>>>(s, total, x, y, argmax);
  TG_CUDA_LAUNCH_CHECK();
}

void max_pool2d_backward_cuda(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                              float* dx) {
  const int64_t total = s.n * s.c * s.h * s.w;
  if (total == 0) return;
  max_pool2d_backward_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0,
                               cuda::current_stream()>>>(s, total, dy, argmax, dx);
  TG_CUDA_LAUNCH_CHECK();
}

void avg_pool2d_forward_cuda(const Pool2dShape& s, const float* x, float* y) {
  const int64_t total = s.n * s.c * s.p * s.q;
  if (total == 0) return;
  avg_pool2d_forward_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0,
                              cuda::current_stream()>>>(s, total, x, y);
  TG_CUDA_LAUNCH_CHECK();
}

void avg_pool2d_backward_cuda(const Pool2dShape& s, const float* dy, float* dx) {
  const int64_t total = s.n * s.c * s.h * s.w;
  if (total == 0) return;
  avg_pool2d_backward_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0,
                               cuda::current_stream()>>>(s, total, dy, dx);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
