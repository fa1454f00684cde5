// Max and average pooling on the CPU, NCHW. One (n, c) plane per OpenMP iteration. Mirrors
// pool2d_cuda.cu: same window clipping, same comparison (strict >, so the first maximum in
// row-major window order wins), same summation order.
//
// Max forward is separable: for every input row ih, a row pass takes the maximum over each
// output column's kw cells (strict >, so the leftmost maximum of the row wins); a column pass
// then takes, for each output row, the maximum of those row maxima over its kh rows (strict >
// again, so the topmost row wins). "Topmost row, then leftmost cell in it" is exactly the first
// maximum in row-major window order, so argmax matches the naive loop bit for bit (for finite
// inputs; a NaN may be handled differently). Interior columns (window fully inside the image) run
// a branch-free loop specialised for the common window/stride pairs, which the compiler
// vectorises over q; only the clipped edge columns take the generic path.
// Napkin math, CifarNet pool1 ([128, 64, 24, 24] 3x3/2 -> 12x12): 19 MB read, 1.2 M outputs
// (y + argmax 9 MB written): ~2 ms at memory speed on one core.
#include <algorithm>
#include <cstring>
#include <vector>

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

// Output columns [lo, hi) whose window lies entirely inside [0, W); clamped so lo <= hi.
struct Interior {
  int64_t lo, hi;
};
inline Interior interior_columns(const Pool2dShape& s) {
  // q*sw - pad_left >= 0  and  q*sw - pad_left + kw <= W.
  const int64_t lo = std::min((s.pad_left + s.sw - 1) / s.sw, s.q);
  const int64_t room = s.w - s.kw + s.pad_left;
  const int64_t hi = room < 0 ? 0 : std::min(room / s.sw + 1, s.q);
  return {lo, std::max(lo, hi)};
}

// The clipped window of output column q over input row ih: *rm = its maximum, *ri = the plane
// offset ih * W + iw of the leftmost maximum; -1 (and 0) if the window has no column in the image.
inline void edge_max(const Pool2dShape& s, int64_t ih, int64_t q, const float* xp, float* rm,
                     int32_t* ri) {
  const int64_t ws = q * s.sw - s.pad_left;
  const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(ws + s.kw, s.w);
  const float* xr = xp + ih * s.w;
  if (w0 >= w1) {
    *rm = 0.0f;
    *ri = -1;
    return;
  }
  float b = xr[w0];
  int64_t bi = w0;
  for (int64_t iw = w0 + 1; iw < w1; ++iw) {  // branch-free: random data defeats prediction
    const bool gt = xr[iw] > b;
    b = gt ? xr[iw] : b;
    bi = gt ? iw : bi;
  }
  *rm = b;
  *ri = static_cast<int32_t>(ih * s.w + bi);
}

// Unclipped window maxima of `count` consecutive outputs j over the plane xp: cells
// xp[first + j*sw + t], t < kw; ri = the plane offset of the leftmost maximum. Branch-free, so
// the compiler vectorises it over j when KW/SW are compile-time constants (0: read them from s).
template <int KW, int SW>
inline void run_max(const Pool2dShape& s, const float* __restrict xp, int64_t first, int64_t count,
                    float* __restrict rm, int32_t* __restrict ri) {
  const int64_t kw = KW > 0 ? KW : s.kw, sw = SW > 0 ? SW : s.sw;
  const float* __restrict x = xp + first;
  for (int64_t j = 0; j < count; ++j) {
    const float* c = x + j * sw;
    float b = c[0];
    int32_t bi = 0;
#pragma GCC unroll 8
    for (int64_t t = 1; t < kw; ++t) {
      // Written as a mask blend rather than `gt ? c[t] : b`, which GCC turns into a branch.
      const int32_t gt = -static_cast<int32_t>(c[t] > b);
      b = std::max(b, c[t]);  // == (c[t] > b ? c[t] : b) for non-NaN inputs
      bi = (bi & ~gt) | (static_cast<int32_t>(t) & gt);
    }
    rm[j] = b;
    ri[j] = static_cast<int32_t>(first + j * sw) + bi;
  }
}

