// LRN forward and backward on the CPU; lrn_cuda.cu mirrors it (one CUDA thread = one pixel here).
//
// Layout: contiguous [N, C, HW]. Each job owns one image n and a run of up to kChunk pixels and
// walks the channels once, keeping a per-pixel running window sum in double: entering channel
// c + r is added, leaving channel c - r - 1 subtracted, so the cost is O(C) per pixel whatever r
// is. The inner loops run over contiguous pixels (vectorizable); double accumulation keeps the
// add/subtract window free of drift (x^2 of an f32 is exact in double).
//
// norm^(-beta) is the expensive part of both passes (a libm pow per element does not
// vectorise): the networks' beta = 0.75 is computed as 1 / (sqrt(n) * sqrt(sqrt(n))) and
// beta = 0.5 as 1 / sqrt(n), both vectorised and within a few ulps of pow; other betas use powf.
// The backward pass keeps each channel's t = dy * y / norm in a ring of 2r + 2 channel rows,
// so every t is computed (one division) once, not once on entering and once on leaving.
// Napkin math, CifarNet lrn ([128, 64, 12, 12], r = 4): 1.2 M elements, ~5 MB in, ~10 MB out.
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "nn/ops/lrn_kernels.h"

namespace tg {

namespace {

constexpr int64_t kChunk = 256;  // pixels per job: 2 KiB of double accumulators

enum class PowMode { three_quarters, half, generic };

PowMode pow_mode(float beta) {
  if (beta == 0.75f) return PowMode::three_quarters;
  if (beta == 0.5f) return PowMode::half;
  return PowMode::generic;
}

// out[p] = n[p]^(-beta) for n > 0, p < len. The sqrt forms are written with AVX intrinsics where
// available: std::sqrt keeps a scalar errno branch (GCC without -fno-math-errno) that stops
// the loop from vectorising.
template <PowMode M>
inline void inv_pow(const float* __restrict n, int64_t len, float beta, float* __restrict out) {
  int64_t p = 0;
#if defined(__AVX__)
  if constexpr (M != PowMode::generic) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; p + 8 <= len; p += 8) {
      const __m256 r = _mm256_sqrt_ps(_mm256_loadu_ps(n + p));
      const __m256 d = M == PowMode::three_quarters ? _mm256_mul_ps(r, _mm256_sqrt_ps(r)) : r;
      _mm256_storeu_ps(out + p, _mm256_div_ps(one, d));
    }
  }
#endif
  for (; p < len; ++p) {
    if constexpr (M == PowMode::three_quarters) {
      const float r = std::sqrt(n[p]);
      out[p] = 1.0f / (r * std::sqrt(r));
    } else if constexpr (M == PowMode::half) {
      out[p] = 1.0f / std::sqrt(n[p]);
    } else {
      out[p] = std::pow(n[p], -beta);
    }
  }
}

template <PowMode M>
void forward(const LrnShape& s, const float* x, float* y, float* norm) {
  const int64_t C = s.c, HW = s.hw, r = s.radius;
  const int64_t chunks = (HW + kChunk - 1) / kChunk;
  const int64_t prime = std::min(r, C);  // channels [0, r) enter before the first output
  const double bias = s.bias, alpha = s.alpha;
  const float beta = s.beta;
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t job = 0; job < s.n * chunks; ++job) {
    const int64_t b = job / chunks, p0 = (job % chunks) * kChunk;
    const int64_t len = std::min(kChunk, HW - p0);
    const int64_t base = b * C * HW + p0;
    double acc[kChunk];
    float scale[kChunk];
    for (int64_t p = 0; p < len; ++p) acc[p] = 0.0;
    for (int64_t c = 0; c < prime; ++c) {
      const float* xc = x + base + c * HW;
      for (int64_t p = 0; p < len; ++p) acc[p] += static_cast<double>(xc[p]) * xc[p];
    }
    for (int64_t c = 0; c < C; ++c) {
      if (c + r < C) {
        const float* __restrict xa = x + base + (c + r) * HW;
        for (int64_t p = 0; p < len; ++p) acc[p] += static_cast<double>(xa[p]) * xa[p];
      }
      if (c - r - 1 >= 0) {
        const float* __restrict xs = x + base + (c - r - 1) * HW;
        for (int64_t p = 0; p < len; ++p) acc[p] -= static_cast<double>(xs[p]) * xs[p];
      }
      const float* __restrict xc = x + base + c * HW;
      float* __restrict yc = y + base + c * HW;
      float* __restrict nc = norm + base + c * HW;
      for (int64_t p = 0; p < len; ++p) {
        // max(0, .): the subtracted window may leave a tiny negative residue.
        nc[p] = static_cast<float>(bias + alpha * std::max(acc[p], 0.0));
      }
      inv_pow<M>(nc, len, beta, scale);
      for (int64_t p = 0; p < len; ++p) yc[p] = xc[p] * scale[p];
    }
  }
}

