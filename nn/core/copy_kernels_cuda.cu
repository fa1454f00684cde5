// Strided copy and fill on CUDA. One thread per destination element (grid-stride loop); the
// destination linear index is decomposed into a multi-index over `sizes`, which addresses both
// the source and destination through their strides. Mirrors copy_kernels_cpu.cpp.
#include "nn/core/copy_kernels.h"
#include "nn/core/cuda_check.cuh"

namespace tg {

namespace {

template <typename T>
__global__ void strided_copy_kernel(StridedCopyShape s, int64_t n, const T* __restrict__ src,
                                    T* __restrict__ dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rem = i, so = 0, dof = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      int64_t c = rem % s.sizes[d];
      rem /= s.sizes[d];
      so += c * s.src_strides[d];
      dof += c * s.dst_strides[d];
    }
    dst[dof] = src[so];
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = v;
}

template <typename T>
void launch_copy(const StridedCopyShape& s, const void* src, void* dst) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.sizes[d];
  if (n == 0) return;
  strided_copy_kernel<T><<<cuda::grid_for(n), 256, 0, cuda::current_stream()>>>(
      s, n, static_cast<const T*>(src), static_cast<T*>(dst));
  TG_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_fill(void* dst, int64_t n, T v) {
  if (n == 0) return;
  fill_kernel<T><<<cuda::grid_for(n), 256, 0, cuda::current_stream()>>>(static_cast<T*>(dst), n, v);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace

void strided_copy_cuda(const StridedCopyShape& s, const void* src, void* dst, size_t elem_size) {
  switch (elem_size) {
    case 1:
      return launch_copy<uint8_t>(s, src, dst);
    case 2:
      return launch_copy<uint16_t>(s, src, dst);
    case 4:
      return launch_copy<uint32_t>(s, src, dst);
    case 8:
      return launch_copy<uint64_t>(s, src, dst);
  }
  TG_THROW("strided_copy_cuda: unsupported element size ", elem_size);
}

void fill_cuda(void* dst, int64_t n, DType t, double value) {
  switch (t) {
    case DType::f32:
      return launch_fill(dst, n, static_cast<float>(value));
    case DType::i8:
      return launch_fill(dst, n, static_cast<int8_t>(value));
    case DType::u8:
      return launch_fill(dst, n, static_cast<uint8_t>(value));
    case DType::i32:
      return launch_fill(dst, n, static_cast<int32_t>(value));
    case DType::i64:
      return launch_fill(dst, n, static_cast<int64_t>(value));
    case DType::u64:
      return launch_fill(dst, n, static_cast<uint64_t>(value));
  }
}

}  // namespace tg
