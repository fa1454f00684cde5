// Raw kernels behind Tensor::copy_from / contiguous / fill: strided copy of elements of 1, 2, 4
// or 8 bytes with up to kMaxDims dimensions, and fill. CPU and CUDA versions mirror each other.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nn/core/dtype.h"
#include "nn/core/shape.h"

namespace tg {

struct StridedCopyShape {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t src_strides[kMaxDims] = {};  // in elements
  int64_t dst_strides[kMaxDims] = {};  // in elements
};

void strided_copy_cpu(const StridedCopyShape& s, const void* src, void* dst, size_t elem_size);
void strided_copy_cuda(const StridedCopyShape& s, const void* src, void* dst, size_t elem_size);

// Sets n contiguous elements of type `t` to `value` (converted to the element type).
void fill_cpu(void* dst, int64_t n, DType t, double value);
void fill_cuda(void* dst, int64_t n, DType t, double value);

}  // namespace tg
