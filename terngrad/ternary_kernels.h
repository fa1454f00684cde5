// TernGrad's per-tensor kernels (ternarize, clipping, scaler sharing, 2-bit packing), CPU and CUDA
// with mirror-image signatures. Raw pointers and sizes only; device pointers for the _cuda variants
// (scalar results are returned to the host). Shape letters: n = number of elements of one gradient
// tensor.
//
//   1. tensor_stats:        one pass: max|g|, sum, sum of squares, L1 -> TensorStats (double
//                           accumulation; population sigma = sqrt(E[g^2] - E[g]^2), clamped >= 0).
//   2. ternarize_pack:      one fused pass: code_i = sign(g_i) * b_i with P(b_i = 1) =
//                           min(|g_i| / s, 1) by the rule of ternary_rule.h (a 32-bit uniform
//                           per element drawn lazily: 8 bits from one Philox block per 16
//                           elements, 24 more only when those cannot decide), written straight
//                           into the packed wire format. Elements with |g_i| >= s are kept
//                           with probability 1 (i.e. clipped to +-s). The random numbers come
//                           from stream = rng_stream(RngPurpose::ternarize, step, worker,
//                           tensor), so the codes depend only on (seed, step, worker, tensor, i,
//                           g_i, s), never on the device or process computing them. s <= 0 (an
//                           all-zero gradient) gives all-zero codes.
//   3. unpack_accumulate:   acc_i += code_i (int32), for aggregating N workers' codes exactly:
//                           the aggregate is (s / N) * sum_w code_i^w with the integer sum in
//                           [-N, N], independent of summation order.
//      unpack_accumulate_many: acc_i += the sum over v < count of code_i of vector v (stored at
//                           packed + v * stride): the same integers as count unpack_accumulate
//                           calls, in one pass over acc (the decode after a gather or allgather
//                           of N workers' codes).
//   4. scale_accumulated:   out_i = scale * acc_i (scale = s / N).
//   5. clipped_sum_sq:      ||clamp(g, -s, s)||^2 in double (a fixed summation order on each
//                           device), for the norm-preserving rescale (compression.rescale).
// CPU and CUDA produce bit-identical packed bytes for the same (g, s, seed, stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nn/core/error.h"

