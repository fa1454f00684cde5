// Packed integer sum fields: the wire format of the exact ternary collectives
// (terngrad/exchange/ternary_collectives.h). CPU and CUDA kernels with mirror-image signatures, raw
// pointers (device pointers for _cuda); n = number of elements of one gradient tensor.
//
// Layout: an integer vector v[0 .. n) whose values (after adding `offset`) lie in [0, 2^k) is
// stored in k-bit fields of little-endian 64-bit words, f = floor(64 / k) fields per word, no field
// straddling two words:
//   element i lives in word i / f at bits (i % f) * k .. (i % f) * k + k - 1,
//   the top 64 - f * k bits of every word and the unused fields of the last word are 0,
//   words = ceil(n / f) (8 * words bytes on the wire).
// Because every field of a sum of such vectors stays below 2^k as long as the true sum does, a
// plain integer addition of whole words (an allreduce sum of u64) adds all fields at once with no
// carry from one field into the next: this is how packed_allreduce sums P ranks' fields. 1 <= k
// <= 32.
//
//   pack_sum_fields:            words = the layout above of (v[i] + offset); every word written.
//   unpack_sum_fields_accumulate: acc[i] += field_i - offset (int32).
// Both are pure integer code: CPU and CUDA are bit-identical by construction.
#pragma once

#include <cstdint>

namespace tg::tern {

// k = ceil(log2(2N + 1)): the fewest bits that hold a sum of N ternary codes shifted by +N to
// [0, 2N]. Throws unless 1 <= N <= 2^30.
int sum_field_bits(int64_t workers_total);
// f = floor(64 / k) fields per word; ceil(n / f) words for n elements. Throw unless 1 <= k <= 32.
int fields_per_word(int k);
int64_t sum_field_words(int64_t n, int k);

void pack_sum_fields_cpu(const int32_t* v, int64_t n, int32_t offset, int k, uint64_t* words);
void unpack_sum_fields_accumulate_cpu(const uint64_t* words, int64_t n, int k, int32_t offset,
                                      int32_t* acc);

void pack_sum_fields_cuda(const int32_t* v, int64_t n, int32_t offset, int k, uint64_t* words);
void unpack_sum_fields_accumulate_cuda(const uint64_t* words, int64_t n, int k, int32_t offset,
                                       int32_t* acc);

}  // namespace tg::tern
