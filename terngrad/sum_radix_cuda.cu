// Radix-packed integer sums on CUDA (layout: terngrad/sum_radix.h); mirrors sum_radix_cpu.cpp
// bit for bit (pure integer code, exact divisions). Work runs on cuda::current_stream().
//   pack: one thread per 64-bit word, Horner's rule over its f <= 64 consecutive int32 from the
//     top digit down (a warp reads 32 neighbouring runs of f * 4 bytes: every fetched sector is
//     used, L1 serves the rest);
//   unpack_accumulate: one thread per 64-bit word, f - 1 invariant divisions by L
//     (RadixDivider: __umul64hi and shifts), adding its f digits to f consecutive accumulators.
//     A thread per element would repeat the division chain up to its digit; per word, the warp's
//     accumulator accesses stride f * 4 bytes, which the cache absorbs as in pack.
// Napkin math (H100, ~3 TB/s): pack reads 4 B and writes log2(L) / 8 B per element, unpack reads
// log2(L) / 8 B and read-writes 8 B: ~75 microseconds for 25 M elements (AlexNet). A digit's
// multiply-high and multiply are a handful of 32-bit IMADs, ~2.5e8 for those 25 M: well below
// the memory time, itself far below the transfer time of the words on any network.
#include <cstdint>

#include "nn/core/cuda_check.cuh"
#include "terngrad/sum_radix.h"

namespace tg::tern {

namespace {

constexpr int kThreads = 256;

__global__ void pack_sums_kernel(const int32_t* __restrict__ v, int64_t n, int32_t offset,
                                 uint64_t levels, int64_t f, int64_t m,
                                 uint64_t* __restrict__ words) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < m;
       j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t begin = j * f;
    const int64_t count = begin + f < n ? f : n - begin;
    uint64_t w = 0;
    for (int64_t d = count - 1; d >= 0; --d) {
      w = w * levels + static_cast<uint64_t>(static_cast<int64_t>(v[begin + d]) + offset);
    }
    words[j] = w;
  }
}

// acc += digit - offset modulo 2^32, as sum_radix_cpu.cpp's Accumulate.
struct AccumulateSink {
  int32_t* __restrict__ acc;
  uint32_t offset;
  __device__ __forceinline__ void operator()(int64_t i, uint64_t digit) const {
    acc[i] =
        static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(digit) - offset);
  }
};

// out = float(digit - offset) * scale, as sum_radix_cpu.cpp's Scaled: the bits of
// AccumulateSink into a zero, then scale_accumulated.
struct ScaledSink {
  float* __restrict__ out;
  uint32_t offset;
  float scale;
  __device__ __forceinline__ void operator()(int64_t i, uint64_t digit) const {
    out[i] = __fmul_rn(
        static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(digit) - offset)), scale);
  }
};

// One thread per word: its digits, element by element, to sink(element, digit).
template <class Sink>
__global__ void unpack_sums_kernel(const uint64_t* __restrict__ words, int64_t n, RadixDivider div,
                                   int64_t f, int64_t m, Sink sink) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < m;
       j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t begin = j * f;
    const int64_t count = begin + f < n ? f : n - begin;
    uint64_t w = words[j];
    if (count > 1) {
      const uint64_t q = div.div(w);  // w may be anything; every later dividend is < 2^64 / L
      sink(begin, w - q * div.d);
      w = q;
      for (int64_t d = 1; d < count - 1; ++d) {
        const uint64_t qd = div.div_small(w);
        sink(begin + d, w - qd * div.d);
        w = qd;
      }
    }
    sink(begin + count - 1, w);
  }
}

}  // namespace

void pack_sums_cuda(const int32_t* v, int64_t n, int32_t offset, uint64_t levels, uint64_t* words) {
  detail::check_sum_radix_args("pack_sums_cuda", v, words, n, levels, offset);
  const int64_t f = digits_per_word(levels);
  const int64_t m = sum_words(n, levels);
  if (m == 0) return;
  pack_sums_kernel<<<cuda::grid_for(m, kThreads), kThreads, 0, cuda::current_stream()>>>(
      v, n, offset, levels, f, m, words);
  TG_CUDA_LAUNCH_CHECK();
}

void unpack_sums_accumulate_cuda(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                                 int32_t* acc) {
  detail::check_sum_radix_args("unpack_sums_accumulate_cuda", words, acc, n, levels, offset);
  const int64_t f = digits_per_word(levels);
  const int64_t m = sum_words(n, levels);
  if (m == 0) return;
  unpack_sums_kernel<<<cuda::grid_for(m, kThreads), kThreads, 0, cuda::current_stream()>>>(
      words, n, RadixDivider::make(levels), f, m,
      AccumulateSink{acc, static_cast<uint32_t>(offset)});
  TG_CUDA_LAUNCH_CHECK();
}

void unpack_sums_scaled_cuda(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                             float scale, float* out) {
  detail::check_sum_radix_args("unpack_sums_scaled_cuda", words, out, n, levels, offset);
  const int64_t f = digits_per_word(levels);
  const int64_t m = sum_words(n, levels);
  if (m == 0) return;
  unpack_sums_kernel<<<cuda::grid_for(m, kThreads), kThreads, 0, cuda::current_stream()>>>(
      words, n, RadixDivider::make(levels), f, m,
      ScaledSink{out, static_cast<uint32_t>(offset), scale});
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg::tern
