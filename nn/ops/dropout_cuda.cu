// Dropout on CUDA; mirrors dropout_cpu.cpp.
// n contiguous f32 elements. One thread per Philox block (grid-stride): the thread owning block b
// computes philox_block(seed, stream, b) once and writes elements 4b..min(4b+3, n-1), word i%4
// deciding element i. Same philox.h functions and the same float comparison and product as the
// CPU, so the mask and the values are bit-identical.
#include "nn/core/cuda_check.cuh"
#include "nn/core/philox.h"
#include "nn/ops/dropout_kernels.h"

namespace tg {

namespace {

constexpr int kThreads = 256;

__global__ void dropout_kernel(DropoutParams d, int64_t n, const float* __restrict__ x,
                               float* __restrict__ y) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < blocks;
       b += (int64_t)gridDim.x * blockDim.x) {
    const Philox4 r = philox_block(d.seed, d.stream, static_cast<uint64_t>(b));
    const int64_t base = 4 * b;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = base + k;
      if (i < n) y[i] = uniform01(r.v[k]) >= d.drop_ratio ? __fmul_rn(x[i], d.scale) : 0.0f;
    }
  }
}

}  // namespace

void dropout_cuda(const DropoutParams& d, int64_t n, const float* x, float* y) {
  if (n == 0) return;
  const int64_t blocks = (n + 3) / 4;
  dropout_kernel<<<cuda::grid_for(blocks, kThreads), kThreads, 0, cuda::current_stream()>>>(d, n, x,
                                                                                            y);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg
