// Full reductions, argmax |x| and their backward on CUDA; mirrors reduce_cpu.cpp.
//
// Two deterministic passes, no atomics:
//   1. reduce_partials_kernel: a grid of B = reduce_blocks(n) blocks of kThreads threads (B
//      depends only on n). Thread t of block b accumulates, in double, the elements
//      i = b * kThreads + t + j * B * kThreads (grid stride); the block then combines its
//      threads in a fixed warp-shuffle tree and thread 0 writes partial[b] (a double in the
//      workspace).
//   2. reduce_final_kernel: one block combines partial[0..B) the same way; thread 0 writes out.
// The summation order is fixed by n alone, so every run gives the same bits. argmax_abs uses the
// same two passes on (|x|, index) pairs, preferring the larger |x| and then the smaller index.
// Workspace layout (floats): [0, 2B) B doubles (partial values), [2B, 4B) B int64 (partial
// argmax indices). Backward: one thread per element of dx (grid stride).
//
// Napkin math: a 1 M-element gradient is 4 MB; at ~3 TB/s that is ~1.3 us of reading. B <= 1024
// blocks of 256 threads roughly fill an H100 (132 SMs x 2048 threads); the second pass reads at
// most 8 KiB.
#include <cstdint>
#include <type_traits>

#include "nn/core/cuda_block_reduce.cuh"
#include "nn/core/cuda_check.cuh"
#include "nn/ops/reduce_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;           // a multiple of 32 (full warps for the shuffles)
constexpr int64_t kMaxBlocks = 1024;    // grid cap of pass 1 = number of partials
constexpr int64_t kItemsPerThread = 4;  // below this load per thread, fewer blocks

int64_t reduce_blocks(int64_t n) {
  int64_t b = (n + kThreads * kItemsPerThread - 1) / (kThreads * kItemsPerThread);
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return b;
}

struct SumF {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct MaxF {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

template <ReduceOp Op>
using CombineOf = std::conditional_t<Op == ReduceOp::max_abs, MaxF, SumF>;

template <ReduceOp Op>
__device__ __forceinline__ double term(float v) {
  if constexpr (Op == ReduceOp::l1 || Op == ReduceOp::max_abs) return fabs(double(v));
  if constexpr (Op == ReduceOp::sum_squares) return double(v) * double(v);
  return double(v);
}

using cuda::block_reduce;

template <ReduceOp Op>
__global__ void reduce_partials_kernel(const float* __restrict__ x, int64_t n,
                                       double* __restrict__ partial) {
  __shared__ double smem[32];
  double acc = 0.0;  // identity of + and of max over |x| >= 0
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    acc = CombineOf<Op>()(acc, term<Op>(x[i]));
  acc = block_reduce(acc, 0.0, CombineOf<Op>(), smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <ReduceOp Op>
__global__ void reduce_final_kernel(const double* __restrict__ partial, int64_t num_partials,
                                    int64_t n, float* __restrict__ out) {
  __shared__ double smem[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < num_partials; i += blockDim.x)
    acc = CombineOf<Op>()(acc, partial[i]);
  acc = block_reduce(acc, 0.0, CombineOf<Op>(), smem);
  if (threadIdx.x == 0) {
    if constexpr (Op == ReduceOp::mean) acc /= double(n);
    out[0] = static_cast<float>(acc);
  }
}

// ---- argmax |x| -------------------------------------------------------------------------

// a wins over b: larger value, or equal value and smaller index.
__device__ __forceinline__ bool wins(float va, long long ia, float vb, long long ib) {
  return va > vb || (va == vb && ia < ib);
}

__device__ void block_argmax(float& v, long long& idx, float* sv, long long* si) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const long long oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (wins(ov, oi, v, idx)) {
      v = ov;
      idx = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? sv[lane] : -1.f;
    idx = lane < nwarps ? si[lane] : INT64_MAX;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const long long oi = __shfl_xor_sync(0xffffffffu, idx, o);
      if (wins(ov, oi, v, idx)) {
        v = ov;
        idx = oi;
      }
    }
    if (lane == 0) {
      sv[0] = v;
      si[0] = idx;
    }
  }
  __syncthreads();
  v = sv[0];
  idx = si[0];
  __syncthreads();
}

__global__ void argmax_partials_kernel(const float* __restrict__ x, int64_t n,
                                       double* __restrict__ pv, long long* __restrict__ pi) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  // -1 is below every |x|; INT64_MAX loses every tie. A thread visits its indices in increasing
  // order, so the strict > keeps its first maximum.
  float v = -1.f;
  long long idx = INT64_MAX;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float a = fabsf(x[i]);
    if (a > v) {
      v = a;
      idx = i;
    }
  }
  block_argmax(v, idx, sv, si);
  if (threadIdx.x == 0) {
    pv[blockIdx.x] = v;
    pi[blockIdx.x] = idx;
  }
}

__global__ void argmax_final_kernel(const double* __restrict__ pv, const long long* __restrict__ pi,
                                    int64_t num_partials, int64_t* __restrict__ index) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  float v = -1.f;
  long long idx = INT64_MAX;
  for (int64_t i = threadIdx.x; i < num_partials; i += blockDim.x) {
    const float ov = static_cast<float>(pv[i]);
    if (wins(ov, pi[i], v, idx)) {
      v = ov;
      idx = pi[i];
    }
  }
  block_argmax(v, idx, sv, si);
  // n == 0 or all NaN: no element ever won; -1 like the CPU.
  if (threadIdx.x == 0) index[0] = idx == INT64_MAX ? -1 : static_cast<int64_t>(idx);
}

