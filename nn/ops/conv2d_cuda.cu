// conv2d on CUDA: im2col + cuBLAS GEMM over chunks of nb images; mirrors conv2d_cpu.cpp step
// for step (same chunking, same workspace layout, same GEMMs). Layouts in conv2d_kernels.h.
//
//   im2col_kernel:  one thread per col element (row = (c*R + r)*S + s, column = i*PQ + p*Q + q);
//                   consecutive threads write consecutive columns (coalesced stores).
//   col2im_kernel:  one thread per dx element of the chunk and group: a gather that sums, in
//                   the CPU's (r, s) order, the col entries of every (r, s, p, q) that read the
//                   pixel. Each dx element has one owner: deterministic, no atomics, no zeroing.
//   scatter_kernel: one thread per y element of the chunk: y = stage + bias (in place when the
//                   GEMM wrote y directly: each thread reads and writes only its own element).
//   gather_kernel:  one thread per stage element: the chunk's dy in [K, nb*PQ] order.
//   dbias_kernel:   one block per output channel k, a fixed-order tree reduction over (n, p, q).
// Everything runs on cuda::current_stream().
#include <algorithm>

#include "nn/core/blas.h"
#include "nn/core/cuda_check.cuh"
#include "nn/ops/conv2d_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

#define TG_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

__global__ void im2col_kernel(Conv2dShape s, const float* __restrict__ x, int64_t n0, int64_t nb,
                              int64_t c0, float* __restrict__ col) {
  const int64_t Cg = s.C / s.groups, RS = s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, total = Cg * RS * ld;
  TG_GRID_STRIDE(idx, total) {
    const int64_t row = idx / ld, j = idx - row * ld;
    const int64_t i = j / PQ, pq = j - i * PQ;
    const int64_t p = pq / s.Q, q = pq - p * s.Q;
    const int64_t c = row / RS, rs = row - c * RS;
    const int64_t r = rs / s.S, sc = rs - r * s.S;
    const int64_t ih = p * s.stride_h - s.pad_top + r, iw = q * s.stride_w - s.pad_left + sc;
    float v = 0.0f;
    if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W)
      v = x[((n0 + i) * s.C + c0 + c) * HW + ih * s.W + iw];
    col[idx] = v;
  }
}

__global__ void col2im_kernel(Conv2dShape s, const float* __restrict__ col, int64_t n0, int64_t nb,
                              int64_t c0, float* __restrict__ dx) {
  const int64_t Cg = s.C / s.groups, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, total = nb * Cg * HW;
  TG_GRID_STRIDE(idx, total) {
    const int64_t ic = idx / HW, hw = idx - ic * HW;
    const int64_t i = ic / Cg, c = ic - i * Cg;
    const int64_t h = hw / s.W, w = hw - h * s.W;
    const float* src = col + c * s.R * s.S * ld + i * PQ;
    float sum = 0.0f;
    for (int64_t r = 0; r < s.R; ++r) {
      const int64_t th = h + s.pad_top - r;  // = p * stride_h for the p that reads (h, r)
      if (th < 0) break;                     // th only decreases with r
      if (th % s.stride_h != 0) continue;
      const int64_t p = th / s.stride_h;
      if (p >= s.P) continue;
      for (int64_t sc = 0; sc < s.S; ++sc) {
        const int64_t tw = w + s.pad_left - sc;
        if (tw < 0) break;
        if (tw % s.stride_w != 0) continue;
        const int64_t q = tw / s.stride_w;
        if (q >= s.Q) continue;
        sum += src[(r * s.S + sc) * ld + p * s.Q + q];
      }
    }
    dx[((n0 + i) * s.C + c0 + c) * HW + hw] = sum;
  }
}

// stage and y may alias (nb == 1): no __restrict__.
__global__ void scatter_kernel(Conv2dShape s, const float* stage, const float* bias, int64_t n0,
                               int64_t nb, float* y) {
  const int64_t PQ = s.P * s.Q, KPQ = s.K * PQ, ld = nb * PQ, total = nb * KPQ;
  TG_GRID_STRIDE(idx, total) {
    const int64_t i = idx / KPQ, kj = idx - i * KPQ;
    const int64_t k = kj / PQ, j = kj - k * PQ;
    const float b = bias ? bias[k] : 0.0f;
    y[n0 * KPQ + idx] = stage[k * ld + i * PQ + j] + b;
  }
}

