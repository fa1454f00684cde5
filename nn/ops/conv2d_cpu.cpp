// conv2d on the CPU: im2col + OpenBLAS GEMM over chunks of nb images (see conv2d_kernels.h).
//
//   forward:         stage[K, nb*PQ] = W_g[Kg, CgRS] * col_g[CgRS, nb*PQ]  -> scatter to y (+bias)
//   backward data:   col_g = W_g^T * dY_g (dY gathered into stage)         -> col2im into dx
//   backward weight: dW_g (+)= dY_g * col_g^T over the chunks; dbias = sum over n, p, q of dy
//
// At stride 1 with Q == W (SAME, the common case) im2col and col2im read / accumulate each col
// row as ONE masked, vectorizable pass over a zero-guarded copy of the input plane (see
// im2col_shift). Otherwise im2col works row by row (one (c, r, s) per row, rows split across
// OpenMP threads): for each image and output row p the valid q form one contiguous run
// (memcpy), padded borders are zeroed; the valid p/q ranges are computed once per row, so the
// inner loops have no division and no bounds test. col2im splits (channel, image block) pairs
// across threads; each dx plane has one owner.
//
// Two schedules. With at least 2 small tasks per thread (training batches), the task path
// (forward_tasks etc., below) gives each thread whole chunks of a few images: serial im2col,
// single-threaded GEMM, serial scatter/col2im, all in that core's cache; dW is reduced from
// per-thread partials. Otherwise (a batch of 1-3 images) one chunk at a time with every step
// split across the threads (parallel im2col, multi-threaded GEMM), as described above.
// Napkin math, LeNet conv2 (N=64, C=20, K=50, 5x5, 14x14): each pass is a 0.63 GFLOP GEMM
// (~4 ms at ~160 GFLOP/s on 2 cores) plus 25 MB of col written or read (~0.5-1.5 ms).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include <omp.h>

#include "nn/core/blas.h"
#include "nn/core/error.h"
#include "nn/ops/conv2d_kernels.h"

namespace tg {

namespace {

// Chunk policy. ~8 MB of col + stage keeps a chunk in the last-level cache between im2col and
// the GEMM (LeNet conv2, 2 EPYC cores, OMP_WAIT_POLICY=passive: fwd+bwd 16-18 ms at 8 MB
// chunks vs 22-24 ms for the whole 27 MB batch in one chunk). But a GEMM needs enough columns
// to run near peak (and a GPU far more), so a chunk grows to at least kMinColumns output
// pixels, up to the hard 64 MB cap.
constexpr int64_t kDefaultBudgetFloats = int64_t{2} << 20;
constexpr int64_t kMinColumns = 4096;
constexpr int64_t kMaxFloats = int64_t{16} << 20;
std::atomic<int64_t> g_budget_override{0};

// Output positions o in [lo, hi) whose input coordinate o*stride - off lies in [0, in).
struct Range {
  int64_t lo, hi;
};
inline Range valid_range(int64_t out, int64_t stride, int64_t off, int64_t in) {
  int64_t lo = off <= 0 ? 0 : (off + stride - 1) / stride;
  int64_t hi = in - 1 + off < 0 ? 0 : (in - 1 + off) / stride + 1;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

// Stride 1 in both dimensions and Q == W (SAME at stride 1, the common case): col row p and
// input row p + r - pt are both Q floats long, so a col row is the input plane read at one flat
// offset, except for the padding and the entries that wrap around the left/right borders.
inline bool contiguous_rows(const Conv2dShape& s) {
  return s.stride_h == 1 && s.stride_w == 1 && s.Q == s.W;
}

// ---- Shifted-plane im2col / col2im (stride 1, Q == W) -----------------------------------------
// Then col row (c, r, s) of image i is the input plane read at the flat offset
// off = (r - pt)*W + (s - pl): col[j] = x_plane[j + off] for j < P*Q, except where the read
// falls outside the plane (padding) or wraps across a row border (q + s - pl outside [0, W)).
// With the plane copied into a zero-guarded buffer [lo zeros | H*W plane | hi zeros], the first
// case reads guard zeros, and a per-s column mask zeroes the second; each col row is then ONE
// vectorizable pass of P*Q floats, with no short memset/memcpy calls (CifarNet conv2: 1600 rows
// of 144 floats per image).
struct ShiftPlan {
  int64_t lo = 0, hi = 0;   // guard floats before / after the plane
  std::vector<float> mask;  // [S, P*Q]: 1 where column q + s - pl lies in [0, W), else 0
};

// The plan for s, cached per thread (the task path calls im2col once per task).
const ShiftPlan& shift_plan(const Conv2dShape& s) {
  thread_local ShiftPlan sp;
  thread_local int64_t key[8] = {-1};
  const int64_t k[8] = {s.H, s.W, s.P, s.Q, s.R, s.S, s.pad_top, s.pad_left};
  if (std::equal(k, k + 8, key)) return sp;
  std::copy(k, k + 8, key);
  const int64_t PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t min_off = -s.pad_top * s.W - s.pad_left;
  const int64_t max_off = (s.R - 1 - s.pad_top) * s.W + (s.S - 1 - s.pad_left);
  sp.lo = std::max<int64_t>(0, -min_off);
  sp.hi = std::max<int64_t>(0, PQ + max_off - HW);
  sp.mask.assign(static_cast<size_t>(s.S * PQ), 0.0f);
  for (int64_t sc = 0; sc < s.S; ++sc)
    for (int64_t j = 0; j < PQ; ++j) {
      const int64_t w = j % s.Q + sc - s.pad_left;
      sp.mask[static_cast<size_t>(sc * PQ + j)] = (w >= 0 && w < s.W) ? 1.0f : 0.0f;
    }
  return sp;
}

// This thread's guard buffer of at least `floats` floats.
float* guard_scratch(int64_t floats) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < floats) buf.resize(static_cast<size_t>(floats));
  return buf.data();
}

void im2col_shift(const Conv2dShape& s, const float* x, int64_t n0, int64_t nb, int64_t c0,
                  float* col, bool par) {
  const ShiftPlan& sp = shift_plan(s);
  const int64_t Cg = s.C / s.groups, RS = s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, span = sp.lo + HW + sp.hi;
  const float* mask = sp.mask.data();
#pragma omp parallel if (par)
  {
    float* g = guard_scratch(span);
    std::memset(g, 0, sizeof(float) * sp.lo);
    std::memset(g + sp.lo + HW, 0, sizeof(float) * sp.hi);
#pragma omp for schedule(static)
    for (int64_t ci = 0; ci < Cg * nb; ++ci) {
      const int64_t c = ci / nb, i = ci % nb;
      std::memcpy(g + sp.lo, x + ((n0 + i) * s.C + c0 + c) * HW, sizeof(float) * HW);
      for (int64_t r = 0; r < s.R; ++r)
        for (int64_t sc = 0; sc < s.S; ++sc) {
          const float* src = g + sp.lo + (r - s.pad_top) * s.W + sc - s.pad_left;
          const float* m = mask + sc * PQ;
          float* dst = col + (c * RS + r * s.S + sc) * ld + i * PQ;
          for (int64_t j = 0; j < PQ; ++j) dst[j] = m[j] != 0.0f ? src[j] : 0.0f;
        }
    }
  }
}

void col2im_shift(const Conv2dShape& s, const float* col, int64_t n0, int64_t nb, int64_t c0,
                  float* dx, bool par) {
  const ShiftPlan& sp = shift_plan(s);
  const int64_t Cg = s.C / s.groups, RS = s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, span = sp.lo + HW + sp.hi;
  const float* mask = sp.mask.data();
#pragma omp parallel if (par)
  {
    float* g = guard_scratch(span);
#pragma omp for schedule(static)
    for (int64_t ci = 0; ci < Cg * nb; ++ci) {
      const int64_t c = ci / nb, i = ci % nb;
      std::memset(g, 0, sizeof(float) * span);
      for (int64_t r = 0; r < s.R; ++r)
        for (int64_t sc = 0; sc < s.S; ++sc) {
          float* dst = g + sp.lo + (r - s.pad_top) * s.W + sc - s.pad_left;
          const float* m = mask + sc * PQ;
          const float* src = col + (c * RS + r * s.S + sc) * ld + i * PQ;
          for (int64_t j = 0; j < PQ; ++j) dst[j] += m[j] != 0.0f ? src[j] : 0.0f;
        }
      std::memcpy(dx + ((n0 + i) * s.C + c0 + c) * HW, g + sp.lo, sizeof(float) * HW);
    }
  }
}

// col[(c*R + r)*S + s][i*PQ + p*Q + q] = x[n0 + i, c0 + c, p*sh - pt + r, q*sw - pl + s] (0 in
// the padding), for c < Cg, i < nb.
void im2col(const Conv2dShape& s, const float* x, int64_t n0, int64_t nb, int64_t c0, float* col,
            bool par = true) {
  if (contiguous_rows(s)) return im2col_shift(s, x, n0, nb, c0, col, par);
  const int64_t Cg = s.C / s.groups, RS = s.R * s.S, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, rows = Cg * RS, P = s.P, Q = s.Q, sw = s.stride_w;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t c = row / RS, r = (row / s.S) % s.R, sc = row % s.S;
    const Range pr = valid_range(P, s.stride_h, s.pad_top - r, s.H);
    const Range qr = valid_range(Q, sw, s.pad_left - sc, s.W);
    const int64_t run = qr.hi - qr.lo;
    const bool empty = pr.lo == pr.hi || run == 0;
    for (int64_t i = 0; i < nb; ++i) {
      const float* src = x + ((n0 + i) * s.C + c0 + c) * HW;
      float* dst = col + row * ld + i * PQ;
      if (empty) {
        std::memset(dst, 0, sizeof(float) * PQ);
        continue;
      }
      std::memset(dst, 0, sizeof(float) * pr.lo * Q);
      std::memset(dst + pr.hi * Q, 0, sizeof(float) * (P - pr.hi) * Q);
      for (int64_t p = pr.lo; p < pr.hi; ++p) {
        float* d = dst + p * Q;
        const float* sp =
            src + (p * s.stride_h - s.pad_top + r) * s.W + qr.lo * sw - s.pad_left + sc;
        for (int64_t q = 0; q < qr.lo; ++q) d[q] = 0.0f;
        if (sw == 1) {
          std::memcpy(d + qr.lo, sp, sizeof(float) * run);
        } else {
          for (int64_t t = 0; t < run; ++t) d[qr.lo + t] = sp[t * sw];
        }
        for (int64_t q = qr.hi; q < Q; ++q) d[q] = 0.0f;
      }
    }
  }
}

