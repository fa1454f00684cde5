// Implicit-GEMM convolution kernels, fp32 on CUDA cores and (cuda.tf32) TF32 on tensor cores,
// written once for nvcc and for the host emulation of nn/core/simt.h: conv2d_cuda.cu launches
// them on the GPU, the emulated test runs the same bodies on the CPU.
//
// Why our own kernels and not CUTLASS's: CUTLASS's convolutions take NHWC tensors and this
// engine is NCHW (as the paper's Caffe/TensorFlow models and the CPU path are), so CUTLASS would
// add two layout transposes per layer and pass; its templates also add minutes of nvcc time per
// instantiation on the 2-core CI machine. The GPU check's conv sweep (bench_conv2d --algos)
// times these kernels beside the im2col + cuBLAS path and PyTorch's cuDNN for every conv shape
// of the five nets; the default rule (conv2d_igemm_cuda.cu) follows its numbers.
//
// The three passes as one GEMM C[M x N] = A[M x Kd] * B[Kd x N] per group g, with A and B never
// stored: each tile element is read from x, w or dy where the im2col matrix would have had it
// (letters as in conv2d_kernels.h; Cg = C/G, Kg = K/G, RS = R*S, PQ = P*Q, HW = H*W):
//   forward      M = Kg  N = N*PQ   Kd = Cg*RS   A = w[g*Kg + m, kd]      B = im2col(x)[kd, n]
//   backward x   M = Cg  N = N*HW   Kd = Kg*RS   A = w[g*Kg + k, m, r, s] B = dy read at the
//                (kd = (k, r, s))                 (p, q) with p*sh = h + pt - r, q*sw = w + pl - s,
//                                                 zero where no such output exists
//   backward w   M = Kg  N = Cg*RS  Kd = N*PQ    A = dy[img, g*Kg + m, pq] B = im2col(x)^T
// Tiles: a block computes a BM x BN tile of C, stepping Kd by BK through two shared-memory
// buffers (the next step's tile is loaded into registers while the current one is multiplied).
// In fp32 (Tiling) each of (BM/TM)*(BN/TN) threads owns TM x TN outputs and sums over kd in
// increasing kd with fmaf; in TF32 (MmaTiling) each warp owns WM x WN outputs in 16 x 8 MMA
// tiles. Either way a kernel's bits depend only on the shape and the tiling.
//
// The loads are where an implicit GEMM loses to a stored one: each element's address comes from
// (n, kd). So B's rows are walked by a cursor (CrsWalk: add and carry, no division per element),
// A's rows are one offset (the others a multiply away), a tile's columns past N carry an
// out-of-range coordinate instead of a flag register, offsets within an image and within w are
// 32-bit, and backward data with a stride gets a main loop of its own so the unit-stride one
// stays lean. Main-loop instructions per thread and BK step (sm_90 SASS, counted, not timed),
// with per-element division before and the cursor now: fp32 128x128 fwd/bwd-data/bwd-weight
// 834/956/835 -> 711/728/709 (512 of them FFMAs); TF32 128x128 366/464/314 -> 240/243/238 (16
// MMAs). What remains besides the multiply is mostly bounds checks and TF32 rounding; vector
// and asynchronous copies where the geometry allows would be the next step.
//
// Split-K: with `splits` > 1 the Kd range is cut into `splits` pieces of whole BK steps (grid z =
// groups * splits); each piece writes its partial tile to a workspace, and igemm_reduce adds the
// pieces in order 0, 1, ..., splits - 1 and applies the epilogue. No atomics anywhere: the same
// shape, tiling and split give the same bits run to run.
#pragma once

#include <cstdint>

#include "nn/core/error.h"
#include "nn/core/simt.h"
#include "nn/ops/conv2d_kernels.h"

namespace tg::igemm {

// Division by a fixed positive divisor d as a multiply-high, an add and a shift, with no branch
// (Granlund and Montgomery's round-up method): with l = ceil(log2 d) and
// m = floor(2^32 (2^l - d) / d) + 1 (below 2^32), n / d = (umulhi(n, m) + n) >> l for every
// 0 <= n < 2^32; the kernels' dividends (every n, kd) are below 2^31, so the sum fits 32 bits.
// d = 1 needs no special case: l = 0, m = 1, umulhi(n, 1) = 0. The kernels' index arithmetic
// runs through these instead of integer division.
struct FastDiv {
  int d = 1;
  uint32_t m = 1;
  int shift = 0;
  FastDiv() = default;
  explicit FastDiv(int divisor) : d(divisor) {
    int l = 0;
    while ((int64_t{1} << l) < d) ++l;
    m = static_cast<uint32_t>(
        ((uint64_t{1} << 32) * ((uint64_t{1} << l) - static_cast<uint64_t>(d))) /
            static_cast<uint64_t>(d) +
        1);
    shift = l;
  }
  TG_HD int div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(u, m);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(u) * m) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
};