namespace tg::tern {

struct TensorStats {
  int64_t n = 0;
  double max_abs = 0, sum = 0, sum_sq = 0, l1 = 0;
  double mean() const { return n ? sum / n : 0.0; }
  double sigma() const;  // population standard deviation (mean-subtracted), >= 0
};

// Wire formats of a ternary code vector (codes in {-1, 0, +1}):
//   two_bit: 4 codes per byte, element i in byte i / 4 at bits 2*(i % 4) .. 2*(i % 4) + 1,
//            value (code + 1) in {0, 1, 2}; the unused bits of the last byte are 0.
//            ceil(n / 4) bytes.
//   base3:   5 codes per byte, byte j = sum_{k<5} (code_{5j+k} + 1) * 3^k (0..242); missing
//            elements of the last byte count as code 0 (digit 1). ceil(n / 5) bytes = 1.6 bits
//            per element.
enum class PackFormat : uint8_t { two_bit, base3 };
size_t packed_bytes(PackFormat f, int64_t n);

void tensor_stats_cpu(const float* g, int64_t n, TensorStats* out);
void ternarize_pack_cpu(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                        PackFormat f, uint8_t* out);
void unpack_accumulate_cpu(const uint8_t* packed, int64_t n, PackFormat f, int32_t* acc);
void unpack_accumulate_many_cpu(const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                                PackFormat f, int32_t* acc);
void scale_accumulated_cpu(const int32_t* acc, int64_t n, float scale, float* out);
double clipped_sum_sq_cpu(const float* g, int64_t n, float s);

// ---- batches: the kernels above over many tensors in one call --------------------------------
// The same bytes, integers and floats as one call per tensor (stats: the same values up to the
// double summation order, as always between devices). On CUDA one launch per kMaxSlots (60)
// tensors (terngrad/ternary_batch.h), and for stats one device-to-host copy and one
// synchronization for the whole batch; on the CPU a loop over the per-tensor kernels.
// Tasks with n = 0 are skipped; every task's arguments are checked as the per-tensor call does.
// Elements per chunk of an error-feedback residual update on the CPU (its decoded codes stay in
// cache): a multiple of 60, so a chunk starts on a whole byte of codes in every packing (3, 4
// or 5 codes per byte).
constexpr int64_t kResidualChunk = 60 * 256;

struct PackTask {
  const float* g = nullptr;
  int64_t n = 0;
  float s = 0;          // the scaler (s <= 0: all-zero codes)
  uint64_t stream = 0;  // rng_stream(RngPurpose::ternarize, step, worker, tensor)
  uint8_t* out = nullptr;
  uint8_t* scaler_out = nullptr;  // when set: s's 4 bytes are written there (any alignment)
  // Error feedback, when set (n floats, not overlapping g): the codes are those of
  // v = residual + g, and afterwards residual = v - s * code (v and the update each rounded once,
  // s * code exact), the arithmetic of compression.error_feedback on every device.
  float* residual = nullptr;
};
struct StatsTask {
  const float* g = nullptr;
  int64_t n = 0;
};
struct ScaleTask {
  const int32_t* acc = nullptr;
  int64_t n = 0;
  float scale = 0;
  float* out = nullptr;
};
struct UnpackTask {
  const uint8_t* packed = nullptr;  // vector v at packed + v * stride
  int64_t count = 1;                // vectors
  size_t stride = 0;
  int64_t n = 0;
  int32_t* acc = nullptr;
};
// clipped_sum_sq of task i at scaler scalers[i] into out[i].
void clipped_sum_sq_batch_cpu(const StatsTask* tasks, size_t count, const float* scalers,
                              double* out);
void clipped_sum_sq_batch_cuda(const StatsTask* tasks, size_t count, const float* scalers,
                               double* out);
void ternarize_pack_batch_cpu(const PackTask* tasks, size_t count, uint64_t seed, PackFormat f);
void tensor_stats_batch_cpu(const StatsTask* tasks, size_t count, TensorStats* out);
void scale_accumulated_batch_cpu(const ScaleTask* tasks, size_t count);
void unpack_accumulate_batch_cpu(const UnpackTask* tasks, size_t count, PackFormat f);
void ternarize_pack_batch_cuda(const PackTask* tasks, size_t count, uint64_t seed, PackFormat f);
void tensor_stats_batch_cuda(const StatsTask* tasks, size_t count, TensorStats* out);
void scale_accumulated_batch_cuda(const ScaleTask* tasks, size_t count);
void unpack_accumulate_batch_cuda(const UnpackTask* tasks, size_t count, PackFormat f);

void tensor_stats_cuda(const float* g, int64_t n, TensorStats* out);
void ternarize_pack_cuda(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                         PackFormat f, uint8_t* out);
void unpack_accumulate_cuda(const uint8_t* packed, int64_t n, PackFormat f, int32_t* acc);
void unpack_accumulate_many_cuda(const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                                 PackFormat f, int32_t* acc);
void scale_accumulated_cuda(const int32_t* acc, int64_t n, float scale, float* out);
double clipped_sum_sq_cuda(const float* g, int64_t n, float s);

namespace detail {
// Argument checks shared by the CPU and CUDA kernels (same messages on both; `fn` names the
// caller). The *_args functions return false when there is nothing to do.
inline void check_format(PackFormat f, const char* fn) {
  TG_CHECK(f == PackFormat::two_bit || f == PackFormat::base3, fn, ": unknown PackFormat ",
           static_cast<int>(f), " (expected two_bit or base3)");
}
inline bool ternarize_args(const float* g, int64_t n, PackFormat f, const uint8_t* out,
                           const char* fn) {
  TG_CHECK(n >= 0, fn, ": element count ", n, " is negative (expected n >= 0)");
  check_format(f, fn);
  if (n == 0) return false;
  TG_CHECK(g != nullptr && out != nullptr, fn, ": null pointer for n = ", n);
  return true;
}
inline bool unpack_args(const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                        PackFormat f, const int32_t* acc, const char* fn) {
  TG_CHECK(n >= 0, fn, ": element count ", n, " is negative (expected n >= 0)");
  TG_CHECK(count >= 0, fn, ": vector count ", count, " is negative");
  check_format(f, fn);
  if (n == 0 || count == 0) return false;
  TG_CHECK(packed != nullptr && acc != nullptr, fn, ": null pointer for n = ", n);
  TG_CHECK(count == 1 || stride >= packed_bytes(f, n), fn, ": stride ", stride,
           " is shorter than one packed vector (", packed_bytes(f, n), " bytes)");
  return true;
}
inline bool scale_args(const int32_t* acc, int64_t n, const float* out, const char* fn) {
  TG_CHECK(n >= 0, fn, ": element count ", n, " is negative (expected n >= 0)");
  if (n == 0) return false;
  TG_CHECK(acc != nullptr && out != nullptr, fn, ": null pointer for n = ", n);
  return true;
}
}  // namespace detail

}  // namespace tg::tern