// The adjoint of im2col: dx[n0 + i, c0 + c] = sum over the (r, s, p, q) that read each pixel,
// summed in (r, s) order. Overwrites the nb x Cg planes it owns. Work items are (channel, block
// of kImageBlock images): the block's dx planes stay in L1/L2 while each col row is streamed
// once, front to back.
constexpr int64_t kImageBlock = 8;
void col2im(const Conv2dShape& s, const float* col, int64_t n0, int64_t nb, int64_t c0, float* dx,
            bool par = true) {
  if (contiguous_rows(s)) return col2im_shift(s, col, n0, nb, c0, dx, par);
  const int64_t Cg = s.C / s.groups, PQ = s.P * s.Q, HW = s.H * s.W;
  const int64_t ld = nb * PQ, Q = s.Q, sw = s.stride_w;
  const int64_t blocks = (nb + kImageBlock - 1) / kImageBlock;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t cb = 0; cb < Cg * blocks; ++cb) {
    const int64_t c = cb / blocks, i0 = (cb % blocks) * kImageBlock;
    const int64_t i1 = std::min(i0 + kImageBlock, nb);
    for (int64_t i = i0; i < i1; ++i)
      std::memset(dx + ((n0 + i) * s.C + c0 + c) * HW, 0, sizeof(float) * HW);
    for (int64_t r = 0; r < s.R; ++r) {
      const Range pr = valid_range(s.P, s.stride_h, s.pad_top - r, s.H);
      for (int64_t sc = 0; sc < s.S; ++sc) {
        const Range qr = valid_range(Q, sw, s.pad_left - sc, s.W);
        const int64_t run = qr.hi - qr.lo;
        if (pr.lo == pr.hi || run == 0) continue;
        for (int64_t i = i0; i < i1; ++i) {
          float* dst = dx + ((n0 + i) * s.C + c0 + c) * HW;
          const float* src = col + ((c * s.R + r) * s.S + sc) * ld + i * PQ;
          for (int64_t p = pr.lo; p < pr.hi; ++p) {
            float* d = dst + (p * s.stride_h - s.pad_top + r) * s.W + qr.lo * sw - s.pad_left + sc;
            const float* sp = src + p * Q + qr.lo;
            if (sw == 1) {
              for (int64_t t = 0; t < run; ++t) d[t] += sp[t];
            } else {
              for (int64_t t = 0; t < run; ++t) d[t * sw] += sp[t];
            }
          }
        }
      }
    }
  }
}

