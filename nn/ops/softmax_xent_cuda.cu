// Row softmax and softmax cross-entropy on CUDA; mirrors softmax_xent_cpu.cpp.
//
// One block per row (grid-stride over rows when N exceeds the grid), threads_for(K) threads
// (a multiple of 32, up to kMaxThreads). Thread t of the block owns columns j = t, t + T, ...
// of its row: it reads them for the row max (f32) and the double sum of exp(x - m), the block
// combines both in a fixed warp-shuffle tree, then each thread writes its own columns of the
// output (probs, dlogits). Thread 0 writes the row's loss.
// xent_mean_kernel: a single block sums row_loss[0..N) in double in a fixed tree order (no
// atomics: the loss is the same bits every run) and finds the first row with a bad label (a min
// over rows, also in the tree), which the frontend copies back to throw a precise error.
//
// Napkin math: a [128, 10] CIFAR batch is 5 KiB, launch-bound; a [1, 1 M] row is one block
// reading 4 MB, ~40 us at one SM's bandwidth, which no model in this project comes near.
#include <cstdint>

#include "nn/core/cuda_block_reduce.cuh"
#include "nn/core/cuda_check.cuh"
#include "nn/ops/softmax_xent_kernels.h"

namespace tg {

namespace {

constexpr int kMaxThreads = 256;
constexpr int kMeanThreads = 256;

int threads_for(int64_t k) {
  int64_t t = (k + 31) / 32 * 32;
  if (t < 32) t = 32;
  if (t > kMaxThreads) t = kMaxThreads;
  return static_cast<int>(t);
}

struct SumF {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MinF {
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};

using cuda::block_reduce;

struct RowStats {
  float m;     // max_j x_j
  double sum;  // sum_j exp(x_j - m)
};

// Called by every thread of the block (contains __syncthreads).
__device__ RowStats row_stats(const float* __restrict__ x, int64_t k, float* smf, double* smd) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_reduce(m, -INFINITY, MaxF(), smf);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) s += double(expf(x[j] - m));
  s = block_reduce(s, 0.0, SumF(), smd);
  return {m, s};
}

__device__ __forceinline__ bool label_ok(int32_t label, int64_t k) {
  return label >= 0 && label < k;
}

__global__ void xent_rows_kernel(SoftmaxShape s, const float* __restrict__ logits,
                                 const int32_t* __restrict__ labels, float* __restrict__ row_loss) {
  __shared__ float smf[32];
  __shared__ double smd[32];
  for (int64_t i = blockIdx.x; i < s.n; i += gridDim.x) {  // uniform per block: syncs are safe
    const float* x = logits + i * s.k;
    const RowStats st = row_stats(x, s.k, smf, smd);
    if (threadIdx.x == 0) {
      const int32_t label = labels[i];
      row_loss[i] =
          label_ok(label, s.k) ? static_cast<float>(log(st.sum) - double(x[label] - st.m)) : NAN;
    }
  }
}

__global__ void xent_mean_kernel(SoftmaxShape s, const float* __restrict__ row_loss,
                                 const int32_t* __restrict__ labels, float* __restrict__ loss,
                                 int64_t* __restrict__ bad_row) {
  __shared__ double smd[32];
  __shared__ long long sml[32];
  double acc = 0.0;
  long long bad = s.n;
  for (int64_t i = threadIdx.x; i < s.n; i += blockDim.x) {
    acc += double(row_loss[i]);
    if (bad == s.n && !label_ok(labels[i], s.k)) bad = i;  // rows visited in increasing order
  }
  acc = block_reduce(acc, 0.0, SumF(), smd);
  bad = block_reduce(bad, static_cast<long long>(s.n), MinF(), sml);
  if (threadIdx.x == 0) {
    loss[0] = static_cast<float>(acc / double(s.n));
    bad_row[0] = bad;
  }
}

__global__ void xent_backward_kernel(SoftmaxShape s, const float* __restrict__ logits,
                                     const int32_t* __restrict__ labels,
                                     const float* __restrict__ dloss, float* __restrict__ dlogits) {
  __shared__ float smf[32];
  __shared__ double smd[32];
  const float scale = dloss[0] / static_cast<float>(s.n);
  for (int64_t i = blockIdx.x; i < s.n; i += gridDim.x) {
    const float* x = logits + i * s.k;
    float* dx = dlogits + i * s.k;
    const RowStats st = row_stats(x, s.k, smf, smd);
    const float inv = static_cast<float>(1.0 / st.sum);
    const int64_t label = labels[i];  // validated by the forward
    for (int64_t j = threadIdx.x; j < s.k; j += blockDim.x) {
      const float p = expf(x[j] - st.m) * inv;
      dx[j] = (p - (j == label ? 1.f : 0.f)) * scale;
    }
  }
}

__global__ void softmax_kernel(SoftmaxShape s, const float* __restrict__ logits,
                               float* __restrict__ probs) {
  __shared__ float smf[32];
  __shared__ double smd[32];
  for (int64_t i = blockIdx.x; i < s.n; i += gridDim.x) {
    const float* x = logits + i * s.k;
    float* p = probs + i * s.k;
    const RowStats st = row_stats(x, s.k, smf, smd);
    const float inv = static_cast<float>(1.0 / st.sum);
    for (int64_t j = threadIdx.x; j < s.k; j += blockDim.x) p[j] = expf(x[j] - st.m) * inv;
  }
}

__global__ void softmax_backward_kernel(SoftmaxShape s, const float* __restrict__ probs,
                                        const float* __restrict__ dy, float* __restrict__ dx) {
  __shared__ double smd[32];
  for (int64_t i = blockIdx.x; i < s.n; i += gridDim.x) {
    const float* p = probs + i * s.k;
    const float* g = dy + i * s.k;
    float* d = dx + i * s.k;
    double dot = 0.0;
    for (int64_t j = threadIdx.x; j < s.k; j += blockDim.x) dot += double(g[j]) * double(p[j]);
    dot = block_reduce(dot, 0.0, SumF(), smd);
    const float dotf = static_cast<float>(dot);
    for (int64_t j = threadIdx.x; j < s.k; j += blockDim.x) d[j] = p[j] * (g[j] - dotf);
  }
}

// One block per row, capped like any grid (the kernels grid-stride over rows).
unsigned row_grid(int64_t n) {
  return cuda::grid_for(n, 1);
}

}  // namespace

