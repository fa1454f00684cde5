// Block-wide reduction for .cu files: combines one value per thread over the whole block in a
// fixed order (warp shuffles, then warp 0 over the per-warp partials), so results are
// deterministic run to run. Every thread receives the result.
#pragma once

namespace tg::cuda {

// `smem` holds 32 values of T. blockDim.x must be a multiple of 32 (at most 1024).
template <typename T, typename Combine>
__device__ T block_reduce(T v, T identity, Combine c, T* smem) {
  for (int o = 16; o > 0; o >>= 1) v = c(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? smem[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = c(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  const T r = smem[0];
  __syncthreads();  // smem may be reused right after
  return r;
}

}  // namespace tg::cuda