// y[n0 + i, k, :] = stage[k, i*PQ : (i+1)*PQ] + bias[k]. If stage aliases y (nb == 1, the GEMM
// wrote y directly) only the bias is added.
void scatter_output(const Conv2dShape& s, const float* stage, const float* bias, int64_t n0,
                    int64_t nb, float* y, bool par = true) {
  const int64_t PQ = s.P * s.Q, ld = nb * PQ;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t ik = 0; ik < nb * s.K; ++ik) {
    const int64_t i = ik / s.K, k = ik % s.K;
    float* dst = y + ((n0 + i) * s.K + k) * PQ;
    const float* src = stage + k * ld + i * PQ;
    const float b = bias ? bias[k] : 0.0f;
    if (src == dst) {
      if (bias)
        for (int64_t j = 0; j < PQ; ++j) dst[j] += b;
    } else {
      for (int64_t j = 0; j < PQ; ++j) dst[j] = src[j] + b;
    }
  }
}

// stage[k, i*PQ + j] = dy[n0 + i, k, j]: the chunk's output gradient in GEMM order.
void gather_output(const Conv2dShape& s, const float* dy, int64_t n0, int64_t nb, float* stage,
                   bool par = true) {
  const int64_t PQ = s.P * s.Q, ld = nb * PQ;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t ik = 0; ik < nb * s.K; ++ik) {
    const int64_t i = ik / s.K, k = ik % s.K;
    std::memcpy(stage + k * ld + i * PQ, dy + ((n0 + i) * s.K + k) * PQ, sizeof(float) * PQ);
  }
}

// The chunk's output gradient as a [K, nb*PQ] matrix: dy itself for one image, else gathered.
const float* chunk_dy(const Conv2dShape& s, const float* dy, int64_t n0, int64_t nb, float* stage,
                      bool par = true) {
  if (nb == 1) return dy + n0 * s.K * s.P * s.Q;
  gather_output(s, dy, n0, nb, stage, par);
  return stage;
}

// ---- Task path: whole image chunks per thread ------------------------------------------------
// With enough images, each OpenMP thread takes its own small chunks of nbt images and runs
// im2col, single-threaded per-image GEMMs and the bias add / col2im for them (OpenBLAS's OpenMP
// build runs a GEMM called inside a parallel region on the calling thread). A task's col stays in
// that core's L2, there is no fork/join per im2col/GEMM/col2im step, and the small GEMMs keep
// ~the single-core sgemm rate (CifarNet conv2, 1 thread: fwd+bwd 119 ms at 4-image chunks vs
// 161 ms at the 29-image chunks the GEMM-parallel path needs to feed two cores). Each thread's
// scratch is its own, grown on first use and kept; the caller's workspace is not used.
// Sized as col + stage (1 MB) although the tasks need no stage: CifarNet conv2 1 image, conv1 3.
constexpr int64_t kTaskBudgetFloats = int64_t{1} << 18;

