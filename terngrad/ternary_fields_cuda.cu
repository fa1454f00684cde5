// Packed integer sum fields on CUDA (layout: terngrad/ternary_fields.h); mirrors
// ternary_fields_cpu.cpp bit for bit (pure integer code). Work runs on cuda::current_stream().
//   pack: one thread per 64-bit word, reading its f <= 64 consecutive int32 (a warp reads 32
//     neighbouring runs of f * 4 bytes: every fetched sector is used, L1 serves the rest);
//   unpack_accumulate: one thread per element (coalesced acc read-modify-write); neighbouring
//     threads share a word, which the cache serves.
// Napkin math (H100, ~3 TB/s): pack reads 4 B and writes k / 8 B per element, unpack reads k / 8
// and read-writes 8 B: both are a few hundred microseconds for 25 M elements (AlexNet), far below
// the transfer time of the words on any network.
#include <cstdint>

#include "nn/core/cuda_check.cuh"
#include "terngrad/ternary_fields.h"

namespace tg::tern {

namespace {

constexpr int kThreads = 256;

__global__ void pack_sum_fields_kernel(const int32_t* __restrict__ v, int64_t n, int32_t offset,
                                       int k, int64_t f, int64_t m, uint64_t* __restrict__ words) {
  const uint64_t mask = (uint64_t{1} << k) - 1;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < m;
       j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t begin = j * f;
    const int64_t end = begin + f < n ? begin + f : n;
    uint64_t w = 0;
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t field = static_cast<uint64_t>(static_cast<int64_t>(v[i]) + offset) & mask;
      w |= field << ((i - begin) * k);
    }
    words[j] = w;
  }
}

__global__ void unpack_sum_fields_accumulate_kernel(const uint64_t* __restrict__ words, int64_t n,
                                                    int k, int64_t f, int32_t offset,
                                                    int32_t* __restrict__ acc) {
  const uint64_t mask = (uint64_t{1} << k) - 1;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i / f;
    const int64_t field = static_cast<int64_t>((words[j] >> ((i - j * f) * k)) & mask);
    acc[i] += static_cast<int32_t>(field - offset);  // field up to 2^32 - 1: no int32 overflow
  }
}

}  // namespace

void pack_sum_fields_cuda(const int32_t* v, int64_t n, int32_t offset, int k, uint64_t* words) {
  const int64_t f = fields_per_word(k);
  const int64_t m = sum_field_words(n, k);
  if (m == 0) return;
  pack_sum_fields_kernel<<<cuda::grid_for(m, kThreads), kThreads, 0, cuda::current_stream()>>>(
      v, n, offset, k, f, m, words);
  TG_CUDA_LAUNCH_CHECK();
}

void unpack_sum_fields_accumulate_cuda(const uint64_t* words, int64_t n, int k, int32_t offset,
                                       int32_t* acc) {
  const int64_t f = fields_per_word(k);
  sum_field_words(n, k);  // validates n
  if (n == 0) return;
  unpack_sum_fields_accumulate_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0,
                                        cuda::current_stream()>>>(words, n, k, f, offset, acc);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg::tern
