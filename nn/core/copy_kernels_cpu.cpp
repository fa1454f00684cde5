// Strided copy and fill on the CPU. The copy walks the destination index space in row-major
// order with an odometer over the outer dimensions and a tight loop over the innermost one.
#include <cstring>

#include "nn/core/copy_kernels.h"
#include "nn/core/error.h"

namespace tg {

namespace {

template <typename T>
void copy_typed(const StridedCopyShape& s, const T* src, T* dst) {
  if (s.ndim == 0) {
    dst[0] = src[0];
    return;
  }
  const int last = s.ndim - 1;
  const int64_t inner = s.sizes[last], ss = s.src_strides[last], ds = s.dst_strides[last];
  int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= s.sizes[d];
  int64_t idx[kMaxDims] = {};
  for (int64_t o = 0; o < outer; ++o) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < last; ++d) {
      so += idx[d] * s.src_strides[d];
      dof += idx[d] * s.dst_strides[d];
    }
    if (ss == 1 && ds == 1) {
      std::memcpy(dst + dof, src + so, inner * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[dof + i * ds] = src[so + i * ss];
    }
    for (int d = last - 1; d >= 0; --d) {
      if (++idx[d] < s.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

template <typename T>
void fill_typed(T* dst, int64_t n, T v) {
  for (int64_t i = 0; i < n; ++i) dst[i] = v;
}

}  // namespace

void strided_copy_cpu(const StridedCopyShape& s, const void* src, void* dst, size_t elem_size) {
  for (int d = 0; d < s.ndim; ++d)
    if (s.sizes[d] == 0) return;
  switch (elem_size) {
    case 1:
      return copy_typed(s, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
    case 2:
      return copy_typed(s, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
    case 4:
      return copy_typed(s, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
    case 8:
      return copy_typed(s, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst));
  }
  TG_THROW("strided_copy_cpu: unsupported element size ", elem_size);
}

void fill_cpu(void* dst, int64_t n, DType t, double value) {
  switch (t) {
    case DType::f32:
      return fill_typed(static_cast<float*>(dst), n, static_cast<float>(value));
    case DType::i8:
      return fill_typed(static_cast<int8_t*>(dst), n, static_cast<int8_t>(value));
    case DType::u8:
      return fill_typed(static_cast<uint8_t*>(dst), n, static_cast<uint8_t>(value));
    case DType::i32:
      return fill_typed(static_cast<int32_t*>(dst), n, static_cast<int32_t>(value));
    case DType::i64:
      return fill_typed(static_cast<int64_t*>(dst), n, static_cast<int64_t>(value));
    case DType::u64:
      return fill_typed(static_cast<uint64_t*>(dst), n, static_cast<uint64_t>(value));
  }
}

}  // namespace tg