// The forward and data-gradient problems read B's row kd = c*RS + r*S + s (c a channel of x or
// of dy) at an offset c*cs + r*rs + s*ss of the strides their walk names. A thread's B elements
// sit a fixed distance apart in kd and move BK further each step, so the loads walk kd with a
// cursor that adds the distance's digits and carries (at most one per digit: each digit of the
// step is below its radix), precomputed per shape, instead of dividing kd by RS and S per
// element: the divisions were half the instructions of the forward main loops.
struct Crs {
  int off, r, s;
};
struct CrsWalk {
  struct Step {
    int doff, dr, ds;
  };
  int cs = 0, rs = 0, ss = 0;    // the offset's strides of c, r and s
  int s_carry = 0, r_carry = 0;  // what a carry out of s (into r) and out of r (into c) adds
  Step step[4]{};                // kd distances 1, 2, 4 and 8
};
template <int Delta>
constexpr int crs_step_index() {
  static_assert(Delta == 1 || Delta == 2 || Delta == 4 || Delta == 8, "a cursor steps 1, 2, 4, 8");
  return Delta == 1 ? 0 : Delta == 2 ? 1 : Delta == 4 ? 2 : 3;
}

// Problem sizes as 32-bit ints; offsets within an image and within w are 32-bit too, an image's
// offset 64-bit (conv2d_cuda.cu checks they fit).
struct Dims {
  int N, C, H, W, K, R, S, P, Q, sh, sw, pt, pl, G;
  int Cg, Kg, RS, PQ, HW;
  bool unit_stride;
  FastDiv by_RS, by_S, by_PQ, by_Q, by_HW, by_W, by_sh, by_sw;
  CrsWalk fwd_walk, bwd_walk;  // Forward's (c*HW + r*W + s) and BackwardData's, below

  // The cursor at kd (divides, once per thread).
  TG_HD Crs crs_at(const CrsWalk& w, int kd) const {
    const int c = by_RS.div(kd), rs = kd - c * RS, r = by_S.div(rs), s = rs - r * S;
    return {c * w.cs + r * w.rs + s * w.ss, r, s};
  }
  // The cursor Delta further in kd.
  template <int Delta>
  TG_HD void crs_advance(const CrsWalk& w, Crs& k) const {
    const CrsWalk::Step& st = w.step[crs_step_index<Delta>()];
    k.s += st.ds;
    k.r += st.dr;
    k.off += st.doff;
    if (k.s >= S) k.s -= S, k.r += 1, k.off += w.s_carry;
    if (k.r >= R) k.r -= R, k.off += w.r_carry;
  }
};

inline CrsWalk crs_walk(const Dims& d, int cs, int rs, int ss) {
  CrsWalk w;
  w.cs = cs, w.rs = rs, w.ss = ss;
  w.s_carry = rs - d.S * ss;
  w.r_carry = cs - d.R * rs;
  for (int i = 0; i < 4; ++i) {
    const int delta = 1 << i, dc = delta / d.RS, dr = delta % d.RS / d.S, ds = delta % d.S;
    w.step[i] = {dc * cs + dr * rs + ds * ss, dr, ds};
  }
  return w;
}

// f(j, cursor, in range) for a thread's LB elements of B's rows kd0, kd0 + Dk, ...; the cursor
// starts at kd0's.
template <int LB, int Dk, class F>
TG_HD void crs_each(const Dims& d, const CrsWalk& w, Crs e, int kd0, int k_end, F&& f) {
  TG_UNROLL
  for (int j = 0; j < LB; ++j) {
    if (j > 0) d.crs_advance<Dk>(w, e);
    f(j, e, kd0 + j * Dk < k_end);
  }
}