struct TaskPlan {
  int64_t nbt = 0, tasks = 0;  // nbt == 0: use the chunk path
};

// Fewer tasks than this balance badly: then one chunk at a time, all threads per step. A
// constant, not the thread count: which path runs (and so the bits of the result) must not
// depend on how many threads there are.
constexpr int64_t kMinTasks = 8;

TaskPlan task_plan(const Conv2dShape& s) {
  const int64_t PQ = s.P * s.Q, CRS = s.C / s.groups * s.R * s.S;
  const int64_t per_image = std::max<int64_t>((CRS + s.K) * PQ, 1);
  // Capped by the chunk size so that the test budget hook also shrinks the tasks.
  const int64_t nbt = std::clamp<int64_t>(kTaskBudgetFloats / per_image, 1, conv2d_chunk_images(s));
  const int64_t tasks = (s.N + nbt - 1) / nbt;
  if (tasks < kMinTasks) return {};
  return {nbt, tasks};
}

// This thread's scratch of at least `floats` floats (contents unspecified).
float* thread_scratch(int64_t floats) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < floats) buf.resize(static_cast<size_t>(floats));
  return buf.data();
}

// A GEMM on sub-blocks of larger row-major matrices (explicit leading dimensions).
GemmArgs strided_gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.beta = beta;
  g.c = c;
  g.ldc = ldc;
  return g;
}

// In the tasks every GEMM is per image, on that image's column block of col (leading dimension
// nbc*PQ) and on y / dy in place: no stage copy of the output or the output gradient (CifarNet
// conv1, 3-image tasks: the scatter and gather copies were ~15% of its time).
void forward_tasks(const Conv2dShape& s, const TaskPlan& t, const float* x, const float* w,
                   const float* bias, float* y) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
#pragma omp parallel
  {
    float* col = thread_scratch(t.nbt * CRS * PQ);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < t.tasks; ++task) {
      const int64_t n0 = task * t.nbt, nbc = std::min(t.nbt, s.N - n0), ld = nbc * PQ;
      for (int64_t g = 0; g < G; ++g) {
        im2col(s, x, n0, nbc, g * (s.C / G), col, false);
        for (int64_t i = 0; i < nbc; ++i)
          gemm_cpu_serial(strided_gemm(Trans::N, Trans::N, Kg, PQ, CRS, w + g * Kg * CRS, CRS,
                                       col + i * PQ, ld, 0.0f, y + ((n0 + i) * s.K + g * Kg) * PQ,
                                       PQ));
      }
      if (bias) {
        for (int64_t ik = 0; ik < nbc * s.K; ++ik) {
          float* dst = y + (n0 * s.K + ik) * PQ;
          const float b = bias[ik % s.K];
          for (int64_t j = 0; j < PQ; ++j) dst[j] += b;
        }
      }
    }
  }
}

void backward_data_tasks(const Conv2dShape& s, const TaskPlan& t, const float* dy, const float* w,
                         float* dx) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
#pragma omp parallel
  {
    float* col = thread_scratch(t.nbt * CRS * PQ);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < t.tasks; ++task) {
      const int64_t n0 = task * t.nbt, nbc = std::min(t.nbt, s.N - n0), ld = nbc * PQ;
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t i = 0; i < nbc; ++i)
          gemm_cpu_serial(strided_gemm(Trans::T, Trans::N, CRS, PQ, Kg, w + g * Kg * CRS, CRS,
                                       dy + ((n0 + i) * s.K + g * Kg) * PQ, PQ, 0.0f, col + i * PQ,
                                       ld));
        col2im(s, col, n0, nbc, g * (s.C / G), dx, false);
      }
    }
  }
}