template <PowMode M>
void backward(const LrnShape& s, const float* x, const float* y, const float* norm, const float* dy,
              float* dx) {
  const int64_t C = s.c, HW = s.hw, r = s.radius;
  const int64_t chunks = (HW + kChunk - 1) / kChunk;
  const int64_t prime = std::min(r, C);
  const int64_t ring = 2 * r + 2;  // channels c - r - 1 .. c + r are live at once
  const double k = 2.0 * static_cast<double>(s.alpha) * static_cast<double>(s.beta);
  const float beta = s.beta;
#pragma omp parallel if (s.n * C * HW > (1 << 16))
  {
    // t[i] = dy[i] * x[i] * norm[i]^(-beta-1) = dy[i] * y[i] / norm[i]; the window sums t.
    std::vector<double> tbuf(static_cast<size_t>(std::min(ring, C) * kChunk));
    const int64_t slots = std::min(ring, C);
#pragma omp for schedule(static)
    for (int64_t job = 0; job < s.n * chunks; ++job) {
      const int64_t b = job / chunks, p0 = (job % chunks) * kChunk;
      const int64_t len = std::min(kChunk, HW - p0);
      const int64_t base = b * C * HW + p0;
      // Computes channel c's t into its ring slot and adds it to acc.
      auto enter = [&](int64_t c, double* __restrict acc) {
        const int64_t i0 = base + c * HW;
        double* __restrict t = tbuf.data() + (c % slots) * kChunk;
        const float* __restrict dyc = dy + i0;
        const float* __restrict yc = y + i0;
        const float* __restrict nc = norm + i0;
        for (int64_t p = 0; p < len; ++p) {
          t[p] = static_cast<double>(dyc[p] * yc[p] / nc[p]);
          acc[p] += t[p];
        }
      };
      double acc[kChunk];
      float scale[kChunk];
      for (int64_t p = 0; p < len; ++p) acc[p] = 0.0;
      for (int64_t c = 0; c < prime; ++c) enter(c, acc);
      for (int64_t c = 0; c < C; ++c) {
        if (c + r < C) enter(c + r, acc);
        if (c - r - 1 >= 0) {
          const double* __restrict t = tbuf.data() + ((c - r - 1) % slots) * kChunk;
          for (int64_t p = 0; p < len; ++p) acc[p] -= t[p];
        }
        const int64_t i0 = base + c * HW;
        const float* __restrict dyc = dy + i0;
        const float* __restrict xc = x + i0;
        const float* __restrict nc = norm + i0;
        float* __restrict dxc = dx + i0;
        inv_pow<M>(nc, len, beta, scale);
        for (int64_t p = 0; p < len; ++p) {
          const double direct = static_cast<double>(dyc[p]) * scale[p];
          dxc[p] = static_cast<float>(direct - k * static_cast<double>(xc[p]) * acc[p]);
        }
      }
    }
  }
}

}  // namespace

void lrn_forward_cpu(const LrnShape& s, const float* x, float* y, float* norm) {
  switch (pow_mode(s.beta)) {
    case PowMode::three_quarters:
      return forward<PowMode::three_quarters>(s, x, y, norm);
    case PowMode::half:
      return forward<PowMode::half>(s, x, y, norm);
    case PowMode::generic:
      return forward<PowMode::generic>(s, x, y, norm);
  }
}

void lrn_backward_cpu(const LrnShape& s, const float* x, const float* y, const float* norm,
                      const float* dy, float* dx) {
  switch (pow_mode(s.beta)) {
    case PowMode::three_quarters:
      return backward<PowMode::three_quarters>(s, x, y, norm, dy, dx);
    case PowMode::half:
      return backward<PowMode::half>(s, x, y, norm, dy, dx);
    case PowMode::generic:
      return backward<PowMode::generic>(s, x, y, norm, dy, dx);
  }
}

}  // namespace tg