__global__ void gather_kernel(Conv2dShape s, const float* __restrict__ dy, int64_t n0, int64_t nb,
                              float* __restrict__ stage) {
  const int64_t PQ = s.P * s.Q, ld = nb * PQ, total = s.K * ld;
  TG_GRID_STRIDE(idx, total) {
    const int64_t k = idx / ld, j = idx - k * ld;
    const int64_t i = j / PQ, pq = j - i * PQ;
    stage[idx] = dy[((n0 + i) * s.K + k) * PQ + pq];
  }
}

__global__ void dbias_kernel(Conv2dShape s, const float* __restrict__ dy,
                             float* __restrict__ dbias) {
  __shared__ float partial[kThreads];
  const int64_t k = blockIdx.x, PQ = s.P * s.Q, total = s.N * PQ;
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < total; e += kThreads) {
    const int64_t n = e / PQ, j = e - n * PQ;
    sum += dy[(n * s.K + k) * PQ + j];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[k] = partial[0];
}

void im2col(const Conv2dShape& s, const float* x, int64_t n0, int64_t nb, int64_t c0, float* col) {
  const int64_t total = s.C / s.groups * s.R * s.S * nb * s.P * s.Q;
  im2col_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, x, n0, nb, c0, col);
  TG_CUDA_LAUNCH_CHECK();
}

void col2im(const Conv2dShape& s, const float* col, int64_t n0, int64_t nb, int64_t c0, float* dx) {
  const int64_t total = nb * (s.C / s.groups) * s.H * s.W;
  col2im_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, col, n0, nb, c0, dx);
  TG_CUDA_LAUNCH_CHECK();
}

void scatter_output(const Conv2dShape& s, const float* stage, const float* bias, int64_t n0,
                    int64_t nb, float* y) {
  const int64_t total = nb * s.K * s.P * s.Q;
  if (stage == y + n0 * s.K * s.P * s.Q && bias == nullptr) return;  // GEMM wrote y, no bias
  scatter_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, stage, bias, n0, nb, y);
  TG_CUDA_LAUNCH_CHECK();
}

const float* chunk_dy(const Conv2dShape& s, const float* dy, int64_t n0, int64_t nb, float* stage) {
  if (nb == 1) return dy + n0 * s.K * s.P * s.Q;
  const int64_t total = s.K * nb * s.P * s.Q;
  gather_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      s, dy, n0, nb, stage);
  TG_CUDA_LAUNCH_CHECK();
  return stage;
}

}  // namespace

void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                         float* y, float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = workspace + nb * CRS * PQ;
  for (int64_t n0 = 0; n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    float* out = nbc == 1 ? y + n0 * s.K * PQ : stage;  // one image: [K, PQ] is y itself
    for (int64_t g = 0; g < G; ++g) {
      im2col(s, x, n0, nbc, g * (s.C / G), col);
      gemm_cuda(dense_gemm(Trans::N, Trans::N, Kg, ld, CRS, 1.0f, w + g * Kg * CRS, col, 0.0f,
                           out + g * Kg * ld));
    }
    scatter_output(s, out, bias, n0, nbc, y);
  }
}

void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                               float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = workspace + nb * CRS * PQ;
  for (int64_t n0 = 0; n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    const float* g_out = chunk_dy(s, dy, n0, nbc, stage);
    for (int64_t g = 0; g < G; ++g) {
      gemm_cuda(dense_gemm(Trans::T, Trans::N, CRS, ld, Kg, 1.0f, w + g * Kg * CRS,
                           g_out + g * Kg * ld, 0.0f, col));
      col2im(s, col, n0, nbc, g * (s.C / G), dx);
    }
  }
}

void conv2d_backward_weight_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 float* dbias, float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = dw ? workspace + nb * CRS * PQ : nullptr;  // no workspace for dbias alone
  if (dw && s.N == 0) {                                     // no chunk to overwrite dw
    TG_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * s.K * CRS, cuda::current_stream()));
  }
  for (int64_t n0 = 0; dw && n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    const float* g_out = chunk_dy(s, dy, n0, nbc, stage);
    const float beta = n0 == 0 ? 0.0f : 1.0f;  // the first chunk overwrites dw
    for (int64_t g = 0; g < G; ++g) {
      im2col(s, x, n0, nbc, g * (s.C / G), col);
      gemm_cuda(dense_gemm(Trans::N, Trans::T, Kg, CRS, ld, 1.0f, g_out + g * Kg * ld, col, beta,
                           dw + g * Kg * CRS));
    }
  }
  if (dbias) {
    dbias_kernel<<<static_cast<unsigned>(s.K), kThreads, 0, cuda::current_stream()>>>(s, dy, dbias);
    TG_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace tg
