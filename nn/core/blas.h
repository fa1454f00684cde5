// One row-major GEMM API over OpenBLAS (CPU) and cuBLAS (CUDA), identical semantics:
//
//   C[M x N] = alpha * op(A)[M x K] * op(B)[K x N] + beta * C
//
// All matrices row-major with leading dimensions lda/ldb/ldc (elements between rows of the
// stored matrix, i.e. of A itself, not op(A)). Pointers live on the device of the call.
#pragma once

#include <cstdint>

#include "nn/core/device.h"

namespace tg {

enum class Trans : uint8_t { N, T };

struct GemmArgs {
  Trans trans_a = Trans::N, trans_b = Trans::N;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0;
};

// Throws if a leading dimension is too small for the shape or a size exceeds the BLAS int range.
void validate_gemm(const GemmArgs& g);

// CPU: bit-identical results for any OpenMP thread count (OpenBLAS runs single-threaded on tiles
// of C chosen from the shape and the machine; see gemm_tiles).
void gemm_cpu(const GemmArgs& g);
// How gemm_cpu cuts an m x n product with inner size k: a grid of `rows` x `cols` tiles of
// row_size x col_size (the last ones smaller), a function of the shape and of the machine's CPU
// count only (never of the thread count).
struct GemmTiles {
  int64_t rows = 1, cols = 1, row_size = 0, col_size = 0;
};
GemmTiles gemm_tiles(int64_t m, int64_t n, int64_t k);
// One single-threaded sgemm on the calling thread, whatever the OpenMP setting: for callers that
// parallelize over their own shape-determined tasks (conv2d's image tasks).
void gemm_cpu_serial(const GemmArgs& g);
void gemm_cuda(const GemmArgs& g);  // on the current device's stream
// Dispatches on `device` (sets the current CUDA device for cuda).
void gemm(const Device& device, const GemmArgs& g);

// Convenience for dense contiguous matrices: lda/ldb/ldc derived from the shapes.
GemmArgs dense_gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c);

// Threads OpenBLAS would use for a call made outside gemm_cpu (0 = its default). Benchmarks
// report it; gemm_cpu itself runs OpenBLAS on one thread per tile.
int blas_num_threads();

}  // namespace tg

namespace tg {

// y[0..n) += alpha * x[0..n) (cblas_saxpy / cublasSaxpy), on `device`.
void axpy_cpu(int64_t n, float alpha, const float* x, float* y);
void axpy_cuda(int64_t n, float alpha, const float* x, float* y);
void axpy(const Device& device, int64_t n, float alpha, const float* x, float* y);

// x[0..n) *= alpha.
void scal_cpu(int64_t n, float alpha, float* x);
void scal_cuda(int64_t n, float alpha, float* x);
void scal(const Device& device, int64_t n, float alpha, float* x);

}  // namespace tg
