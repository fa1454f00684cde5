// CUDA kernels of grid_kernels.h, mirroring grid_cpu.cpp byte for byte: one thread per packed
// byte (4 or 3 elements), the levels by the same host/device rule (grid_level). All work runs on
// cuda::current_stream().
#include <cstdint>

#include "nn/core/cuda_check.cuh"
#include "terngrad/grid_kernels.h"

namespace tg::tern {

namespace {

constexpr int kThreads = 256;

template <int L>
__global__ void grid_pack_kernel(const float* __restrict__ g, int64_t n, float s, float k,
                                 bool zero, uint64_t seed, uint64_t stream, int64_t bytes,
                                 uint8_t* __restrict__ out) {
  constexpr int kPer = L == 4 ? 4 : 3;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < bytes;
       b += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i0 = b * kPer;
    uint32_t v = 0, mul = 1;
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const int64_t i = i0 + t;
      int lv = (L - 1) / 2;
      if (i < n && !zero)
        lv = grid_level(g[i], s, k, L, philox_word(seed, stream, static_cast<uint64_t>(i)));
      if (L == 4) {
        if (i < n) v |= static_cast<uint32_t>(lv) << (2 * t);
      } else {
        v += mul * static_cast<uint32_t>(lv);
        mul *= 5;
      }
    }
    out[b] = static_cast<uint8_t>(v);
  }
}

template <int L>
__global__ void grid_unpack_kernel(const uint8_t* __restrict__ packed, int64_t n, int64_t bytes,
                                   int32_t* __restrict__ acc) {
  constexpr int kPer = L == 4 ? 4 : 3;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < bytes;
       b += (int64_t)gridDim.x * blockDim.x) {
    uint32_t v = packed[b];
    if (L == 5 && v > 124) continue;  // never written: adds 0, like the CPU
    const int64_t i0 = b * kPer;
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      int32_t code;
      if (L == 4) {
        code = 2 * static_cast<int32_t>((v >> (2 * t)) & 3) - 3;
      } else {
        code = 2 * static_cast<int32_t>(v % 5) - 4;
        v /= 5;
      }
      if (i0 + t < n) acc[i0 + t] += code;
    }
  }
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

void grid_quantize_pack_cuda(const float* g, int64_t n, float s, int levels, uint64_t seed,
                             uint64_t stream, uint8_t* out) {
  const auto bytes = static_cast<int64_t>(grid_packed_bytes(levels, n));
  if (n == 0) return;
  TG_CHECK(g != nullptr && out != nullptr, "grid_quantize_pack_cuda: null pointer for n = ", n);
  const bool zero = !(s > 0);
  const float k = zero ? 0.0f : grid_scale(levels, s);
  cudaStream_t st = cuda::current_stream();
  if (levels == 4)
    grid_pack_kernel<4>
        <<<grid_for(bytes), kThreads, 0, st>>>(g, n, s, k, zero, seed, stream, bytes, out);
  else
    grid_pack_kernel<5>
        <<<grid_for(bytes), kThreads, 0, st>>>(g, n, s, k, zero, seed, stream, bytes, out);
  TG_CUDA_LAUNCH_CHECK();
}

void grid_unpack_accumulate_cuda(const uint8_t* packed, int64_t n, int levels, int32_t* acc) {
  const auto bytes = static_cast<int64_t>(grid_packed_bytes(levels, n));
  if (n == 0) return;
  TG_CHECK(packed != nullptr && acc != nullptr,
           "grid_unpack_accumulate_cuda: null pointer for n = ", n);
  cudaStream_t st = cuda::current_stream();
  if (levels == 4)
    grid_unpack_kernel<4><<<grid_for(bytes), kThreads, 0, st>>>(packed, n, bytes, acc);
  else
    grid_unpack_kernel<5><<<grid_for(bytes), kThreads, 0, st>>>(packed, n, bytes, acc);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg::tern
