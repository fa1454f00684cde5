// Raw kernels of reduce.h: full reductions of n contiguous f32 values to one scalar, the
// first-index argmax of |x|, and the backward of each reduction. Raw pointers only, so the
// compression code can run them on flat gradient buffers (a whole ParamArena or one bucket).
//
// Every reduction accumulates in double and combines partial results in an order that depends
// only on n (never on the thread count or on timing), so results are bit-reproducible run to
// run. CPU and CUDA use different (fixed) orders, so they agree to f32 rounding, not bit for bit.
#pragma once

#include <cstdint>

namespace tg {

enum class ReduceOp : uint8_t {
  sum,          // sum_i x_i
  mean,         // sum_i x_i / n (n == 0 throws)
  max_abs,      // max_i |x_i| (0 for n == 0; NaNs are skipped, fmax semantics)
  sum_squares,  // sum_i x_i^2
  l1,           // sum_i |x_i|
};

constexpr const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max_abs:
      return "max_abs";
    case ReduceOp::sum_squares:
      return "sum_squares";
    case ReduceOp::l1:
      return "l1_norm";
  }
  return "?";
}

// *out = op(x[0..n)). `out` is one float in host memory. Throws for mean with n == 0.
void reduce_cpu(ReduceOp op, const float* x, int64_t n, float* out);
// Same on the current device's stream; `out` is one float in device memory, `workspace` device
// memory of at least reduce_cuda_workspace_floats(n) floats, 8-byte aligned (partials are
// doubles). Asynchronous: nothing is copied back to the host. Throws for mean with n == 0.
void reduce_cuda(ReduceOp op, const float* x, int64_t n, float* out, float* workspace);
int64_t reduce_cuda_workspace_floats(int64_t n);

// *index = the first i attaining max_i |x_i| (-1 if n == 0 or every x_i is NaN). Host / device
// memory as above; argmax_abs_cuda uses the same workspace as reduce_cuda.
void argmax_abs_cpu(const float* x, int64_t n, int64_t* index);
void argmax_abs_cuda(const float* x, int64_t n, int64_t* index, float* workspace);

// dx[0..n) = d op(x) / dx * dy[0]:
//   sum: dy   mean: dy / n   sum_squares: 2 x dy   l1: sign(x) dy (0 at 0)
//   max_abs: sign(x_k) dy at k = argmax[0] (from argmax_abs_*), 0 elsewhere.
// dy and argmax (read only for max_abs; may be null otherwise) live on the kernel's device, so
// the CUDA backward needs no host round trip.
void reduce_backward_cpu(ReduceOp op, const float* x, int64_t n, const float* dy,
                         const int64_t* argmax, float* dx);
void reduce_backward_cuda(ReduceOp op, const float* x, int64_t n, const float* dy,
                          const int64_t* argmax, float* dx);

}  // namespace tg
