// gemm_cpu (nn/core/blas.h): every transpose combination, strided operands, alpha and beta, on
// shapes that run as one call and as a grid of tiles, against a double reference; the tiling is
// a function of the shape and the machine, never of the thread count; and the result has the
// same bits for any OpenMP thread count (OpenBLAS's own threading does not, which is why
// gemm_cpu tiles). Then the edge cases of gemm_reference.h through tg::gemm on the CPU (sizes 0
// and 1, odd sizes, padded leading dimensions, alpha/beta, beta = 0 over NaN) and the checks of
// validate_gemm.
#include "nn/core/blas.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nn/core/error.h"
#include "tests/nn/core/gemm_reference.h"

namespace tg {
namespace {

struct Problem {
  int64_t m, n, k;
};

// Small (one call), tall (row tiles), wide (column tiles) and the training shapes of LeNet's
// fc3 forward / weight gradient and CifarNet conv2's chunk GEMM.
const Problem kProblems[] = {{7, 5, 3},       {40, 33, 17},    {900, 40, 300},  {48, 1500, 200},
                             {64, 500, 2450}, {500, 2450, 64}, {64, 1600, 2304}};

std::vector<float> uniform(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : v) x = u(rng);
  return v;
}

// C = alpha * op(A) op(B) + beta * C with padded leading dimensions (+3) so tiles must honour
// them; returns C.
std::vector<float> run(const Problem& p, Trans ta, Trans tb, float alpha, float beta,
                       const std::vector<float>& a, const std::vector<float>& b,
                       std::vector<float> c) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.alpha = alpha;
  g.beta = beta;
  g.a = a.data();
  g.lda = (ta == Trans::N ? p.k : p.m) + 3;
  g.b = b.data();
  g.ldb = (tb == Trans::N ? p.n : p.k) + 3;
  g.c = c.data();
  g.ldc = p.n + 3;
  gemm_cpu(g);
  return c;
}

struct Operands {
  std::vector<float> a, b, c;
};
Operands operands(const Problem& p, uint64_t seed) {
  const int64_t rows_a = std::max(p.m, p.k) + 3, rows_b = std::max(p.k, p.n) + 3;
  return {uniform(rows_a * rows_a, seed), uniform(rows_b * rows_b, seed + 1),
          uniform(p.m * (p.n + 3), seed + 2)};
}

TEST(GemmCpu, MatchesReferenceForEveryTransposeAndTiling) {
  uint64_t seed = 1;
  for (const Problem& p : kProblems) {
    const Operands o = operands(p, seed += 3);
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T}) {
        SCOPED_TRACE(::testing::Message() << p.m << "x" << p.n << "x" << p.k << " ta "
                                          << (ta == Trans::T) << " tb " << (tb == Trans::T));
        const float alpha = 0.75f, beta = -0.5f;
        const std::vector<float> c = run(p, ta, tb, alpha, beta, o.a, o.b, o.c);
        const int64_t lda = (ta == Trans::N ? p.k : p.m) + 3;
        const int64_t ldb = (tb == Trans::N ? p.n : p.k) + 3, ldc = p.n + 3;
        int bad = 0;
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = 0; j < p.n + 3; ++j) {
            const float got = c[i * ldc + j];
            if (j >= p.n) {  // the padding columns of C are never written
              if (got != o.c[i * ldc + j] && bad++ < 3)
                ADD_FAILURE() << "wrote C pad " << i << "," << j;
              continue;
            }
            double ref = 0.0;
            for (int64_t l = 0; l < p.k; ++l) {
              const double av = ta == Trans::N ? o.a[i * lda + l] : o.a[l * lda + i];
              const double bv = tb == Trans::N ? o.b[l * ldb + j] : o.b[j * ldb + l];
              ref += av * bv;
            }
            ref = alpha * ref + beta * o.c[i * ldc + j];
            // f32 sums of k products of values in [-1, 1]: ~sqrt(k) * 2^-24 relative spread.
            const double tol = 1e-5 * std::sqrt(static_cast<double>(p.k)) * 4 + 1e-6;
            if (std::abs(got - ref) > tol && bad++ < 3)
              ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", reference " << ref;
          }
        EXPECT_EQ(bad, 0);
      }
  }
}