// ---- backward ----------------------------------------------------------------------------

__device__ __forceinline__ float sign_of(float v) {
  return v > 0.f ? 1.f : (v < 0.f ? -1.f : 0.f);
}

template <ReduceOp Op>
__global__ void reduce_backward_kernel(const float* __restrict__ x, int64_t n,
                                       const float* __restrict__ dy,
                                       const int64_t* __restrict__ argmax, float* __restrict__ dx) {
  const float g = dy[0];
  int64_t k = -1;
  if constexpr (Op == ReduceOp::max_abs) k = argmax[0];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (Op == ReduceOp::sum) dx[i] = g;
    if constexpr (Op == ReduceOp::mean) dx[i] = g / static_cast<float>(n);
    if constexpr (Op == ReduceOp::sum_squares) dx[i] = 2.f * x[i] * g;
    if constexpr (Op == ReduceOp::l1) dx[i] = sign_of(x[i]) * g;
    if constexpr (Op == ReduceOp::max_abs) dx[i] = i == k ? sign_of(x[i]) * g : 0.f;
  }
}

template <ReduceOp Op>
void launch_reduce(const float* x, int64_t n, float* out, float* workspace) {
  const int64_t blocks = reduce_blocks(n);
  double* partial = reinterpret_cast<double*>(workspace);
  cudaStream_t st = cuda::current_stream();
  reduce_partials_kernel<Op><<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(x, n, partial);
  TG_CUDA_LAUNCH_CHECK();
  reduce_final_kernel<Op><<<1, kThreads, 0, st>>>(partial, blocks, n, out);
  TG_CUDA_LAUNCH_CHECK();
}

template <ReduceOp Op>
void launch_backward(const float* x, int64_t n, const float* dy, const int64_t* argmax, float* dx) {
  if (n == 0) return;
  reduce_backward_kernel<Op>
      <<<cuda::grid_for(n), kThreads, 0, cuda::current_stream()>>>(x, n, dy, argmax, dx);
  TG_CUDA_LAUNCH_CHECK();
}

void check_workspace(const float* workspace, const char* what) {
  TG_CHECK(workspace != nullptr, what,
           ": workspace is null (need reduce_cuda_workspace_floats(n))");
  TG_CHECK(reinterpret_cast<uintptr_t>(workspace) % alignof(double) == 0, what,
           ": workspace must be 8-byte aligned (it holds double partials)");
}

}  // namespace

int64_t reduce_cuda_workspace_floats(int64_t n) {
  return 4 * reduce_blocks(n);
}

void reduce_cuda(ReduceOp op, const float* x, int64_t n, float* out, float* workspace) {
  TG_CHECK(n >= 0, "reduce_cuda: negative size ", n);
  check_workspace(workspace, "reduce_cuda");
  switch (op) {
    case ReduceOp::sum:
      return launch_reduce<ReduceOp::sum>(x, n, out, workspace);
    case ReduceOp::mean:
      TG_CHECK(n > 0, "mean of an empty tensor (n = 0) is undefined");
      return launch_reduce<ReduceOp::mean>(x, n, out, workspace);
    case ReduceOp::max_abs:
      return launch_reduce<ReduceOp::max_abs>(x, n, out, workspace);
    case ReduceOp::sum_squares:
      return launch_reduce<ReduceOp::sum_squares>(x, n, out, workspace);
    case ReduceOp::l1:
      return launch_reduce<ReduceOp::l1>(x, n, out, workspace);
  }
}

void argmax_abs_cuda(const float* x, int64_t n, int64_t* index, float* workspace) {
  TG_CHECK(n >= 0, "argmax_abs_cuda: negative size ", n);
  cudaStream_t st = cuda::current_stream();
  check_workspace(workspace, "argmax_abs_cuda");
  const int64_t blocks = reduce_blocks(n);
  double* pv = reinterpret_cast<double*>(workspace);
  long long* pi = reinterpret_cast<long long*>(workspace + 2 * blocks);
  argmax_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(x, n, pv, pi);
  TG_CUDA_LAUNCH_CHECK();
  argmax_final_kernel<<<1, kThreads, 0, st>>>(pv, pi, blocks, index);
  TG_CUDA_LAUNCH_CHECK();
}

void reduce_backward_cuda(ReduceOp op, const float* x, int64_t n, const float* dy,
                          const int64_t* argmax, float* dx) {
  switch (op) {
    case ReduceOp::sum:
      return launch_backward<ReduceOp::sum>(x, n, dy, argmax, dx);
    case ReduceOp::mean:
      return launch_backward<ReduceOp::mean>(x, n, dy, argmax, dx);
    case ReduceOp::max_abs:
      return launch_backward<ReduceOp::max_abs>(x, n, dy, argmax, dx);
    case ReduceOp::sum_squares:
      return launch_backward<ReduceOp::sum_squares>(x, n, dy, argmax, dx);
    case ReduceOp::l1:
      return launch_backward<ReduceOp::l1>(x, n, dy, argmax, dx);
  }
}

}  // namespace tg