inline Dims dims_of(const Conv2dShape& s) {
  Dims d{};
  d.N = static_cast<int>(s.N);
  d.C = static_cast<int>(s.C);
  d.H = static_cast<int>(s.H);
  d.W = static_cast<int>(s.W);
  d.K = static_cast<int>(s.K);
  d.R = static_cast<int>(s.R);
  d.S = static_cast<int>(s.S);
  d.P = static_cast<int>(s.P);
  d.Q = static_cast<int>(s.Q);
  d.sh = static_cast<int>(s.stride_h);
  d.sw = static_cast<int>(s.stride_w);
  d.pt = static_cast<int>(s.pad_top);
  d.pl = static_cast<int>(s.pad_left);
  d.G = static_cast<int>(s.groups);
  d.Cg = d.C / d.G;
  d.Kg = d.K / d.G;
  d.RS = d.R * d.S;
  d.PQ = d.P * d.Q;
  d.HW = d.H * d.W;
  d.by_RS = FastDiv(d.RS);
  d.by_S = FastDiv(d.S);
  d.by_PQ = FastDiv(d.PQ);
  d.by_Q = FastDiv(d.Q);
  d.by_HW = FastDiv(d.HW);
  d.by_W = FastDiv(d.W);
  d.by_sh = FastDiv(d.sh);
  d.by_sw = FastDiv(d.sw);
  d.unit_stride = d.sh == 1 && d.sw == 1;
  d.fwd_walk = crs_walk(d, d.HW, d.W, 1);
  // With unit stride dy's (p, q) = (h + pt - r, w + pl - s): the walk folds -r*Q - s in.
  d.bwd_walk = d.unit_stride ? crs_walk(d, d.PQ, -d.Q, -1) : crs_walk(d, d.PQ, 0, 0);
  return d;
}

// An operand element from global memory, through the read-only data cache on the GPU (x, w and
// dy do not change while a kernel runs). Naming the load also keeps nvcc from falling back to a
// generic load where a pointer's space is not evident to it.
TG_HD float ld(const float* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// ---- the three problems: sizes, operand reads, the epilogue ---------------------------------
// A "row" / "col" context holds what a thread needs about its fixed m / n; a "k" context (for
// B in forward and backward data, the cursor) what it needs about the current kd. a(), b() and
// load_b() give 0 outside the matrices.

struct Forward {
  static constexpr bool kBKFastest = false;  // B's columns (n) are x's contiguous outputs
  Dims d;
  const float* x;
  const float* w;
  const float* bias;  // nullable
  float* y;
  TG_HD int M() const { return d.Kg; }
  TG_HD int N() const { return d.N * d.PQ; }
  TG_HD int Kd() const { return d.Cg * d.RS; }
  struct Row {
    int off, m;  // off into w (32-bit: conv2d_cuda.cu checks w's size, rows past M included)
  };
  TG_HD Row row(int g, int m) const { return {(g * d.Kg + m) * d.Cg * d.RS, m}; }
  TG_HD Row row_at(const Row& r, int dm) const { return {r.off + dm * d.Cg * d.RS, r.m + dm}; }
  struct KA {
    int kd;
    bool ok;
  };
  TG_HD KA ka(int kd) const { return {kd, kd < Kd()}; }
  TG_HD float a(const Row& r, const KA& k) const {
    return r.m < d.Kg && k.ok ? ld(w + (r.off + k.kd)) : 0.0f;
  }
  // A column past N gets an ih0 that no filter row brings into the image (no flag).
  struct Col {
    const float* p;
    int ih0, iw0, base;  // base = ih0*W + iw0
  };
  TG_HD Col col(int g, int n) const {
    if (n >= N()) return {x, -(1 << 28), 0, 0};
    const int img = d.by_PQ.div(n), pq = n - img * d.PQ, p = d.by_Q.div(pq);
    Col c;
    c.p = x + (static_cast<int64_t>(img) * d.C + static_cast<int64_t>(g) * d.Cg) * d.HW;
    c.ih0 = p * d.sh - d.pt;
    c.iw0 = (pq - p * d.Q) * d.sw - d.pl;
    c.base = c.ih0 * d.W + c.iw0;
    return c;
  }
  // B's rows through the cursor of d.fwd_walk: off = c*HW + r*W + s. LB elements from kd0 (at
  // cursor k), Dk apart, into out.
  TG_HD const CrsWalk& walk() const { return d.fwd_walk; }
  TG_HD static constexpr bool unit_path() { return true; }  // one B path
  template <int LB, int Dk, bool>
  TG_HD void load_b(const Col& c, const Crs& k, int kd0, int k_end, float* out) const {
    crs_each<LB, Dk>(d, walk(), k, kd0, k_end, [&](int j, const Crs& e, bool k_ok) {
      const unsigned ih = static_cast<unsigned>(c.ih0 + e.r);
      const unsigned iw = static_cast<unsigned>(c.iw0 + e.s);
      const bool in = k_ok && ih < static_cast<unsigned>(d.H) && iw < static_cast<unsigned>(d.W);
      out[j] = in ? ld(c.p + (c.base + e.off)) : 0.0f;
    });
  }
  TG_HD void store(int g, int m, int n, float v) const {
    const int img = d.by_PQ.div(n), pq = n - img * d.PQ, k = g * d.Kg + m;
    if (bias) v += bias[k];
    y[(static_cast<int64_t>(img) * d.K + k) * d.PQ + pq] = v;
  }
};

struct BackwardData {
  static constexpr bool kBKFastest = false;  // B's columns (n) are dx's contiguous pixels
  Dims d;
  const float* dy;
  const float* w;
  float* dx;
  TG_HD int M() const { return d.Cg; }
  TG_HD int N() const { return d.N * d.HW; }
  TG_HD int Kd() const { return d.Kg * d.RS; }
  struct Row {
    int off, m;  // off into w (32-bit: conv2d_cuda.cu checks w's size, rows past M included)
  };
  TG_HD Row row(int g, int m) const { return {(g * d.Kg * d.Cg + m) * d.RS, m}; }
  TG_HD Row row_at(const Row& r, int dm) const { return {r.off + dm * d.RS, r.m + dm}; }
  struct KA {
    int off;  // k*Cg*RS + rs
    bool ok;
  };
  TG_HD KA ka(int kd) const {
    if (kd >= Kd()) return {0, false};
    const int k = d.by_RS.div(kd);
    return {k * d.Cg * d.RS + (kd - k * d.RS), true};
  }
  TG_HD float a(const Row& r, const KA& k) const {
    return r.m < d.Cg && k.ok ? ld(w + (r.off + k.off)) : 0.0f;
  }
  // A column past N gets a th0 that no filter row brings into dy (no flag).
  struct Col {
    const float* p;
    int th0, tw0, base;  // h + pt, w + pl; base = th0*Q + tw0
  };
  TG_HD Col col(int g, int n) const {
    if (n >= N()) return {dy, -(1 << 28), 0, 0};
    const int img = d.by_HW.div(n), hw = n - img * d.HW, h = d.by_W.div(hw);
    Col c;
    c.p = dy + (static_cast<int64_t>(img) * d.K + static_cast<int64_t>(g) * d.Kg) * d.PQ;
    c.th0 = h + d.pt;
    c.tw0 = hw - h * d.W + d.pl;
    c.base = c.th0 * d.Q + c.tw0;
    return c;
  }
  // B's rows through the cursor of d.bwd_walk: off = k*PQ - r*Q - s with unit stride (so
  // base + off is dy's (k, th, tw)), k*PQ otherwise; igemm_block compiles a main loop for each
  // (kUnit = unit_path()).
  TG_HD const CrsWalk& walk() const { return d.bwd_walk; }
  TG_HD bool unit_path() const { return d.unit_stride; }
  template <int LB, int Dk, bool kUnit>
  TG_HD void load_b(const Col& c, const Crs& k, int kd0, int k_end, float* out) const {
    if constexpr (kUnit) {
      crs_each<LB, Dk>(d, walk(), k, kd0, k_end, [&](int j, const Crs& e, bool k_ok) {
        const unsigned th = static_cast<unsigned>(c.th0 - e.r);
        const unsigned tw = static_cast<unsigned>(c.tw0 - e.s);
        const bool in = k_ok && th < static_cast<unsigned>(d.P) && tw < static_cast<unsigned>(d.Q);
        out[j] = in ? ld(c.p + (c.base + e.off)) : 0.0f;
      });
    } else {
      crs_each<LB, Dk>(d, walk(), k, kd0, k_end, [&](int j, const Crs& e, bool k_ok) {
        const int th = c.th0 - e.r, tw = c.tw0 - e.s;
        const int p = d.by_sh.div(th < 0 ? 0 : th), q = d.by_sw.div(tw < 0 ? 0 : tw);
        const bool in =
            k_ok && th >= 0 && tw >= 0 && p * d.sh == th && q * d.sw == tw && p < d.P && q < d.Q;
        out[j] = in ? ld(c.p + (e.off + p * d.Q + q)) : 0.0f;
      });
    }
  }
  TG_HD void store(int g, int m, int n, float v) const {
    const int img = d.by_HW.div(n), hw = n - img * d.HW;
    dx[(static_cast<int64_t>(img) * d.C + static_cast<int64_t>(g) * d.Cg + m) * d.HW + hw] = v;
  }
};

struct BackwardWeight {
  // B's rows (kd = image, p, q) walk x along a row; its columns (c, r, s) jump by W and H*W:
  // neighbouring threads load neighbouring kd.
  static constexpr bool kBKFastest = true;
  Dims d;
  const float* x;
  const float* dy;
  float* dw;
  TG_HD int M() const { return d.Kg; }
  TG_HD int N() const { return d.Cg * d.RS; }
  TG_HD int Kd() const { return d.N * d.PQ; }
  struct Row {
    const float* p;  // dy's row m of image 0 (rows past M included: not read)
    int m;
  };
  TG_HD Row row(int g, int m) const {
    return {dy + (static_cast<int64_t>(g) * d.Kg + m) * d.PQ, m};
  }
  TG_HD Row row_at(const Row& r, int dm) const { return {r.p + dm * d.PQ, r.m + dm}; }
  struct KA {
    int64_t off;  // img*K*PQ + pq
    bool ok;
  };
  TG_HD KA ka(int kd) const {
    if (kd >= Kd()) return {0, false};
    const int img = d.by_PQ.div(kd);
    return {static_cast<int64_t>(img) * d.K * d.PQ + (kd - img * d.PQ), true};
  }
  TG_HD float a(const Row& r, const KA& k) const {
    return r.m < d.Kg && k.ok ? ld(r.p + k.off) : 0.0f;
  }
  TG_HD static constexpr bool unit_path() { return true; }  // one B path
  // A column n = (c, r, s) as its offset in an image of x, (g*Cg + c)*HW + r*W + s, and r and
  // s; a column past N gets an r that no output row brings into the image (3 registers for
  // each of a thread's LB columns, no pointer, no flag).
  struct Col {
    int off, r, s;
  };
  TG_HD Col col(int g, int n) const {
    if (n >= N()) return {0, -(1 << 28), 0};
    const int ch = d.by_RS.div(n), rs = n - ch * d.RS, r = d.by_S.div(rs), s = rs - r * d.S;
    return {(g * d.Cg + ch) * d.HW + r * d.W + s, r, s};
  }
  struct KB {
    const float* p;      // x's image
    int ih0, iw0, base;  // base = ih0*W + iw0
    bool ok;
  };
  TG_HD KB kb(int kd) const {
    if (kd >= Kd()) return {x, 0, 0, 0, false};
    const int img = d.by_PQ.div(kd), pq = kd - img * d.PQ, p = d.by_Q.div(pq);
    const int ih0 = p * d.sh - d.pt, iw0 = (pq - p * d.Q) * d.sw - d.pl;
    return {x + static_cast<int64_t>(img) * d.C * d.HW, ih0, iw0, ih0 * d.W + iw0, true};
  }
  TG_HD float b(const Col& c, const KB& k) const {
    const unsigned ih = static_cast<unsigned>(k.ih0 + c.r), iw = static_cast<unsigned>(k.iw0 + c.s);
    const bool in = k.ok && ih < static_cast<unsigned>(d.H) && iw < static_cast<unsigned>(d.W);
    return in ? ld(k.p + (k.base + c.off)) : 0.0f;
  }
  TG_HD void store(int g, int m, int n, float v) const {
    dw[(static_cast<int64_t>(g) * d.Kg + m) * (static_cast<int64_t>(d.Cg) * d.RS) + n] = v;
  }
};

// V consecutive floats from shared memory, V-aligned: one vector load on the GPU.
template <int V>
TG_HD void load_vec(const float* p, float* out) {
#if defined(__CUDA_ARCH__)
  if constexpr (V == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else if constexpr (V == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    out[0] = v.x, out[1] = v.y;
  } else {
    for (int i = 0; i < V; ++i) out[i] = p[i];
  }
#else
  for (int i = 0; i < V; ++i) out[i] = p[i];
#endif
}

// ---- the tiled GEMM body ----------------------------------------------------------------------

// The block's multiply is a policy of its tiling: Tiling (fp32 FMAs on CUDA cores) and
// MmaTiling (TF32 tensor-core MMAs) share the loads, the double buffering, the split-K and the
// epilogue of igemm_block below, and differ in what a thread keeps (Acc), how a BK step of the
// shared tiles is multiplied into it, and which outputs each accumulator is.

// A thread's TM x TN outputs: rows in TM / VM groups of VM consecutive rows, the groups BM / GM
// apart (likewise columns), so its operands come out of shared memory as float4 (float2) loads
// that neighbouring threads take from consecutive addresses: no bank conflicts, a quarter of
// the load instructions of one float at a time.
template <int BM_, int BN_, int TM_, int TN_>
struct Tiling {
  static constexpr int BM = BM_, BN = BN_, BK = 8, TM = TM_, TN = TN_;
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  static constexpr int kLoadA = BM * BK / kThreads, kLoadB = BK * BN / kThreads;
  static constexpr int VM = TM < 4 ? TM : 4, VN = TN < 4 ? TN : 4;
  static constexpr int GM = TM / VM, GN = TN / VN;
  static constexpr int kPad = 4;  // rows padded: k-fastest stores hit distinct banks
  // Blocks an SM should hold (__launch_bounds__): 2 of the 8 x 8-per-thread tile (<= 128
  // registers), 4 of the smaller ones (<= 64).
  static constexpr int kMinBlocks = TM * TN >= 64 ? 2 : 4;
  static_assert(kThreads % BK == 0 && kThreads % BN == 0 && kLoadA >= 1 && kLoadB >= 1,
                "a thread's column and k-row of each tile load must be fixed");
  static_assert(TM % VM == 0 && TN % VN == 0 && BM % 4 == 0 && BN % 4 == 0, "vector groups");

  struct Acc {
    float v[TM][TN];
  };
  TG_HD static float stage(float v) { return v; }  // what goes into shared memory
  TG_HD static void clear(Acc& acc) {
    TG_UNROLL
    for (int i = 0; i < TM; ++i) TG_UNROLL
    for (int j = 0; j < TN; ++j) acc.v[i][j] = 0.0f;
  }
  // acc += the BK-deep slice: each thread's sum over kd in increasing kd, one fmaf at a time.
  TG_HD static void multiply(Acc& acc, const float (*As)[BM + kPad], const float (*Bs)[BN + kPad],
                             int tid) {
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    TG_UNROLL
    for (int kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
      TG_UNROLL
      for (int i = 0; i < GM; ++i) load_vec<VM>(&As[kk][i * (BM / GM) + ty * VM], av + i * VM);
      TG_UNROLL
      for (int j = 0; j < GN; ++j) load_vec<VN>(&Bs[kk][j * (BN / GN) + tx * VN], bv + j * VN);
      TG_UNROLL
      for (int i = 0; i < TM; ++i) TG_UNROLL
      for (int j = 0; j < TN; ++j) acc.v[i][j] = fmaf(av[i], bv[j], acc.v[i][j]);
    }
  }
  // f(m, n, value) for each of the thread's outputs, (m, n) within the block's tile.
  template <class F>
  TG_HD static void for_each(const Acc& acc, int tid, F&& f) {
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    TG_UNROLL
    for (int i = 0; i < TM; ++i) TG_UNROLL
    for (int j = 0; j < TN; ++j)
      f(i / VM * (BM / GM) + ty * VM + i % VM, j / VN * (BN / GN) + tx * VN + j % VN, acc.v[i][j]);
  }
};

// TF32 on tensor cores (cuda.tf32): warps of WM x WN outputs, each a grid of 16 x 8 tiles that
// one mma.m16n8k8 per BK step of 8 multiplies (nn/core/simt.h, mma_tf32_tiles, with PTX's
// fragment layout: lane = 4 * group + t holds A's rows group and group + 8 at columns t and
// t + 4, B's column group at rows t and t + 4, C's rows group and group + 8 at columns 2t and
// 2t + 1). Operands are rounded to TF32 (round to nearest, ties away) once, on the way into
// shared memory; products and sums are fp32. Rows padded by 8 floats: the fragment loads (row
// t, column group) then fall in 32 distinct banks. The tensor core's order of the 8 additions
// within an MMA is its own, but fixed: the same shape, tiling and split give the same bits.
template <int BM_, int BN_, int WM_, int WN_>
struct MmaTiling {
  static constexpr int BM = BM_, BN = BN_, BK = 8, WM = WM_, WN = WN_;
  static constexpr int kWarpsN = BN / WN, kThreads = (BM / WM) * kWarpsN * 32;
  static constexpr int MI = WM / 16, NI = WN / 8;  // MMA tiles per warp
  static constexpr int kLoadA = BM * BK / kThreads, kLoadB = BK * BN / kThreads;
  static constexpr int kPad = 8;
  static constexpr int kMinBlocks = kThreads >= 256 ? 2 : 4;  // <= 128 registers
  static_assert(kThreads % BK == 0 && kThreads % BN == 0 && kLoadA >= 1 && kLoadB >= 1,
                "a thread's column and k-row of each tile load must be fixed");
  static_assert(WM % 16 == 0 && WN % 8 == 0 && BM % WM == 0 && BN % WN == 0, "warp tiles");

  struct Acc {
    float v[MI][NI][4];
  };
  TG_DEV static float stage(float v) { return tf32_round(v); }
  TG_HD static void clear(Acc& acc) {
    TG_UNROLL
    for (int i = 0; i < MI; ++i) TG_UNROLL
    for (int j = 0; j < NI; ++j) TG_UNROLL
    for (int q = 0; q < 4; ++q) acc.v[i][j][q] = 0.0f;
  }
  TG_DEV static void multiply(Acc& acc, const float (*As)[BM + kPad], const float (*Bs)[BN + kPad],
                              int tid) {
    const int lane = tid % 32, warp = tid / 32, gr = lane / 4, t = lane % 4;
    const int wm0 = warp / kWarpsN * WM, wn0 = warp % kWarpsN * WN;
    float a[MI][4], b[NI][2];
    TG_UNROLL
    for (int i = 0; i < MI; ++i) {
      const int r = wm0 + i * 16 + gr;
      a[i][0] = As[t][r];
      a[i][1] = As[t][r + 8];
      a[i][2] = As[t + 4][r];
      a[i][3] = As[t + 4][r + 8];
    }
    TG_UNROLL
    for (int j = 0; j < NI; ++j) {
      const int c = wn0 + j * 8 + gr;
      b[j][0] = Bs[t][c];
      b[j][1] = Bs[t + 4][c];
    }
    mma_tf32_tiles<MI, NI>(acc.v, a, b);
  }
  template <class F>
  TG_HD static void for_each(const Acc& acc, int tid, F&& f) {
    const int lane = tid % 32, warp = tid / 32, gr = lane / 4, t = lane % 4;
    const int wm0 = warp / kWarpsN * WM, wn0 = warp % kWarpsN * WN;
    TG_UNROLL
    for (int i = 0; i < MI; ++i) TG_UNROLL
    for (int j = 0; j < NI; ++j) TG_UNROLL
    for (int q = 0; q < 4; ++q)
      f(wm0 + i * 16 + gr + q / 2 * 8, wn0 + j * 8 + 2 * t + q % 2, acc.v[i][j][q]);
  }
};

// Where split z's range of kd starts and ends: whole BK steps, the last one short.
TG_HD int split_chunk(int kd, int splits, int bk) {
  const int steps = (kd + bk - 1) / bk;
  return (steps + splits - 1) / splits * bk;
}

// One block: tile (blockIdx.y, blockIdx.x) of C for group blockIdx.z / splits and split
// blockIdx.z % splits. partial: [G][splits][M][N] floats when splits > 1 (else unused).
template <class Tl, class Prob>
TG_DEV void igemm_block(const Prob& pr, int splits, float* partial, int bx, int by, int bz,
                        int tid) {
  constexpr int BM = Tl::BM, BN = Tl::BN, BK = Tl::BK;
  constexpr int T = Tl::kThreads, LA = Tl::kLoadA, LB = Tl::kLoadB;
  TG_SHARED16 float As[2][BK][BM + Tl::kPad];
  TG_SHARED16 float Bs[2][BK][BN + Tl::kPad];

  const int M = pr.M(), N = pr.N(), Kd = pr.Kd();
  const int g = bz / splits, z = bz - g * splits;
  const int chunk = split_chunk(Kd, splits, BK);
  const int k_begin = z * chunk;
  const int k_end = k_begin + chunk < Kd ? k_begin + chunk : Kd;
  const int m0 = by * BM, n0 = bx * BN;

  // This thread's loads: A elements (m0 + a_m + j*T/BK, k0 + a_k); B elements
  // (k0 + b_k + j*dk, n0 + b_n + j*dn): n-fastest (one column, LB k-rows, dn = 0) or, when the
  // problem says neighbouring kd are neighbouring addresses, k-fastest (one k-row, LB columns).
  constexpr bool kBK = Prob::kBKFastest;
  constexpr int dk = kBK ? 0 : T / BN, dn = kBK ? T / BK : 0, kCols = kBK ? LB : 1;
  const int a_k = tid % BK, a_m = tid / BK;
  const int b_k = kBK ? tid % BK : tid / BN, b_n = kBK ? tid / BK : tid % BN;
  // A's rows are T / BK apart: kept as the first one, the others a multiply away.
  const typename Prob::Row row0 = pr.row(g, m0 + a_m);
  typename Prob::Col cols[kCols];
  TG_UNROLL
  for (int j = 0; j < kCols; ++j) cols[j] = pr.col(g, n0 + b_n + j * dn);

  // n-fastest: the cursor of this thread's first B element at the next load (loads step BK).
  [[maybe_unused]] Crs bcur{};
  if constexpr (!kBK) bcur = pr.d.crs_at(pr.walk(), k_begin + b_k);

  typename Tl::Acc acc;
  Tl::clear(acc);

  // The main loop, compiled twice where the problem has a second B path (backward data with a
  // stride): one branch per block picks it, so neither loop carries the other's registers.
  auto main_loop = [&]<bool kUnit>() {
    float ra[LA], rb[LB];
    auto load = [&](int k0) {
      const typename Prob::KA ka = pr.ka(k0 + a_k < k_end ? k0 + a_k : Kd);
      TG_UNROLL
      for (int j = 0; j < LA; ++j) ra[j] = pr.a(pr.row_at(row0, j * (T / BK)), ka);
      if constexpr (kBK) {
        const typename Prob::KB kb = pr.kb(k0 + b_k < k_end ? k0 + b_k : Kd);
        TG_UNROLL
        for (int j = 0; j < LB; ++j) rb[j] = pr.b(cols[j], kb);
      } else {
        pr.template load_b<LB, dk, kUnit>(cols[0], bcur, k0 + b_k, k_end, rb);
        pr.d.template crs_advance<BK>(pr.walk(), bcur);
      }
    };
    auto stash = [&](int buf) {
      TG_UNROLL
      for (int j = 0; j < LA; ++j) As[buf][a_k][a_m + j * (T / BK)] = Tl::stage(ra[j]);
      TG_UNROLL
      for (int j = 0; j < LB; ++j) Bs[buf][b_k + j * dk][b_n + j * dn] = Tl::stage(rb[j]);
    };

    int buf = 0;
    if (k_begin < k_end) {
      load(k_begin);
      stash(0);
    }
    TG_SYNC();
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
      const bool more = k0 + BK < k_end;
      if (more) load(k0 + BK);
      Tl::multiply(acc, As[buf], Bs[buf], tid);
      if (more) stash(buf ^ 1);
      TG_SYNC();
      buf ^= 1;
    }
  };
  if (pr.unit_path())
    main_loop.template operator()<true>();
  else
    main_loop.template operator()<false>();

  Tl::for_each(acc, tid, [&](int ml, int nl, float v) {
    const int m = m0 + ml, n = n0 + nl;
    if (m >= M || n >= N) return;
    if (splits == 1)
      pr.store(g, m, n, v);
    else
      partial[((static_cast<int64_t>(g) * splits + z) * M + m) * N + n] = v;
  });
}

// Element e of [G][M][N]: the pieces summed in split order, then the epilogue.
template <class Prob>
TG_HD void igemm_reduce_element(const Prob& pr, int splits, const float* partial, int64_t e) {
  const int64_t M = pr.M(), N = pr.N();
  const int64_t g = e / (M * N), mn = e - g * M * N, m = mn / N, n = mn - m * N;
  float sum = 0.0f;
  for (int z = 0; z < splits; ++z) sum += partial[((g * splits + z) * M + m) * N + n];
  pr.store(static_cast<int>(g), static_cast<int>(m), static_cast<int>(n), sum);
}

// The tilings the dispatcher offers (conv2d_kernels.h names them).
using Tile128x128 = Tiling<128, 128, 8, 8>;
using Tile64x64 = Tiling<64, 64, 4, 4>;
using Tile32x128 = Tiling<32, 128, 2, 8>;
// Their TF32 tensor-core twins (same block tiles, same split-K steps).
using MmaTile128x128 = MmaTiling<128, 128, 64, 32>;
using MmaTile64x64 = MmaTiling<64, 64, 32, 32>;
using MmaTile32x128 = MmaTiling<32, 128, 32, 32>;

// Runs f.template operator()<Tiling>() with the tiling of the igemm algorithm `a` (its tile and
// precision): the one map from algorithm names to kernels, for the launcher and the emulation.
template <class F>
void with_tiling(const Conv2dAlgo& a, F&& f) {
  const auto pick = [&]<class Fp32, class Tf32>() {
    if (a.tf32)
      f.template operator()<Tf32>();
    else
      f.template operator()<Fp32>();
  };
  if (a.bm == 128 && a.bn == 128)
    pick.template operator()<Tile128x128, MmaTile128x128>();
  else if (a.bm == 64 && a.bn == 64)
    pick.template operator()<Tile64x64, MmaTile64x64>();
  else if (a.bm == 32 && a.bn == 128)
    pick.template operator()<Tile32x128, MmaTile32x128>();
  else
    TG_THROW("conv2d igemm: no kernel for tile ", a.bm, "x", a.bn);
}

}  // namespace tg::igemm
