// Raw kernels of elementwise.h. Shapes: `out` is contiguous over sizes[0..ndim); a and b are
// addressed through their own strides, where a broadcast dimension has stride 0.
#pragma once

#include <cstdint>

#include "nn/core/shape.h"

namespace tg {

enum class BinaryOp : uint8_t { add, sub, mul, div };

struct BroadcastShape {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};
  int64_t b_strides[kMaxDims] = {};
};

// out[i] = a[i] op b[i] for every output index i.
void binary_cpu(BinaryOp op, const BroadcastShape& s, const float* a, const float* b, float* out);
void binary_cuda(BinaryOp op, const BroadcastShape& s, const float* a, const float* b, float* out);

// out[i] = x[i] * scale + shift, n contiguous elements.
void affine_cpu(int64_t n, const float* x, float scale, float shift, float* out);
void affine_cuda(int64_t n, const float* x, float scale, float shift, float* out);

// Backward of broadcasting: out (contiguous over `out_sizes`) = sum of g over the expanded
// dimensions. `s.sizes` is g's shape; `s.a_strides` are out's strides aligned to g's dims,
// 0 where out was broadcast. (b_strides unused.)
void sum_to_cpu(const BroadcastShape& s, const float* g, float* out, int64_t out_numel);
void sum_to_cuda(const BroadcastShape& s, const float* g, float* out, int64_t out_numel);

}  // namespace tg