void softmax_xent_forward_cuda(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                               float* row_loss, float* loss, int64_t* bad_row) {
  TG_CHECK(s.n > 0 && s.k > 0, "softmax_xent_forward_cuda: empty shape [", s.n, ", ", s.k, "]");
  cudaStream_t st = cuda::current_stream();
  xent_rows_kernel<<<row_grid(s.n), threads_for(s.k), 0, st>>>(s, logits, labels, row_loss);
  TG_CUDA_LAUNCH_CHECK();
  xent_mean_kernel<<<1, kMeanThreads, 0, st>>>(s, row_loss, labels, loss, bad_row);
  TG_CUDA_LAUNCH_CHECK();
}

void softmax_xent_backward_cuda(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                                const float* dloss, float* dlogits) {
  if (s.n == 0 || s.k == 0) return;
  xent_backward_kernel<<<row_grid(s.n), threads_for(s.k), 0, cuda::current_stream()>>>(
      s, logits, labels, dloss, dlogits);
  TG_CUDA_LAUNCH_CHECK();
}

void softmax_forward_cuda(const SoftmaxShape& s, const float* logits, float* probs) {
  if (s.n == 0 || s.k == 0) return;
  softmax_kernel<<<row_grid(s.n), threads_for(s.k), 0, cuda::current_stream()>>>(s, logits, probs);
  TG_CUDA_LAUNCH_CHECK();
}

void softmax_backward_cuda(const SoftmaxShape& s, const float* probs, const float* dy, float* dx) {
  if (s.n == 0 || s.k == 0) return;
  softmax_backward_kernel<<<row_grid(s.n), threads_for(s.k), 0, cuda::current_stream()>>>(s, probs,
                                                                                          dy, dx);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
