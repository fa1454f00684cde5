// Kernels of the baseline gradient compressors the paper compares against or that users expect
// beside TernGrad, CPU and CUDA with mirror-image signatures (device pointers for _cuda). Each
// has a pack (worker side, writes the wire bytes) and an unpack-accumulate (receiver side:
// acc += scale * decoded, scale = 1/N for averaging N workers; computed as one fused
// multiply-add, fma(scale, decoded, acc), on both devices).
//
//   fp16:   IEEE half, round to nearest even (overflow -> +-inf, float denormals -> half
//           denormals or +-0); 2 bytes per element, little-endian. Every NaN is written as
//           sign | 0x7E00 (one canonical quiet NaN, so CPU and CUDA bytes agree).
//   qsgd:   QSGD (Alistarh et al., NIPS 2017) with `levels` = s quantization levels and buckets of
//           `bucket` consecutive elements: per bucket the L2 norm ||v|| (one float on the wire),
//           per element sign and level l_i in {0..s}: l_i = floor(|v_i| / ||v|| * s) + b_i with
//           b_i ~ Bernoulli(frac part), u_i = uniform01(philox_word(seed, stream, i)) -> unbiased:
//           E[decoded] = v. Decoded value = ||v|| * sign_i * l_i / s. Wire: per bucket 4 bytes
//           (norm) then the bucket's codes at fixed width ceil(log2(s + 1)) + 1 bits (sign bit +
//           level), packed LSB-first, each bucket's codes padded to whole bytes. (The paper's
//           Elias coding of the levels is not used: fixed width keeps decode branch-free.)
//           Exact layout: code_i = (l_i << 1) | sign_i (sign_i = 1 for negative v_i, 0 when
//           l_i = 0); code j of a bucket occupies bits j*w .. j*w+w-1 of the bucket's code bytes,
//           bit k being bit k % 8 of byte k / 8; padding bits are 0. i is the element's index in
//           the whole tensor. ||v|| is the float nearest to sqrt of the double sum of squares
//           taken in the canonical order below (identical on both devices); |v_i| / ||v|| * s
//           is evaluated in double from that float norm, and the decoded value is the float
//           nearest to the double ||v|| * l_i / s. A bucket with norm 0 has all codes 0 (and
//           decodes to 0); a non-finite norm also gives codes 0, so such a bucket decodes to
//           NaN (loud). 1 <= s <= kQsgdMaxLevels.
//   onebit: 1-bit SGD with error feedback (Seide et al., Interspeech 2014), per tensor:
//           v = g + residual; bit_i = (v_i >= 0); the two reconstruction values are the means of
//           the non-negative and of the negative v_i (0 if a side is empty); residual_i = v_i -
//           reconstruction(bit_i) (updated in place). Wire: 2 floats (pos, neg) then ceil(n / 8)
//           bytes of bits, element i at bit i % 8 of byte i / 8. The means are double sums in the
//           canonical order below, divided in double, then rounded to float. A NaN v_i counts
//           on the negative side (so the negative mean becomes NaN: loud, not silent).
//
// Determinism: the bytes depend only on the inputs (and seed/stream), never on the device, the
// thread count or the run: CPU and CUDA produce bit-identical packed bytes and accumulators.
// Pointers need no alignment (packed buffers are often concatenated at odd offsets).
// Throws tg::Error on n < 0, levels outside [1, kQsgdMaxLevels] or bucket < 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nn/core/error.h"

namespace tg::tern {

constexpr int kQsgdMaxLevels = 65535;  // code width <= 17 bits

// Bits per QSGD code: ceil(log2(levels + 1)) + 1 (level bits + sign bit).
constexpr int qsgd_code_bits(int levels) {
  int b = 0;
  for (unsigned s = static_cast<unsigned>(levels); s != 0; s >>= 1) ++b;
  return b + 1;
}

size_t fp16_packed_bytes(int64_t n);
size_t qsgd_packed_bytes(int64_t n, int levels, int64_t bucket);
size_t onebit_packed_bytes(int64_t n);

void fp16_pack_cpu(const float* g, int64_t n, uint8_t* out);
void fp16_unpack_accumulate_cpu(const uint8_t* in, int64_t n, float scale, float* acc);
void qsgd_pack_cpu(const float* g, int64_t n, int levels, int64_t bucket, uint64_t seed,
                   uint64_t stream, uint8_t* out);
void qsgd_unpack_accumulate_cpu(const uint8_t* in, int64_t n, int levels, int64_t bucket,
                                float scale, float* acc);
void onebit_pack_cpu(const float* g, float* residual, int64_t n, uint8_t* out);
void onebit_unpack_accumulate_cpu(const uint8_t* in, int64_t n, float scale, float* acc);

void fp16_pack_cuda(const float* g, int64_t n, uint8_t* out);
void fp16_unpack_accumulate_cuda(const uint8_t* in, int64_t n, float scale, float* acc);
void qsgd_pack_cuda(const float* g, int64_t n, int levels, int64_t bucket, uint64_t seed,
                    uint64_t stream, uint8_t* out);
void qsgd_unpack_accumulate_cuda(const uint8_t* in, int64_t n, int levels, int64_t bucket,
                                 float scale, float* acc);
void onebit_pack_cuda(const float* g, float* residual, int64_t n, uint8_t* out);
void onebit_unpack_accumulate_cuda(const uint8_t* in, int64_t n, float scale, float* acc);

// The canonical summation order shared by the CPU and CUDA kernels (what makes them
// bit-identical). A "block sum" of m values over T lanes (T a multiple of 32, <= 256): lane t
// adds values t, t + T, t + 2T, ... in double, in that order; then each warp of 32 lanes folds
// pairwise (for o = 16, 8, 4, 2, 1: lane[l] += lane[l + o]), and lane 0 of warp 0 folds the
// per-warp results the same way (missing lanes are 0) -- exactly tg::cuda::block_reduce.
//   qsgd norm:     one block sum per bucket with T = qsgd_reduce_threads(bucket).
//   onebit means:  a block sum (T = kReduceThreads) per chunk of kOnebitChunk elements, then one
//                  block sum (T = kReduceThreads) over the chunk results.
namespace detail {
constexpr int kReduceThreads = 256;
constexpr int64_t kOnebitChunk = 4096;
constexpr int qsgd_reduce_threads(int64_t bucket) {
  const int64_t t = (bucket + 31) / 32 * 32;
  return t < 32 ? 32 : (t > kReduceThreads ? kReduceThreads : static_cast<int>(t));
}

// Argument checks shared by the CPU and CUDA kernels (same messages on both).
inline void check_n(int64_t n, const char* op) {
  TG_CHECK(n >= 0, op, ": n must be >= 0, got ", n);
}
inline void check_qsgd(int64_t n, int levels, int64_t bucket, const char* op) {
  check_n(n, op);
  TG_CHECK(levels >= 1 && levels <= kQsgdMaxLevels, op, ": levels must be in [1, ", kQsgdMaxLevels,
           "], got ", levels);
  TG_CHECK(bucket >= 1, op, ": bucket must be >= 1, got ", bucket);
}
}  // namespace detail

}  // namespace tg::tern
