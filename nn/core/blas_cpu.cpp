#include <cblas.h>

#include <algorithm>
#include <limits>

#include "nn/core/blas.h"
#include "nn/core/profile.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"

extern "C" int openblas_get_num_threads(void);

namespace tg {

void validate_gemm(const GemmArgs& g) {
  TG_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size m=", g.m, " n=", g.n, " k=", g.k);
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  TG_CHECK(
      g.m <= kMax && g.n <= kMax && g.k <= kMax && g.lda <= kMax && g.ldb <= kMax && g.ldc <= kMax,
      "gemm: size exceeds the BLAS int range");
  const int64_t a_cols = g.trans_a == Trans::N ? g.k : g.m;
  const int64_t b_cols = g.trans_b == Trans::N ? g.n : g.k;
  TG_CHECK(g.lda >= std::max<int64_t>(a_cols, 1), "gemm: lda=", g.lda, " < ", a_cols);
  TG_CHECK(g.ldb >= std::max<int64_t>(b_cols, 1), "gemm: ldb=", g.ldb, " < ", b_cols);
  TG_CHECK(g.ldc >= std::max<int64_t>(g.n, 1), "gemm: ldc=", g.ldc, " < ", g.n);
}

GemmArgs dense_gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a;
  g.lda = ta == Trans::N ? k : m;
  g.b = b;
  g.ldb = tb == Trans::N ? n : k;
  g.beta = beta;
  g.c = c;
  g.ldc = n;
  return g;
}

void gemm_cpu(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (profile::enabled()) profile::add_flops(2 * g.m * g.n * g.k);
  cblas_sgemm(CblasRowMajor, g.trans_a == Trans::N ? CblasNoTrans : CblasTrans,
              g.trans_b == Trans::N ? CblasNoTrans : CblasTrans, static_cast<int>(g.m),
              static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, g.a, static_cast<int>(g.lda),
              g.b, static_cast<int>(g.ldb), g.beta, g.c, static_cast<int>(g.ldc));
}

void gemm(const Device& device, const GemmArgs& g) {
  validate_gemm(g);
  switch (device.type) {
    case DeviceType::cpu:
      gemm_cpu(g);
      return;
    case DeviceType::cuda: {
#if TG_CUDA
      cuda::DeviceGuard guard(device.index);
      gemm_cuda(g);
      return;
#else
      TG_THROW("gemm on ", device.str(), ": terngrad was built without CUDA");
#endif
    }
  }
}

int blas_num_threads() {
  return openblas_get_num_threads();
}

}  // namespace tg

namespace tg {

namespace {
// Level-1 BLAS takes int counts: split longer vectors.
constexpr int64_t kChunk = int64_t{1} << 30;
}  // namespace

void axpy_cpu(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t o = 0; o < n; o += kChunk)
    cblas_saxpy(static_cast<int>(std::min(kChunk, n - o)), alpha, x + o, 1, y + o, 1);
}

void scal_cpu(int64_t n, float alpha, float* x) {
  for (int64_t o = 0; o < n; o += kChunk)
    cblas_sscal(static_cast<int>(std::min(kChunk, n - o)), alpha, x + o, 1);
}

void axpy(const Device& device, int64_t n, float alpha, const float* x, float* y) {
  switch (device.type) {
    case DeviceType::cpu:
      return axpy_cpu(n, alpha, x, y);
    case DeviceType::cuda: {
#if TG_CUDA
      cuda::DeviceGuard guard(device.index);
      return axpy_cuda(n, alpha, x, y);
#else
      TG_THROW("axpy on ", device.str(), ": terngrad was built without CUDA");
#endif
    }
  }
}

void scal(const Device& device, int64_t n, float alpha, float* x) {
  switch (device.type) {
    case DeviceType::cpu:
      return scal_cpu(n, alpha, x);
    case DeviceType::cuda: {
#if TG_CUDA
      cuda::DeviceGuard guard(device.index);
      return scal_cuda(n, alpha, x);
#else
      TG_THROW("scal on ", device.str(), ": terngrad was built without CUDA");
#endif
    }
  }
}

}  // namespace tg