TEST(GemmCpu, TilesDependOnTheShapeAlone) {
  const GemmTiles small = gemm_tiles(7, 5, 3);
  EXPECT_EQ(small.rows * small.cols, 1);  // small: one call
  for (const Problem& p : kProblems) {
    SCOPED_TRACE(::testing::Message() << p.m << "x" << p.n << "x" << p.k);
    const GemmTiles t = gemm_tiles(p.m, p.n, p.k);
    const int64_t count = t.rows * t.cols;
    EXPECT_LE(count, 64);
    EXPECT_EQ(count & (count - 1), 0) << "not a power of two: " << count;
    EXPECT_GE(t.rows * t.row_size, p.m);  // the grid covers C
    EXPECT_GE(t.cols * t.col_size, p.n);
    EXPECT_LT((t.rows - 1) * t.row_size, p.m);  // and no row or column of tiles is empty
    EXPECT_LT((t.cols - 1) * t.col_size, p.n);
    if (t.cols > 1) {
      EXPECT_GE(t.col_size, 64);
    }
    if (t.rows > 1) {
      EXPECT_GE(t.row_size, 64);
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    const GemmTiles t3 = gemm_tiles(p.m, p.n, p.k);
    omp_set_num_threads(saved);
    EXPECT_EQ(t3.rows, t.rows);
    EXPECT_EQ(t3.cols, t.cols);
  }
  // A large product: as many tiles as the machine has CPUs (rounded up to a power of two), in a
  // 2-D grid of fat tiles when square.
  const long cpus = std::max(::sysconf(_SC_NPROCESSORS_ONLN), 1L);
  int64_t want = 1;
  while (want < cpus && want < 64) want *= 2;
  const GemmTiles big = gemm_tiles(2048, 2048, 2048);
  EXPECT_EQ(big.rows * big.cols, want);
  if (want >= 4) {
    EXPECT_GT(big.rows, 1);
    EXPECT_GT(big.cols, 1);
  }
}

TEST(GemmCpu, SameBitsForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  uint64_t seed = 100;
  for (const Problem& p : kProblems) {
    const Operands o = operands(p, seed += 3);
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T}) {
        omp_set_num_threads(1);
        const std::vector<float> one = run(p, ta, tb, 1.0f, 0.0f, o.a, o.b, o.c);
        for (int threads : {2, 3, 4}) {
          omp_set_num_threads(threads);
          const std::vector<float> c = run(p, ta, tb, 1.0f, 0.0f, o.a, o.b, o.c);
          EXPECT_EQ(std::memcmp(c.data(), one.data(), sizeof(float) * c.size()), 0)
              << p.m << "x" << p.n << "x" << p.k << " ta " << (ta == Trans::T) << " tb "
              << (tb == Trans::T) << ": " << threads << " threads differ from 1";
        }
      }
  }
  omp_set_num_threads(saved);
}

// Called from inside a parallel region (conv2d's image tasks), the same shapes give the same
// bits as from outside: OpenBLAS stays on the calling thread either way.
TEST(GemmCpu, InsideAParallelRegionSameBits) {
  const Problem p{64, 500, 2450};
  const Operands o = operands(p, 7);
  const std::vector<float> outside = run(p, Trans::N, Trans::T, 1.0f, 0.0f, o.a, o.b, o.c);
  std::vector<std::vector<float>> inside(4);
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < 4; ++i) inside[i] = run(p, Trans::N, Trans::T, 1.0f, 0.0f, o.a, o.b, o.c);
  for (const auto& c : inside)
    EXPECT_EQ(std::memcmp(c.data(), outside.data(), sizeof(float) * c.size()), 0);
}

TEST(GemmCpu, EdgeCasesMatchTheNaiveLoop) {
  gemm_testing::for_each_case([](const gemm_testing::Case& cs, const gemm_testing::Operands& o,
                                 const std::vector<double>& want) {
    std::vector<float> c = o.c;
    GemmArgs g = o.g;
    g.a = o.a.data();
    g.b = o.b.data();
    g.c = c.data();
    gemm(Device::cpu(), g);
    std::string first;
    EXPECT_EQ(gemm_testing::mismatches(cs, o, c, want, &first), 0) << first;
  });
}

TEST(GemmCpu, RejectsBadShapesNamingThem) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  GemmArgs g = dense_gemm(Trans::N, Trans::N, 4, 4, 4, 1.0f, a.data(), b.data(), 0.0f, c.data());
  EXPECT_NO_THROW(gemm(Device::cpu(), g));
  GemmArgs bad = g;
  bad.lda = 3;  // < k
  EXPECT_THROW(gemm(Device::cpu(), bad), Error);
  bad = g;
  bad.trans_b = Trans::T;
  bad.ldb = 3;  // < k for op(B) = B^T
  EXPECT_THROW(gemm(Device::cpu(), bad), Error);
  bad = g;
  bad.ldc = 3;  // < n
  EXPECT_THROW(gemm(Device::cpu(), bad), Error);
  bad = g;
  bad.m = -1;
  EXPECT_THROW(gemm(Device::cpu(), bad), Error);
  bad = g;
  bad.k = int64_t{1} << 31;  // beyond the BLAS int range
  EXPECT_THROW(gemm(Device::cpu(), bad), Error);
}

}  // namespace
}  // namespace tg
