// Packed integer sum fields on the CPU (layout: terngrad/ternary_fields.h). One OpenMP iteration
// per 64-bit word: a word's f fields are one contiguous run of elements, so threads never share a
// word or an accumulator.
#include <bit>

#include "nn/core/error.h"
#include "terngrad/ternary_fields.h"

namespace tg::tern {

namespace {
constexpr int64_t kParallelMinWords = 1 << 14;  // below this a pass is too short to fork threads
}  // namespace

int sum_field_bits(int64_t workers_total) {
  TG_CHECK(workers_total >= 1 && workers_total <= (int64_t{1} << 30),
           "sum_field_bits: N = ", workers_total, " workers (expected 1 .. 2^30)");
  // 2^k > 2N  <=>  k = bit width of 2N.
  return std::bit_width(static_cast<uint64_t>(2 * workers_total));
}

int fields_per_word(int k) {
  TG_CHECK(k >= 1 && k <= 32, "packed sum fields: k = ", k, " bits (expected 1 .. 32)");
  return 64 / k;
}

int64_t sum_field_words(int64_t n, int k) {
  TG_CHECK(n >= 0, "packed sum fields: n = ", n, " (expected >= 0)");
  const int64_t f = fields_per_word(k);
  return (n + f - 1) / f;
}

void pack_sum_fields_cpu(const int32_t* v, int64_t n, int32_t offset, int k, uint64_t* words) {
  const int64_t f = fields_per_word(k);
  const int64_t m = sum_field_words(n, k);
  const uint64_t mask = (uint64_t{1} << k) - 1;
#pragma omp parallel for schedule(static) if (m >= kParallelMinWords)
  for (int64_t j = 0; j < m; ++j) {
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

void unpack_sum_fields_accumulate_cpu(const uint64_t* words, int64_t n, int k, int32_t offset,
                                      int32_t* acc) {
  const int64_t f = fields_per_word(k);
  const int64_t m = sum_field_words(n, k);
  const uint64_t mask = (uint64_t{1} << k) - 1;
#pragma omp parallel for schedule(static) if (m >= kParallelMinWords)
  for (int64_t j = 0; j < m; ++j) {
    const int64_t begin = j * f;
    const int64_t end = begin + f < n ? begin + f : n;
    const uint64_t w = words[j];
    for (int64_t i = begin; i < end; ++i) {
      const int64_t field = static_cast<int64_t>((w >> ((i - begin) * k)) & mask);
      acc[i] += static_cast<int32_t>(field - offset);  // field up to 2^32 - 1: no int32 overflow
    }
  }
}

}  // namespace tg::tern