// One plane: row pass into (rm, ri) [H, Q], then the column pass into y/argmax [P, Q]. ri and
// argmax hold plane offsets ih * W + iw.
template <int KW, int SW>
void max_pool_plane(const Pool2dShape& s, const Interior& in, const float* __restrict xp,
                    float* __restrict yp, int32_t* __restrict ap, float* __restrict rm,
                    int32_t* __restrict ri) {
  const int64_t Q = s.q, W = s.w, H = s.h, sw = SW > 0 ? SW : s.sw;
  const int64_t start = in.lo * sw - s.pad_left;  // first cell of the first interior window
  if (W == sw * Q && in.hi > in.lo) {
    // Row ih + 1's windows continue row ih's at the same stride, so the interior columns of all
    // rows are one run (it also computes the clipped columns between them, wrongly: windows
    // that straddle two rows; those are redone per row below).
    run_max<KW, SW>(s, xp, start, (H - 1) * Q + in.hi - in.lo, rm + in.lo, ri + in.lo);
  } else {
    for (int64_t ih = 0; ih < H; ++ih)
      run_max<KW, SW>(s, xp, ih * W + start, in.hi - in.lo, rm + ih * Q + in.lo,
                      ri + ih * Q + in.lo);
  }
  for (int64_t ih = 0; ih < H; ++ih) {
    for (int64_t q = 0; q < in.lo; ++q) edge_max(s, ih, q, xp, rm + ih * Q + q, ri + ih * Q + q);
    for (int64_t q = in.hi; q < Q; ++q) edge_max(s, ih, q, xp, rm + ih * Q + q, ri + ih * Q + q);
  }
  for (int64_t p = 0; p < s.p; ++p) {
    const int64_t hs = p * s.sh - s.pad_top;
    const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + s.kh, H);
    float* __restrict y = yp + p * Q;
    int32_t* __restrict a = ap + p * Q;
    if (h0 >= h1) {  // window entirely in the padding rows
      for (int64_t q = 0; q < Q; ++q) {
        y[q] = 0.0f;
        a[q] = -1;
      }
      continue;
    }
    const float* r0 = rm + h0 * Q;
    const int32_t* i0 = ri + h0 * Q;
    for (int64_t q = 0; q < Q; ++q) {
      y[q] = r0[q];
      a[q] = i0[q];
    }
    // A column with no cell in the image has rm = 0 and ri = -1 in every row: 0 > 0 keeps -1.
    for (int64_t h = h0 + 1; h < h1; ++h) {
      const float* rh = rm + h * Q;
      const int32_t* ih = ri + h * Q;
      for (int64_t q = 0; q < Q; ++q) {  // mask blends, as in run_max
        const int32_t gt = -static_cast<int32_t>(rh[q] > y[q]);
        y[q] = std::max(y[q], rh[q]);
        a[q] = (a[q] & ~gt) | (ih[q] & gt);
      }
    }
  }
}

template <int KW, int SW>
void max_pool_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t planes = s.n * s.c, hw = s.h * s.w, pq = s.p * s.q;
  const Interior in = interior_columns(s);
#pragma omp parallel if (planes * pq > (1 << 14))
  {
    std::vector<float> rm(s.h * s.q);
    std::vector<int32_t> ri(s.h * s.q);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < planes; ++nc) {
      max_pool_plane<KW, SW>(s, in, x + nc * hw, y + nc * pq, argmax + nc * pq, rm.data(),
                             ri.data());
    }
  }
}

}  // namespace

void max_pool2d_forward_cpu(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  if (s.kw == 3 && s.sw == 2) return max_pool_forward<3, 2>(s, x, y, argmax);
  if (s.kw == 2 && s.sw == 2) return max_pool_forward<2, 2>(s, x, y, argmax);
  if (s.kw == 3 && s.sw == 1) return max_pool_forward<3, 1>(s, x, y, argmax);
  return max_pool_forward<0, 0>(s, x, y, argmax);
}

void max_pool2d_backward_cpu(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                             float* dx) {
  const int64_t planes = s.n * s.c, hw = s.h * s.w, pq = s.p * s.q;
  // Zero and scatter one plane at a time (still in cache for the scatter); race-free because
  // each plane belongs to one thread.
#pragma omp parallel for schedule(static) if (planes * pq > (1 << 14))
  for (int64_t nc = 0; nc < planes; ++nc) {
    float* dxp = dx + nc * hw;
    const float* dyp = dy + nc * pq;
    const int32_t* ap = argmax + nc * pq;
    std::memset(dxp, 0, hw * sizeof(float));
    for (int64_t o = 0; o < pq; ++o) {
      if (ap[o] >= 0) dxp[ap[o]] += dyp[o];
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
