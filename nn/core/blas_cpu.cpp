#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/profile.h"

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

namespace {

// OpenBLAS's own threading is not thread-count invariant: with 1, 2, 3 or 4 threads its sgemm
// returns different bits for most shapes (it re-blocks the product per thread count; measured
// with OpenBLAS 0.3.21, e.g. m=500 n=2450 k=64, every transpose combination). Training must end
// with the same parameters for any thread count, so OpenBLAS always runs single-threaded here and
// the parallelism is ours: C is cut into a grid of tiles chosen from the shape and the machine,
// never from the thread count, and each tile is one single-threaded sgemm. Whichever thread runs a
// tile, and however many there are, every element of C is computed by the same call.
//
// The grid: a power of two of tiles (so 1, 2, 4, 8 or 16 threads share them evenly), at most one
// per kTileMinMacs of work and at most machine_tiles(): the machine's CPU count rounded up to a
// power of two (sysconf, all online CPUs: not the thread count, not this process's affinity, so
// every launcher on one machine cuts alike). More tiles than CPUs would only cost: each tile
// re-packs its blocks of A and B (32 tiles of a 2048^3 product ran 18% slower on one core than
// one call). The grid is made by halving the longer tile side while it stays >= 2 * kTileMinSide
// (thin tiles waste the sgemm kernel).
constexpr int64_t kTileMinMacs = int64_t{1} << 21;  // ~2M multiply-adds: ~10 us on one core
constexpr int64_t kTileMinSide = 64;                // rows or columns of a tile, at least

int64_t machine_tiles() {
  static const int64_t tiles = [] {
    const long cpus = std::max(::sysconf(_SC_NPROCESSORS_ONLN), 1L);
    int64_t t = 1;
    while (t < cpus && t < 64) t *= 2;
    return t;
  }();
  return tiles;
}

// Makes OpenBLAS (OpenMP build) single-threaded for calls on this thread: it follows
// omp_get_max_threads() at every call.
class OneBlasThread {
 public:
  OneBlasThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneBlasThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int saved_;
};

}  // namespace

void gemm_cpu_serial(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (profile::enabled()) profile::add_flops(2 * g.m * g.n * g.k);
  OneBlasThread one;
  cblas_sgemm(CblasRowMajor, g.trans_a == Trans::N ? CblasNoTrans : CblasTrans,
              g.trans_b == Trans::N ? CblasNoTrans : CblasTrans, static_cast<int>(g.m),
              static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, g.a, static_cast<int>(g.lda),
              g.b, static_cast<int>(g.ldb), g.beta, g.c, static_cast<int>(g.ldc));
}

GemmTiles gemm_tiles(int64_t m, int64_t n, int64_t k) {
  const int64_t macs = m * n * std::max<int64_t>(k, 1);
  int64_t want = std::min(machine_tiles(), macs / kTileMinMacs), tiles = 1;
  while (tiles * 2 <= want) tiles *= 2;
  GemmTiles t;
  t.row_size = m;
  t.col_size = n;
  while (t.rows * t.cols < tiles) {
    const bool cols_ok = t.col_size >= 2 * kTileMinSide, rows_ok = t.row_size >= 2 * kTileMinSide;
    if (cols_ok && (t.col_size >= t.row_size || !rows_ok)) {
      t.cols *= 2;
      t.col_size = (n + t.cols - 1) / t.cols;
    } else if (rows_ok) {
      t.rows *= 2;
      t.row_size = (m + t.rows - 1) / t.rows;
    } else {
      break;
    }
  }
  return t;
}

void gemm_cpu(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  const GemmTiles t = gemm_tiles(g.m, g.n, g.k);
  if (t.rows * t.cols == 1) return gemm_cpu_serial(g);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < t.rows * t.cols; ++i) {
    const int64_t r0 = (i / t.cols) * t.row_size, c0 = (i % t.cols) * t.col_size;
    GemmArgs part = g;  // rows [r0, r0 + m) of C and op(A), columns [c0, c0 + n) of C and op(B)
    part.m = std::min(t.row_size, g.m - r0);
    part.n = std::min(t.col_size, g.n - c0);
    if (part.m <= 0 || part.n <= 0) continue;
    part.a = g.a + (g.trans_a == Trans::N ? r0 * g.lda : r0);
    part.b = g.b + (g.trans_b == Trans::N ? c0 : c0 * g.ldb);
    part.c = g.c + r0 * g.ldc + c0;
    gemm_cpu_serial(part);
  }
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
