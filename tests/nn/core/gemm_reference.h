// The specification of tg::gemm (nn/core/blas.h) as a naive loop with double accumulation, and the
// edge-case problems both the CPU test (blas_test.cpp) and the CUDA test (blas_cuda_test.cpp)
// run it on: sizes 0 and 1, odd sizes, leading dimensions larger than the matrix, and alpha/beta
// pairs including beta = 0 over a C full of NaN (BLAS semantics: C is then not read).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nn/core/blas.h"

namespace tg::gemm_testing {

struct Case {
  int64_t m, n, k;
  int64_t pad;  // added to every leading dimension (0 = dense)
  float alpha, beta;
};

// Every size class (1, 0 in each of m/n/k, odd, tall, wide) x padding x alpha/beta pair.
inline std::vector<Case> edge_cases() {
  struct Size {
    int64_t m, n, k;
  };
  const Size sizes[] = {{1, 1, 1},  {0, 5, 3},  {4, 0, 3},   {3, 4, 0},  {1, 9, 1},
                        {13, 1, 7}, {5, 7, 11}, {31, 17, 9}, {2, 65, 33}};
  struct Scale {
    float alpha, beta;
  };
  const Scale scales[] = {{1.0f, 0.0f}, {0.75f, -0.5f}, {0.0f, 1.0f}, {-2.0f, 1.0f}, {0.0f, 0.0f}};
  std::vector<Case> cases;
  for (const Size& s : sizes)
    for (int64_t pad : {0, 5})
      for (const Scale& sc : scales) cases.push_back({s.m, s.n, s.k, pad, sc.alpha, sc.beta});
  return cases;
}

// Host operands of a case: A, B uniform in [-1, 1) stored with their leading dimensions (at
// least one element so a 0-size pointer is still valid); C the same, or NaN everywhere when
// beta == 0 (garbage the GEMM must not read).
struct Operands {
  GemmArgs g;  // pointers unset
  std::vector<float> a, b, c;
};

inline Operands make_operands(const Case& cs, Trans ta, Trans tb, uint64_t seed) {
  Operands o;
  GemmArgs& g = o.g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = cs.m;
  g.n = cs.n;
  g.k = cs.k;
  g.alpha = cs.alpha;
  g.beta = cs.beta;
  const int64_t a_rows = ta == Trans::N ? cs.m : cs.k, a_cols = ta == Trans::N ? cs.k : cs.m;
  const int64_t b_rows = tb == Trans::N ? cs.k : cs.n, b_cols = tb == Trans::N ? cs.n : cs.k;
  g.lda = std::max<int64_t>(a_cols, 1) + cs.pad;
  g.ldb = std::max<int64_t>(b_cols, 1) + cs.pad;
  g.ldc = std::max<int64_t>(cs.n, 1) + cs.pad;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (auto& x : v) x = u(rng);
    return v;
  };
  o.a = fill(a_rows * g.lda);
  o.b = fill(b_rows * g.ldb);
  o.c = fill(cs.m * g.ldc);
  if (cs.beta == 0.0f) std::fill(o.c.begin(), o.c.end(), std::numeric_limits<float>::quiet_NaN());
  return o;
}

// C after the GEMM, element for element over the stored m x ldc block: the padding columns keep
// their input value; the others are alpha * sum_l op(A)[i, l] op(B)[l, j] (+ beta * C if beta !=
// 0).
inline std::vector<double> reference(const Operands& o) {
  const GemmArgs& g = o.g;
  std::vector<double> c(o.c.begin(), o.c.end());
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0.0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double av = g.trans_a == Trans::N ? o.a[i * g.lda + l] : o.a[l * g.lda + i];
        const double bv = g.trans_b == Trans::N ? o.b[l * g.ldb + j] : o.b[j * g.ldb + l];
        sum += av * bv;
      }
      double& cij = c[static_cast<size_t>(i * g.ldc + j)];
      cij = g.alpha * sum + (g.beta == 0.0f ? 0.0 : g.beta * cij);
    }
  return c;
}

// Allowed |got - reference|: an f32 sum of k products of values in [-1, 1) spreads by about
// sqrt(k) ulps of 2^-24 relative; 4e-5 * sqrt(k) leaves a wide margin for blocked summation
// orders (OpenBLAS kernels, cuBLAS split-k), scaled by |alpha|, plus the rounding of beta * C.
inline double tolerance(const Case& cs) {
  constexpr double kPerSqrtK = 4e-5, kFloor = 1e-6;
  return kPerSqrtK * std::sqrt(static_cast<double>(std::max<int64_t>(cs.k, 1))) *
             std::max(1.0, std::abs(static_cast<double>(cs.alpha))) +
         kFloor * (1.0 + std::abs(static_cast<double>(cs.beta)));
}

// Number of elements of `got` (m x ldc) off the reference: NaN anywhere in the written block is a
// mismatch; the padding must be bit-for-bit unchanged (NaN stays NaN). tol_scale widens the
// tolerance (2 when both sides are GEMMs that may each be off by it).
inline int64_t mismatches(const Case& cs, const Operands& o, const std::vector<float>& got,
                          const std::vector<double>& want, std::string* first,
                          double tol_scale = 1.0) {
  int64_t bad = 0;
  for (int64_t i = 0; i < o.g.m; ++i)
    for (int64_t j = 0; j < o.g.ldc; ++j) {
      const size_t at = static_cast<size_t>(i * o.g.ldc + j);
      const bool ok = j >= o.g.n ? (std::isnan(got[at]) ? std::isnan(o.c[at]) : got[at] == o.c[at])
                                 : std::abs(got[at] - want[at]) <= tol_scale * tolerance(cs);
      if (!ok && bad++ == 0 && first)
        *first = "C[" + std::to_string(i) + "," + std::to_string(j) +
                 "] = " + std::to_string(got[at]) + ", reference " + std::to_string(want[at]);
    }
  return bad;
}

// Calls fn(case, operands, reference) for every edge case and transpose pair, under a
// SCOPED_TRACE that names them (the CPU and CUDA tests walk the same cases).
template <typename Fn>
void for_each_case(Fn&& fn) {
  uint64_t seed = 100;
  for (const Case& cs : edge_cases())
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T}) {
        SCOPED_TRACE(::testing::Message()
                     << cs.m << "x" << cs.n << "x" << cs.k << " pad " << cs.pad << " ta "
                     << (ta == Trans::T) << " tb " << (tb == Trans::T) << " alpha " << cs.alpha
                     << " beta " << cs.beta);
        const Operands o = make_operands(cs, ta, tb, ++seed);
        fn(cs, o, reference(o));
      }
}

}  // namespace tg::gemm_testing
