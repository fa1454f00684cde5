// LRN forward and backward on the CPU; lrn_cuda.cu mirrors it (one CUDA thread = one pixel here).
//
// Layout: contiguous [N, C, HW]. Each job owns one image n and a run of up to kChunk pixels and
// walks the channels once, keeping a per-pixel running window sum in double: entering channel
// c + r is added, leaving channel c - r - 1 subtracted, so the cost is O(C) per pixel whatever r
// is. The inner loops run over contiguous pixels (vectorizable); double accumulation keeps the
// add/subtract window free of drift (x^2 of an f32 is exact in double).
#include <algorithm>
#include <cmath>

#include "nn/ops/lrn_kernels.h"

namespace tg {

namespace {

constexpr int64_t kChunk = 256;  // pixels per job: 2 KiB of double accumulators

}  // namespace

void lrn_forward_cpu(const LrnShape& s, const float* x, float* y, float* norm) {
  const int64_t C = s.c, HW = s.hw, r = s.radius;
  const int64_t chunks = (HW + kChunk - 1) / kChunk;
  const int64_t prime = std::min(r, C);  // channels [0, r) enter before the first output
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t job = 0; job < s.n * chunks; ++job) {
    const int64_t b = job / chunks, p0 = (job % chunks) * kChunk;
    const int64_t len = std::min(kChunk, HW - p0);
    const int64_t base = b * C * HW + p0;
    double acc[kChunk];
    for (int64_t p = 0; p < len; ++p) acc[p] = 0.0;
    for (int64_t c = 0; c < prime; ++c) {
      const float* xc = x + base + c * HW;
      for (int64_t p = 0; p < len; ++p) acc[p] += static_cast<double>(xc[p]) * xc[p];
    }
    for (int64_t c = 0; c < C; ++c) {
      if (c + r < C) {
        const float* xa = x + base + (c + r) * HW;
        for (int64_t p = 0; p < len; ++p) acc[p] += static_cast<double>(xa[p]) * xa[p];
      }
      if (c - r - 1 >= 0) {
        const float* xs = x + base + (c - r - 1) * HW;
        for (int64_t p = 0; p < len; ++p) acc[p] -= static_cast<double>(xs[p]) * xs[p];
      }
      const float* xc = x + base + c * HW;
      float* yc = y + base + c * HW;
      float* nc = norm + base + c * HW;
      for (int64_t p = 0; p < len; ++p) {
        // max(0, .): the subtracted window may leave a tiny negative residue.
        const float n = static_cast<float>(static_cast<double>(s.bias) +
                                           static_cast<double>(s.alpha) * std::max(acc[p], 0.0));
        nc[p] = n;
        yc[p] = xc[p] * std::pow(n, -s.beta);
      }
    }
  }
}

void lrn_backward_cpu(const LrnShape& s, const float* x, const float* y, const float* norm,
                      const float* dy, float* dx) {
  const int64_t C = s.c, HW = s.hw, r = s.radius;
  const int64_t chunks = (HW + kChunk - 1) / kChunk;
  const int64_t prime = std::min(r, C);
  const double k = 2.0 * static_cast<double>(s.alpha) * static_cast<double>(s.beta);
  // t[i] = dy[i] * x[i] * norm[i]^(-beta-1) = dy[i] * y[i] / norm[i]; the window sums t.
  auto t = [&](int64_t i) { return static_cast<double>(dy[i] * y[i] / norm[i]); };
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t job = 0; job < s.n * chunks; ++job) {
    const int64_t b = job / chunks, p0 = (job % chunks) * kChunk;
    const int64_t len = std::min(kChunk, HW - p0);
    const int64_t base = b * C * HW + p0;
    double acc[kChunk];
    for (int64_t p = 0; p < len; ++p) acc[p] = 0.0;
    for (int64_t c = 0; c < prime; ++c) {
      for (int64_t p = 0; p < len; ++p) acc[p] += t(base + c * HW + p);
    }
    for (int64_t c = 0; c < C; ++c) {
      if (c + r < C) {
        for (int64_t p = 0; p < len; ++p) acc[p] += t(base + (c + r) * HW + p);
      }
      if (c - r - 1 >= 0) {
        for (int64_t p = 0; p < len; ++p) acc[p] -= t(base + (c - r - 1) * HW + p);
      }
      for (int64_t p = 0; p < len; ++p) {
        const int64_t i = base + c * HW + p;
        const double direct = static_cast<double>(dy[i]) * std::pow(norm[i], -s.beta);
        dx[i] = static_cast<float>(direct - k * static_cast<double>(x[i]) * acc[p]);
      }
    }
  }
}

}  // namespace tg
