// Max and average pooling on the CPU, NCHW. One (n, c) plane per OpenMP iteration; inside a plane
// outputs are visited in row-major (p, q) order. Mirrors pool2d_cuda.cu: same window clipping,
// same comparison (strict >, so the first maximum wins), same summation order.
#include <algorithm>
#include <cstring>

#include "nn/ops/pool2d_kernels.h"

namespace tg {

namespace {

struct Window {
  int64_t h0, h1, w0, w1;  // clipped to the image: rows [h0, h1), columns [w0, w1)
};

inline Window window_of(const Pool2dShape& s, int64_t p, int64_t q) {
  const int64_t hs = p * s.sh - s.pad_top, ws = q * s.sw - s.pad_left;
  return {std::max<int64_t>(hs, 0), std::min(hs + s.kh, s.h), std::max<int64_t>(ws, 0),
          std::min(ws + s.kw, s.w)};
}

// Outputs whose window covers input cell (ih, iw): rows [p0, p1), columns [q0, q1).
inline void covering(const Pool2dShape& s, int64_t ih, int64_t iw, int64_t& p0, int64_t& p1,
                     int64_t& q0, int64_t& q1) {
  // p covers ih iff p*sh - pad_top <= ih < p*sh - pad_top + kh.
  const int64_t a = ih + s.pad_top - s.kh + 1, b = iw + s.pad_left - s.kw + 1;
  p0 = a <= 0 ? 0 : (a + s.sh - 1) / s.sh;
  q0 = b <= 0 ? 0 : (b + s.sw - 1) / s.sw;
  p1 = std::min((ih + s.pad_top) / s.sh + 1, s.p);
  q1 = std::min((iw + s.pad_left) / s.sw + 1, s.q);
}

}  // namespace

void max_pool2d_forward_cpu(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t planes = s.n * s.c, hw = s.h * s.w, pq = s.p * s.q;
#pragma omp parallel for schedule(static) if (planes * pq > (1 << 14))
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x + nc * hw;
    for (int64_t p = 0; p < s.p; ++p) {
      for (int64_t q = 0; q < s.q; ++q) {
        const Window win = window_of(s, p, q);
        float best = 0.0f;
        int64_t best_i = -1;
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) {
            const int64_t i = ih * s.w + iw;
            if (best_i < 0 || xp[i] > best) {
              best = xp[i];
              best_i = i;
            }
          }
        }
        const int64_t o = nc * pq + p * s.q + q;
        y[o] = best;
        argmax[o] = static_cast<int32_t>(best_i);
      }
    }
  }
}

void max_pool2d_backward_cpu(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                             float* dx) {
  const int64_t planes = s.n * s.c, hw = s.h * s.w, pq = s.p * s.q;
  std::memset(dx, 0, planes * hw * sizeof(float));
  // Scatter within a plane: race-free because each plane belongs to one thread.
#pragma omp parallel for schedule(static) if (planes * pq > (1 << 14))
  for (int64_t nc = 0; nc < planes; ++nc) {
    float* dxp = dx + nc * hw;
    for (int64_t o = nc * pq; o < (nc + 1) * pq; ++o) {
      if (argmax[o] >= 0) dxp[argmax[o]] += dy[o];
    }
  }
}

void avg_pool2d_forward_cpu(const Pool2dShape& s, const float* x, float* y) {
  const int64_t planes = s.n * s.c, hw = s.h * s.w, pq = s.p * s.q;
#pragma omp parallel for schedule(static) if (planes * pq > (1 << 14))
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x + nc * hw;
    for (int64_t p = 0; p < s.p; ++p) {
      for (int64_t q = 0; q < s.q; ++q) {
        const Window win = window_of(s, p, q);
        float sum = 0.0f;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += xp[ih * s.w + iw];
        const int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
        y[nc * pq + p * s.q + q] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
      }
    }
  }
}

void avg_pool2d_backward_cpu(const Pool2dShape& s, const float* dy, float* dx) {
  const int64_t planes = s.n * s.c, hw = s.h * s.w, pq = s.p * s.q;
  // Gather (the same loop as the CUDA kernel): each input cell sums its covering outputs.
#pragma omp parallel for schedule(static) if (planes * hw > (1 << 14))
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* dyp = dy + nc * pq;
    for (int64_t ih = 0; ih < s.h; ++ih) {
      for (int64_t iw = 0; iw < s.w; ++iw) {
        int64_t p0, p1, q0, q1;
        covering(s, ih, iw, p0, p1, q0, q1);
        float sum = 0.0f;
        for (int64_t p = p0; p < p1; ++p) {
          for (int64_t q = q0; q < q1; ++q) {
            const Window win = window_of(s, p, q);
            const int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
            sum += dyp[p * s.q + q] / static_cast<float>(count);
          }
        }
        dx[nc * hw + ih * s.w + iw] = sum;
      }
    }
  }
}

}  // namespace tg
