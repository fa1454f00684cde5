// Broadcasting binary ops, affine and sum_to on the CPU. The output is walked in row-major
// order: an odometer over the outer dimensions, a tight (vectorizable) loop over the innermost.
#include <cstring>

#include "nn/ops/elementwise_kernels.h"

namespace tg {

namespace {

template <BinaryOp Op>
inline float apply(float x, float y) {
  if constexpr (Op == BinaryOp::add) return x + y;
  if constexpr (Op == BinaryOp::sub) return x - y;
  if constexpr (Op == BinaryOp::mul) return x * y;
  return x / y;
}

template <BinaryOp Op>
void binary_typed(const BroadcastShape& s, const float* a, const float* b, float* out) {
  if (s.ndim == 0) {
    out[0] = apply<Op>(a[0], b[0]);
    return;
  }
  const int last = s.ndim - 1;
  const int64_t inner = s.sizes[last], as = s.a_strides[last], bs = s.b_strides[last];
  int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= s.sizes[d];
#pragma omp parallel for schedule(static) if (outer * inner > (1 << 16))
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, ao = 0, bo = 0;
    for (int d = last - 1; d >= 0; --d) {
      const int64_t c = rem % s.sizes[d];
      rem /= s.sizes[d];
      ao += c * s.a_strides[d];
      bo += c * s.b_strides[d];
    }
    const float* pa = a + ao;
    const float* pb = b + bo;
    float* po = out + o * inner;
    if (as == 1 && bs == 1) {
      for (int64_t i = 0; i < inner; ++i) po[i] = apply<Op>(pa[i], pb[i]);
    } else if (as == 1 && bs == 0) {
      const float y = pb[0];
      for (int64_t i = 0; i < inner; ++i) po[i] = apply<Op>(pa[i], y);
    } else {
      for (int64_t i = 0; i < inner; ++i) po[i] = apply<Op>(pa[i * as], pb[i * bs]);
    }
  }
}

}  // namespace

void binary_cpu(BinaryOp op, const BroadcastShape& s, const float* a, const float* b, float* out) {
  switch (op) {
    case BinaryOp::add:
      return binary_typed<BinaryOp::add>(s, a, b, out);
    case BinaryOp::sub:
      return binary_typed<BinaryOp::sub>(s, a, b, out);
    case BinaryOp::mul:
      return binary_typed<BinaryOp::mul>(s, a, b, out);
    case BinaryOp::div:
      return binary_typed<BinaryOp::div>(s, a, b, out);
  }
}

void affine_cpu(int64_t n, const float* x, float scale, float shift, float* out) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale + shift;
}

void sum_to_cpu(const BroadcastShape& s, const float* g, float* out, int64_t out_numel) {
  std::memset(out, 0, out_numel * sizeof(float));
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.sizes[d];
  int64_t idx[kMaxDims] = {};
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[off] += g[i];
    for (int d = s.ndim - 1; d >= 0; --d) {
      off += s.a_strides[d];
      if (++idx[d] < s.sizes[d]) break;
      off -= idx[d] * s.a_strides[d];
      idx[d] = 0;
    }
  }
}

}  // namespace tg
