// Radix-packed integer sums: the wire format of the exact ternary routes' sums
// (terngrad/exchange/plan.h), narrower than whole-bit fields. CPU and CUDA kernels with
// mirror-image signatures, raw pointers (device pointers for _cuda); n = number of elements.
//
// Layout: an integer vector v[0 .. n) whose digits v[i] + offset lie in [0, L) (L = `levels`
// levels, e.g. L = 2N + 1 for a sum of N ternary codes shifted by +N) is stored as base-L digits
// of little-endian 64-bit words, f = the largest f with L^f <= 2^64 digits per word:
//   element i is digit i % f of word j = i / f:  word_j = sum_{d < f} (v[j f + d] + offset) L^d,
//   the unused digits of the last word are 0, words = ceil(n / f) (8 * words bytes on the wire).
// E.g. L = 33 (N = 16): 12 digits per word = 5.33 bits per element (k-bit fields: 6 bits, 10 per
// word); L = 3: 40 digits per word = 1.6 bits per element.
// Carry-free addition: every word is at most sum_d (L - 1) L^d = L^f - 1 < 2^64, and a number
// below L^f has exactly one f-digit base-L form. So a plain u64 addition of words from P ranks
// (an allreduce sum of u64) adds all digits at once with no carry from one digit into the next,
// as long as every digit's true sum stays below L: the sum of the words is then the word of the
// summed digits, and never exceeds L^f - 1. This is why a rank packs its partial sums with L =
// sum_levels(total workers), not with its own worker count.
//
//   pack_sums:                  words = the layout above of (v[i] + offset); every word written.
//   unpack_sums_accumulate:     acc[i] += digit_i - offset (int32, wrapping).
//   unpack_sums_scaled:         out[i] = float(digit_i - offset) * scale: the same bits as
//                               unpack_sums_accumulate into a zeroed acc, then
//                               scale_accumulated (terngrad/ternary_kernels.h), in one pass with
//                               no accumulator (the exchange's last decode, where each sum arrives
//                               once).
// Both are pure integer code with exact divisions: CPU and CUDA are bit-identical by
// construction. Decoding divides each word by L f - 1 times; RadixDivider turns each division
// into a multiply-high (and, for the first, a few shifts and adds).
#pragma once

#include <cstdint>

#include "nn/core/error.h"
#include "nn/core/philox.h"  // TG_HOST_DEVICE

namespace tg::tern {

// L = 2N + 1: the levels of a sum of N ternary codes shifted by +N to [0, 2N]. Throws unless
// 1 <= N <= 2^30.
uint64_t sum_levels(int64_t workers_total);
// f = the largest f with levels^f <= 2^64 (f >= 2). Throws unless 2 <= levels <= 2^32.
int digits_per_word(uint64_t levels);
// ceil(n / f) words for n elements. Throws on n < 0 or levels out of range.
int64_t sum_words(int64_t n, uint64_t levels);

// Exact unsigned 64-bit division by a runtime-invariant divisor d (2 <= d <= 2^32), on host and
// device, by multiply-high and shifts.
//   div(x), any x: the round-up method of Granlund & Montgomery ("Division by invariant integers
//     using multiplication", PLDI 1994), its 65-bit multiplier 2^64 + magic applied as
//     ((x - t) >> 1) + t so that nothing overflows (libdivide's "branchfree" u64 algorithm):
//     q = (((x - t) >> 1) + t) >> shift, t = mulhi(x, magic), magic = floor(2^(65 + l) / d) + 1
//     - 2^64, shift = l = floor(log2 d); for a power of two magic = 0 and shift = l - 1.
//   div_small(x), x < 2^64 / d only (e.g. any quotient of a previous division by d): q =
//     mulhi(x, small_magic), small_magic = ceil(2^64 / d) = (2^64 + e) / d with 0 <= e < d, so
//     x * small_magic / 2^64 = x / d + x e / (d 2^64), and the added term is below 1 / d, too
//     little to reach the next multiple of 1 / d. One multiply instead of five operations: the
//     decode's digits after the first take this path.
// Hand-written because the decode's hardware division (tens of cycles for 64 bits on the CPU,
// a long emulated sequence on the GPU) would dominate it, compilers only strength-reduce
// division by compile-time constants, and no library the project uses offers an invariant
// divider that runs in device code.
struct RadixDivider {
  uint64_t d = 2;            // the divisor
  uint64_t magic = 0;        // div: low 64 bits of the 65-bit multiplier; 0 for powers of two
  uint64_t small_magic = 0;  // div_small: ceil(2^64 / d)
  uint32_t shift = 0;

  // Host only (128-bit arithmetic); throws unless 2 <= d <= 2^32.
  static RadixDivider make(uint64_t d);

  TG_HOST_DEVICE static uint64_t mulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
  }
  TG_HOST_DEVICE uint64_t div(uint64_t x) const {
    const uint64_t t = mulhi(x, magic);
    return (((x - t) >> 1) + t) >> shift;
  }
  TG_HOST_DEVICE uint64_t div_small(uint64_t x) const {
    return mulhi(x, small_magic);
  }
};

// Precondition of both pairs of kernels: every digit v[i] + offset lies in [0, levels). It is not
// checked per element; an out-of-range digit gives garbage words (other elements' digits change),
// never undefined behaviour or a write outside words[0 .. ceil(n / f)). Decoding accepts any word
// value: a word's element digits are the remainders of c - 1 successive divisions by L and the
// quotient left (c = the word's element count, f or the last word's n - (words - 1) f), so a
// garbage word decodes to garbage digits (the last one may exceed L - 1; all arithmetic is
// unsigned, acc wraps modulo 2^32), never to undefined behaviour.
// Both throw (before touching memory) on n < 0, a null pointer with n > 0, levels outside
// 2 .. 2^32, or offset outside 0 .. levels - 1 (the value 0, an all-zero sum, needs a digit).
void pack_sums_cpu(const int32_t* v, int64_t n, int32_t offset, uint64_t levels, uint64_t* words);
void unpack_sums_accumulate_cpu(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                                int32_t* acc);
void unpack_sums_scaled_cpu(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                            float scale, float* out);

void pack_sums_cuda(const int32_t* v, int64_t n, int32_t offset, uint64_t levels, uint64_t* words);
void unpack_sums_accumulate_cuda(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                                 int32_t* acc);
void unpack_sums_scaled_cuda(const uint64_t* words, int64_t n, uint64_t levels, int32_t offset,
                             float scale, float* out);

namespace detail {

// The argument checks the CPU and CUDA kernels share; `fn` names the kernel in the message.
inline void check_sum_radix_args(const char* fn, const void* in, const void* out, int64_t n,
                                 uint64_t levels, int32_t offset) {
  TG_CHECK(n >= 0, fn, ": n = ", n, " elements (expected >= 0)");
  TG_CHECK(n == 0 || in != nullptr, fn, ": input pointer is null for n = ", n, " elements");
  TG_CHECK(n == 0 || out != nullptr, fn, ": output pointer is null for n = ", n, " elements");
  TG_CHECK(levels >= 2 && levels <= (uint64_t{1} << 32), fn, ": levels = ", levels,
           " (expected 2 .. 2^32)");
  TG_CHECK(offset >= 0 && static_cast<uint64_t>(offset) < levels, fn, ": offset = ", offset,
           " (expected 0 .. levels - 1 = ", levels - 1, ")");
}

}  // namespace detail

}  // namespace tg::tern
