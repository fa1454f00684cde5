// Row-major GEMM on cuBLAS. cuBLAS is column-major; a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so we swap the operands (and m/n) and keep the
// transposition flags: the stored row-major matrices read as column-major are the transposes.
#include "nn/core/blas.h"
#include "nn/core/cuda_check.cuh"
#include "nn/core/cuda_libs.h"
#include "nn/core/precision.h"
#include "nn/core/profile.h"

namespace tg {

void gemm_cuda(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (profile::enabled()) profile::add_flops(2 * g.m * g.n * g.k);
  const cublasOperation_t ta = g.trans_a == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t tb = g.trans_b == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasHandle_t h = cuda::cublas_handle();
  // A host-side field of the handle: cheap to set on every call, so cuda.tf32 holds on both
  // streams' handles whenever it was set.
  TG_CUBLAS_CHECK(cuda::cublas_api().set_math_mode(
      h, cuda_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  TG_CUBLAS_CHECK(cuda::cublas_api().sgemm(h, tb, ta, static_cast<int>(g.n), static_cast<int>(g.m),
                                           static_cast<int>(g.k), &g.alpha, g.b,
                                           static_cast<int>(g.ldb), g.a, static_cast<int>(g.lda),
                                           &g.beta, g.c, static_cast<int>(g.ldc)));
}

}  // namespace tg

namespace tg {

namespace {
constexpr int64_t kChunk = int64_t{1} << 30;
}  // namespace

void axpy_cuda(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t o = 0; o < n; o += kChunk) {
    const int len = static_cast<int>(n - o < kChunk ? n - o : kChunk);
    TG_CUBLAS_CHECK(
        cuda::cublas_api().saxpy(cuda::cublas_handle(), len, &alpha, x + o, 1, y + o, 1));
  }
}

void scal_cuda(int64_t n, float alpha, float* x) {
  for (int64_t o = 0; o < n; o += kChunk) {
    const int len = static_cast<int>(n - o < kChunk ? n - o : kChunk);
    TG_CUBLAS_CHECK(cuda::cublas_api().sscal(cuda::cublas_handle(), len, &alpha, x + o, 1));
  }
}

}  // namespace tg