// dw only: the tasks are cut into `slots` runs of consecutive tasks, a number chosen from the
// shape alone (at most kMaxSlots, at most kSlotBudgetFloats of partials, at most one run per
// task). Whichever thread takes a run accumulates it in task order into the run's own [K, CRS]
// partial, and dw = the partials summed in run order: the same bits for any thread count.
constexpr int64_t kMaxSlots = 16;
constexpr int64_t kSlotBudgetFloats = int64_t{1} << 22;  // 16 MiB of partials

void backward_weight_tasks(const Conv2dShape& s, const TaskPlan& t, const float* x, const float* dy,
                           float* dw) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t dw_numel = s.K * CRS;
  const int64_t slots =
      std::clamp<int64_t>(std::min(kMaxSlots, kSlotBudgetFloats / dw_numel), 1, t.tasks);
  thread_local std::vector<float> partial_buf;  // the caller's, grown on first use and kept
  if (static_cast<int64_t>(partial_buf.size()) < slots * dw_numel)
    partial_buf.resize(static_cast<size_t>(slots * dw_numel));
  float* partials = partial_buf.data();
#pragma omp parallel
  {
    float* col = thread_scratch(t.nbt * CRS * PQ);
#pragma omp for schedule(dynamic, 1)
    for (int64_t run = 0; run < slots; ++run) {
      float* part = partials + run * dw_numel;
      const int64_t first = run * t.tasks / slots, last = (run + 1) * t.tasks / slots;
      for (int64_t task = first; task < last; ++task) {
        const int64_t n0 = task * t.nbt, nbc = std::min(t.nbt, s.N - n0), ld = nbc * PQ;
        for (int64_t g = 0; g < G; ++g) {
          im2col(s, x, n0, nbc, g * (s.C / G), col, false);
          for (int64_t i = 0; i < nbc; ++i)
            gemm_cpu_serial(strided_gemm(
                Trans::N, Trans::T, Kg, CRS, PQ, dy + ((n0 + i) * s.K + g * Kg) * PQ, PQ,
                col + i * PQ, ld, task == first && i == 0 ? 0.0f : 1.0f, part + g * Kg * CRS, CRS));
        }
      }
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < dw_numel; ++i) {
      float acc = partials[i];
      for (int64_t run = 1; run < slots; ++run) acc += partials[run * dw_numel + i];
      dw[i] = acc;
    }
  }
}

}  // namespace

int64_t conv2d_chunk_images(const Conv2dShape& s) {
  const int64_t per_image = std::max<int64_t>((s.C / s.groups * s.R * s.S + s.K) * s.P * s.Q, 1);
  const int64_t most = std::max<int64_t>(s.N, 1);
  const int64_t override_floats = g_budget_override.load(std::memory_order_relaxed);
  if (override_floats > 0) return std::clamp<int64_t>(override_floats / per_image, 1, most);
  int64_t nb = kDefaultBudgetFloats / per_image;
  nb = std::max(nb, (kMinColumns + s.P * s.Q - 1) / std::max<int64_t>(s.P * s.Q, 1));
  nb = std::min(nb, kMaxFloats / per_image);
  return std::clamp<int64_t>(nb, 1, most);
}

int64_t conv2d_workspace_floats(const Conv2dShape& s) {
  return conv2d_chunk_images(s) * (s.C / s.groups * s.R * s.S + s.K) * s.P * s.Q;
}

bool conv2d_cpu_uses_workspace(const Conv2dShape& s) {
  return task_plan(s).nbt == 0;
}

void conv2d_set_workspace_budget_for_testing(int64_t floats) {
  g_budget_override.store(floats, std::memory_order_relaxed);
}

