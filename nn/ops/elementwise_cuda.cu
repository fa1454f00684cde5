// Broadcasting binary ops, affine and sum_to on CUDA; mirrors elementwise_cpu.cpp.
// binary/affine: one thread per output element (grid-stride), the output index decomposed into
// a multi-index that addresses a and b through their (possibly zero) strides.
// sum_to: one thread per output element, looping over the broadcast (reduced) dimensions, so
// the sum order is fixed and the result deterministic.
#include "nn/core/cuda_check.cuh"
#include "nn/ops/elementwise_kernels.h"

namespace tg {

namespace {

template <BinaryOp Op>
__device__ __forceinline__ float apply(float x, float y) {
  if constexpr (Op == BinaryOp::add) return x + y;
  if constexpr (Op == BinaryOp::sub) return x - y;
  if constexpr (Op == BinaryOp::mul) return x * y;
  return x / y;
}

template <BinaryOp Op>
__global__ void binary_kernel(BroadcastShape s, int64_t n, const float* __restrict__ a,
                              const float* __restrict__ b, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rem = i, ao = 0, bo = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % s.sizes[d];
      rem /= s.sizes[d];
      ao += c * s.a_strides[d];
      bo += c * s.b_strides[d];
    }
    out[i] = apply<Op>(a[ao], b[bo]);
  }
}

__global__ void affine_kernel(int64_t n, const float* __restrict__ x, float scale, float shift,
                              float* __restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = x[i] * scale + shift;
}

__global__ void sum_to_kernel(BroadcastShape s, const float* __restrict__ g,
                              float* __restrict__ out, int64_t out_numel) {
  // g is contiguous over s.sizes; reduced dims are those with a_strides == 0 and size > 1.
  int64_t g_strides[kMaxDims];
  int64_t acc = 1;
  int64_t reduced = 1;
  for (int d = s.ndim - 1; d >= 0; --d) {
    g_strides[d] = acc;
    acc *= s.sizes[d];
    if (s.a_strides[d] == 0) reduced *= s.sizes[d];
  }
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < out_numel;
       j += (int64_t)gridDim.x * blockDim.x) {
    // Base offset in g from the kept dims (out is contiguous over the kept dims).
    int64_t rem = j, base = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      if (s.a_strides[d] == 0) continue;
      const int64_t c = rem % s.sizes[d];
      rem /= s.sizes[d];
      base += c * g_strides[d];
    }
    float sum = 0.f;
    for (int64_t r = 0; r < reduced; ++r) {
      int64_t rr = r, off = base;
      for (int d = s.ndim - 1; d >= 0; --d) {
        if (s.a_strides[d] != 0) continue;
        const int64_t c = rr % s.sizes[d];
        rr /= s.sizes[d];
        off += c * g_strides[d];
      }
      sum += g[off];
    }
    out[j] = sum;
  }
}

template <BinaryOp Op>
void launch_binary(const BroadcastShape& s, const float* a, const float* b, float* out) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.sizes[d];
  if (n == 0) return;
  binary_kernel<Op><<<cuda::grid_for(n), 256, 0, cuda::current_stream()>>>(s, n, a, b, out);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace

void binary_cuda(BinaryOp op, const BroadcastShape& s, const float* a, const float* b, float* out) {
  switch (op) {
    case BinaryOp::add:
      return launch_binary<BinaryOp::add>(s, a, b, out);
    case BinaryOp::sub:
      return launch_binary<BinaryOp::sub>(s, a, b, out);
    case BinaryOp::mul:
      return launch_binary<BinaryOp::mul>(s, a, b, out);
    case BinaryOp::div:
      return launch_binary<BinaryOp::div>(s, a, b, out);
  }
}

void affine_cuda(int64_t n, const float* x, float scale, float shift, float* out) {
  if (n == 0) return;
  affine_kernel<<<cuda::grid_for(n), 256, 0, cuda::current_stream()>>>(n, x, scale, shift, out);
  TG_CUDA_LAUNCH_CHECK();
}

void sum_to_cuda(const BroadcastShape& s, const float* g, float* out, int64_t out_numel) {
  if (out_numel == 0) return;
  sum_to_kernel<<<cuda::grid_for(out_numel), 256, 0, cuda::current_stream()>>>(s, g, out,
                                                                               out_numel);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
