// Full reductions, argmax |x| and their backward on the CPU.
//
// Determinism: x is cut into fixed blocks of kBlock elements (a partition that depends only on
// n). Each block is reduced sequentially in double, blocks are spread over OpenMP threads in any
// way, and the per-block partials are then combined sequentially in block order. The result is
// therefore the same bits for every thread count and every run.
#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/core/error.h"
#include "nn/ops/reduce_kernels.h"

namespace tg {

namespace {

// 8 K floats = 32 KiB: fits L1, and a 1 M-element gradient still gives 128 blocks to share.
constexpr int64_t kBlock = 8192;

int64_t num_blocks(int64_t n) {
  return (n + kBlock - 1) / kBlock;
}

template <ReduceOp Op>
inline double term(float v) {
  if constexpr (Op == ReduceOp::l1 || Op == ReduceOp::max_abs) return std::fabs(double(v));
  if constexpr (Op == ReduceOp::sum_squares) return double(v) * double(v);
  return double(v);
}

template <ReduceOp Op>
inline double combine(double a, double b) {
  if constexpr (Op == ReduceOp::max_abs) return std::fmax(a, b);
  return a + b;
}

template <ReduceOp Op>
double reduce_typed(const float* x, int64_t n) {
  const int64_t nb = num_blocks(n);
  std::vector<double> partial(nb);
#pragma omp parallel for schedule(static) if (nb > 4)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    double acc = 0.0;
    for (int64_t i = lo; i < hi; ++i) acc = combine<Op>(acc, term<Op>(x[i]));
    partial[b] = acc;
  }
  double acc = 0.0;
  for (int64_t b = 0; b < nb; ++b) acc = combine<Op>(acc, partial[b]);
  return acc;
}

inline float sign_of(float v) {
  return v > 0.f ? 1.f : (v < 0.f ? -1.f : 0.f);
}

}  // namespace

void reduce_cpu(ReduceOp op, const float* x, int64_t n, float* out) {
  TG_CHECK(n >= 0, "reduce_cpu: negative size ", n);
  switch (op) {
    case ReduceOp::sum:
      *out = static_cast<float>(reduce_typed<ReduceOp::sum>(x, n));
      return;
    case ReduceOp::mean:
      TG_CHECK(n > 0, "mean of an empty tensor (n = 0) is undefined");
      *out = static_cast<float>(reduce_typed<ReduceOp::mean>(x, n) / static_cast<double>(n));
      return;
    case ReduceOp::max_abs:
      *out = static_cast<float>(reduce_typed<ReduceOp::max_abs>(x, n));
      return;
    case ReduceOp::sum_squares:
      *out = static_cast<float>(reduce_typed<ReduceOp::sum_squares>(x, n));
      return;
    case ReduceOp::l1:
      *out = static_cast<float>(reduce_typed<ReduceOp::l1>(x, n));
      return;
  }
}

void argmax_abs_cpu(const float* x, int64_t n, int64_t* index) {
  const int64_t nb = num_blocks(n);
  std::vector<float> best(nb);
  std::vector<int64_t> arg(nb);
#pragma omp parallel for schedule(static) if (nb > 4)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    float v = -1.f;  // below every |x|; NaNs never win
    int64_t k = -1;
    for (int64_t i = lo; i < hi; ++i) {
      const float a = std::fabs(x[i]);
      if (a > v) {  // strict: the first index of a tie is kept
        v = a;
        k = i;
      }
    }
    best[b] = v;
    arg[b] = k;
  }
  float v = -1.f;
  int64_t k = -1;
  for (int64_t b = 0; b < nb; ++b) {
    if (best[b] > v) {
      v = best[b];
      k = arg[b];
    }
  }
  *index = k;
}

void reduce_backward_cpu(ReduceOp op, const float* x, int64_t n, const float* dy,
                         const int64_t* argmax, float* dx) {
  const float g = dy[0];
  switch (op) {
    case ReduceOp::sum:
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) dx[i] = g;
      return;
    case ReduceOp::mean: {
      const float gm = g / static_cast<float>(n);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) dx[i] = gm;
      return;
    }
    case ReduceOp::sum_squares:
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) dx[i] = 2.f * x[i] * g;
      return;
    case ReduceOp::l1:
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) dx[i] = sign_of(x[i]) * g;
      return;
    case ReduceOp::max_abs: {
      const int64_t k = argmax[0];
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) dx[i] = i == k ? sign_of(x[i]) * g : 0.f;
      return;
    }
  }
}

}  // namespace tg