void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                        float* y, float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const TaskPlan t = task_plan(s);
  if (t.nbt > 0) return forward_tasks(s, t, x, w, bias, y);
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = workspace + nb * CRS * PQ;
  for (int64_t n0 = 0; n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    float* out = nbc == 1 ? y + n0 * s.K * PQ : stage;  // one image: [K, PQ] is y itself
    for (int64_t g = 0; g < G; ++g) {
      im2col(s, x, n0, nbc, g * (s.C / G), col);
      gemm_cpu(dense_gemm(Trans::N, Trans::N, Kg, ld, CRS, 1.0f, w + g * Kg * CRS, col, 0.0f,
                          out + g * Kg * ld));
    }
    scatter_output(s, out, bias, n0, nbc, y);
  }
}

void conv2d_backward_data_cpu(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                              float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const TaskPlan t = task_plan(s);
  if (t.nbt > 0) return backward_data_tasks(s, t, dy, w, dx);
  const int64_t nb = conv2d_chunk_images(s);
  float* col = workspace;
  float* stage = workspace + nb * CRS * PQ;
  for (int64_t n0 = 0; n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    const float* g_out = chunk_dy(s, dy, n0, nbc, stage);
    for (int64_t g = 0; g < G; ++g) {
      gemm_cpu(dense_gemm(Trans::T, Trans::N, CRS, ld, Kg, 1.0f, w + g * Kg * CRS,
                          g_out + g * Kg * ld, 0.0f, col));
      col2im(s, col, n0, nbc, g * (s.C / G), dx);
    }
  }
}

void conv2d_backward_weight_cpu(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                float* dbias, float* workspace) {
  const int64_t G = s.groups, Kg = s.K / G, CRS = s.C / G * s.R * s.S, PQ = s.P * s.Q;
  const int64_t nb = conv2d_chunk_images(s);
  if (dw && s.N == 0) {  // no chunk to overwrite dw
    std::memset(dw, 0, sizeof(float) * s.K * CRS);
  }
  const TaskPlan t = dw ? task_plan(s) : TaskPlan{};
  // The chunk path's scratch: none for dbias alone, nor on the task path (the caller allocates
  // none then, conv2d_cpu_uses_workspace).
  const bool chunks = dw && t.nbt == 0;
  float* col = chunks ? workspace : nullptr;
  float* stage = chunks ? workspace + nb * CRS * PQ : nullptr;
  if (t.nbt > 0) backward_weight_tasks(s, t, x, dy, dw);
  for (int64_t n0 = 0; dw && t.nbt == 0 && n0 < s.N; n0 += nb) {
    const int64_t nbc = std::min(nb, s.N - n0), ld = nbc * PQ;
    const float* g_out = chunk_dy(s, dy, n0, nbc, stage);
    const float beta = n0 == 0 ? 0.0f : 1.0f;  // the first chunk overwrites dw
    for (int64_t g = 0; g < G; ++g) {
      im2col(s, x, n0, nbc, g * (s.C / G), col);
      gemm_cpu(dense_gemm(Trans::N, Trans::T, Kg, CRS, ld, 1.0f, g_out + g * Kg * ld, col, beta,
                          dw + g * Kg * CRS));
    }
  }
  if (dbias) {
    // Each plane summed in kLanes interleaved float partials (a vectorizable loop: one serial
    // float sum runs at the add latency, ~1 ms for CifarNet conv1's 4.7M floats), planes in double.
    constexpr int64_t kLanes = 16;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < s.K; ++k) {
      double acc = 0.0;
      for (int64_t n = 0; n < s.N; ++n) {
        const float* src = dy + (n * s.K + k) * PQ;
        float lane[kLanes] = {};
        const int64_t body = PQ - PQ % kLanes;
        for (int64_t j = 0; j < body; j += kLanes)
          for (int64_t l = 0; l < kLanes; ++l) lane[l] += src[j + l];
        float part = 0.0f;
        for (int64_t j = body; j < PQ; ++j) part += src[j];
        for (int64_t l = 0; l < kLanes; ++l) part += lane[l];
        acc += part;
      }
      dbias[k] = static_cast<float>(acc);
    }
  }
}

}  // namespace tg
