// TernGrad's CUDA kernels over a batch of tensors, one launch for up to kMaxSlots tensors,
// written once for nvcc and for the host emulation of nn/core/simt.h: ternary_cuda.cu launches
// them on the GPU (every *_cuda call of ternary_kernels.h, one tensor being a batch of one), and
// tests/terngrad/ternary_batch_test.cpp runs the same bodies on the CPU against the CPU kernels.
//
// Why batches: a per-tensor launch costs a few microseconds whatever the tensor's size, so the
// many small tensors of a net (biases, GoogLeNet's 1x1 convolutions) were launch-bound, and the
// statistics pass added a second launch and a device-to-host synchronization per tensor. A
// launch's tensors travel in its parameter block (PackArgs and friends, under the 4 KB limit of
// kernel parameters), each tensor's blocks follow the previous tensor's, and a block finds its
// tensor by a binary search over their first blocks (the same for the whole block).
//
// ternarize + pack (the rule of ternary_rule.h, bit for bit as ternarize_pack_cpu):
//   one thread per unit of 16 output bytes: 64 elements (4 Philox blocks) in two_bit, 80 (5
//   Philox blocks) in base3, loaded as float4 where the tensor is 16-byte aligned and stored as
//   one 16-byte word where the output is. The rule is decided in two passes: a branch-free pass
//   over the unit's elements settles all but the elements whose primary byte equals floor(x)
//   (probability 1/256 each) with float compares only (b as a float by its bits, no integer
//   conversion), and marks those in a bit mask; a loop over the mask then draws their refine
//   words. Lanes of a warp with a marked element run that loop together, so one unit of 64-80
//   elements per thread keeps the loop to about one pass per warp. With error feedback (a task
//   with a residual; a separate instantiation, for its registers) the unit reads the residual
//   too, packs the codes of v = residual + g and writes residual = v - s * code.
// statistics: blocks of kStatsThreads threads, each tensor cut into at most kMaxStatsBlocks
//   contiguous chunks of a multiple of 4 elements; a thread sums its float4 groups in order in
//   double (fma for the squares), a block combines its threads in a fixed tree in shared memory,
//   and the last block of a tensor to finish (a per-tensor counter, left at 0) combines the
//   tensor's block partials in block order. The result depends only on the values and n, never
//   on which block finished last or on the tensor's alignment. The clipped sum of squares of
//   the norm-preserving rescale runs as the same kernel with min(g_i^2, s^2) per element.
// scale: out_i = float(acc_i) * scale, one thread per 4 elements (int4 -> float4 when aligned).
// unpack + accumulate: one thread per packed byte, every vector's digits summed in registers,
// one read-modify-write of acc per element.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "nn/core/simt.h"
#include "terngrad/ternary_kernels.h"
#include "terngrad/ternary_rule.h"

namespace tg::tern::batch {

constexpr int kMaxSlots = 60;  // tensors per launch (the parameter block stays under 4 KB)
constexpr int kPackThreads = 128;
constexpr int kStatsThreads = 256;
constexpr int kScaleThreads = 256;
constexpr int kUnpackThreads = 256;
constexpr int64_t kMaxStatsBlocks = 512;  // per tensor: the number of partials it combines
constexpr int64_t kStatsPerThread = 16;   // below this many elements per thread, fewer blocks

// ---- arithmetic shared by host and device --------------------------------------------------

TG_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;  // one multiply: nothing to contract
#endif
}

// float(b) for a byte b, exactly: on the GPU from the bits of 2^23 + b (no conversion unit).
TG_HD float byte_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(0x4B000000u | b) - 8388608.0f;
#else
  return static_cast<float>(b);
#endif
}

TG_HD int ctz64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(v)) - 1;
#else
  return std::countr_zero(v);
#endif
}

// 16 bytes from/to memory that is 16-byte aligned (T: float or int32_t).
template <class T>
TG_HD void load16(const T* p, T* x) {
#if defined(__CUDA_ARCH__)
  using V = std::conditional_t<std::is_same_v<T, float>, float4, int4>;
  const V v = *reinterpret_cast<const V*>(p);
  x[0] = v.x;
  x[1] = v.y;
  x[2] = v.z;
  x[3] = v.w;
#else
  std::memcpy(x, p, 16);
#endif
}
TG_HD void store16(uint8_t* p, const uint32_t* w) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
#else
  std::memcpy(p, w, 16);
#endif
}

TG_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
TG_HD void store16(float* p, const float* x) {
  const uint32_t w[4] = {float_bits(x[0]), float_bits(x[1]), float_bits(x[2]), float_bits(x[3])};
  store16(reinterpret_cast<uint8_t*>(p), w);
}

// a + b rounded once (never fused with a neighbouring multiply); a - b is add_rn(a, -b).
TG_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// A double read that bypasses the (non-coherent) L1 cache: another block's partial.
TG_HD double load_cg(const double* p) {
#if defined(__CUDA_ARCH__)
  return __ldcg(p);
#else
  return *p;
#endif
}

// The first pass of the rule of ternary_rule.h for element g with primary byte b: code + 1 (2
// kept positive, 0 kept negative, 1 dropped), and `pending` when b == floor(x), where the refine
// word decides (the element is then reported as dropped). With fb = float(b), exact:
//   b < floor(x) <=> fb + 1 <= x  (b + 1 is an integer)       -> keep
//   b > floor(x) <=> fb > x                                    -> drop
// and a >= s keeps, x NaN (g NaN) drops, x >= 256 keeps (fb + 1 <= 256 <= x), as the rule says;
// x == 0 drops without a refine word (r < x - floor(x) = 0 is never true).
TG_HD uint32_t decide(float g, float s, float c, uint32_t b, bool& pending) {
  const float a = fabsf(g);
  const float x = mul_rn(a, c);
  const float fb = byte_float(b);
  const bool keep = a >= s || fb + 1.0f <= x;
  pending = !keep && x > 0.0f && !(fb > x);
  return keep ? (g > 0.0f ? 2u : 0u) : 1u;
}

// The second pass: keep iff r_i < x - floor(x) (x - hi of the rule, exact).
TG_HD bool refine_keep(float g, float c, uint64_t seed, uint64_t stream, uint64_t i) {
  const float x = mul_rn(fabsf(g), c);
  return refine_uniform(seed, stream, i) < x - floorf(x);
}

// ---- ternarize + pack ----------------------------------------------------------------------

enum SlotFlags : uint32_t {
  kAlignedIn = 1,   // g is 16-byte aligned
  kAlignedOut = 2,  // out is 16-byte aligned
  kZeroCodes = 4,   // s <= 0 or NaN: every code 0
  kAlignedRes = 8,  // residual is 16-byte aligned
};

struct PackSlot {
  const float* g = nullptr;
  uint8_t* out = nullptr;
  uint8_t* scaler_out = nullptr;  // s's 4 bytes go there (unit 0's thread) when set
  // Error feedback: the codes of v = residual + g, then residual = v - s * code.
  float* residual = nullptr;
  int64_t n = 0;
  uint64_t stream = 0;
  float s = 0, c = 0;  // the scaler and keep_scale(s)
  uint32_t first_block = 0;
  uint32_t flags = 0;
};

struct PackArgs {
  uint64_t seed = 0;
  int count = 0;
  uint32_t blocks = 0;    // of the launch
  bool residual = false;  // every slot has a residual (error feedback), or none has
  PackSlot slot[kMaxSlots];
};
static_assert(sizeof(PackArgs) <= 4000, "kernel parameters are limited to 4 KB");

// Code layout of a unit of 16 bytes held as 4 little-endian 32-bit words: element e of the unit
// adds value * mult(e) to word(e) (value = code + 1).
struct TwoBit {
  static constexpr int kElems = 64, kBlocks = 4;
  static constexpr uint32_t kPad = 0;  // unused bits of the last byte
  TG_HD static int word(int e) { return e >> 4; }
  TG_HD static uint32_t mult(int e) { return 1u << (2 * (e & 15)); }
  TG_HD static int64_t bytes(int64_t n) { return (n + 3) / 4; }
  TG_HD static int code(const uint32_t* w, int e) {
    return static_cast<int>((w[word(e)] >> (2 * (e & 15))) & 3u) - 1;
  }
};
struct Base3 {
  static constexpr int kElems = 80, kBlocks = 5;
  static constexpr uint32_t kPad = 1;  // missing elements: code 0 (digit 1)
  TG_HD static int word(int e) { return e / 20; }
  TG_HD static uint32_t pow3(int e) {  // 3^(e % 5): element e's digit weight in its byte
    const int digit = e % 5;
    return digit == 0 ? 1u : digit == 1 ? 3u : digit == 2 ? 9u : digit == 3 ? 27u : 81u;
  }
  TG_HD static uint32_t mult(int e) { return pow3(e) << (8 * ((e / 5) & 3)); }
  TG_HD static int64_t bytes(int64_t n) { return (n + 4) / 5; }
  TG_HD static int code(const uint32_t* w, int e) {
    const uint32_t byte = (w[word(e)] >> (8 * ((e / 5) & 3))) & 0xFFu;
    return static_cast<int>(byte / pow3(e) % 3u) - 1;
  }
};

// Elements of a unit whose refine word decides (up to 80).
struct Pending {
  uint64_t lo = 0;
  uint32_t hi = 0;
  TG_HD void set(int e, bool p) {
    if (e < 64)
      lo |= static_cast<uint64_t>(p) << e;
    else
      hi |= static_cast<uint32_t>(p) << (e - 64);
  }
  TG_HD bool any() const { return (lo | hi) != 0; }
  TG_HD int pop() {
    if (lo != 0) {
      const int e = ctz64(lo);
      lo &= lo - 1;
      return e;
    }
    const int e = 64 + ctz64(hi);
    hi &= hi - 1;
    return e;
  }
};

template <class F>
TG_HD int64_t units_of(int64_t n) {
  return (n + F::kElems - 1) / F::kElems;
}

// The codes of unit u of slot sl: elements [u * kElems, (u + 1) * kElems) (kFull: all < n).
// kEF (error feedback, sl.residual set): the codes of v = residual + g, and residual = v - s * code
// afterwards, with the roundings of the CPU path (one add, an exact product, one subtract).
template <class F, bool kFull, bool kEF>
TG_HD void pack_unit(const PackSlot& sl, uint64_t seed, int64_t u) {
  const int64_t e0 = u * F::kElems;
  const int64_t bytes = F::bytes(sl.n);
  const bool zero = (sl.flags & kZeroCodes) != 0;
  uint32_t w[4] = {0, 0, 0, 0};
  float x[F::kElems];  // g, or v = residual + g
  if (kEF || !zero) {
    if (kFull && (sl.flags & kAlignedIn)) {
      TG_UNROLL
      for (int k = 0; k < F::kElems / 4; ++k) load16(sl.g + e0 + 4 * k, x + 4 * k);
    } else {
      TG_UNROLL
      for (int e = 0; e < F::kElems; ++e) x[e] = kFull || e0 + e < sl.n ? sl.g[e0 + e] : 0.0f;
    }
    if (kEF) {
      if (kFull && (sl.flags & kAlignedRes)) {
        TG_UNROLL
        for (int k = 0; k < F::kElems / 4; ++k) {
          float r[4];
          load16(sl.residual + e0 + 4 * k, r);
          TG_UNROLL
          for (int j = 0; j < 4; ++j) x[4 * k + j] = add_rn(r[j], x[4 * k + j]);
        }
      } else {
        TG_UNROLL
        for (int e = 0; e < F::kElems; ++e)
          if (kFull || e0 + e < sl.n) x[e] = add_rn(sl.residual[e0 + e], x[e]);
      }
    }
  }
  if (zero) {
    TG_UNROLL
    for (int e = 0; e < F::kElems; ++e)
      w[F::word(e)] += (kFull || e0 + e < sl.n ? 1u : F::kPad) * F::mult(e);
  } else {
    Pending pend;
    TG_UNROLL
    for (int blk = 0; blk < F::kBlocks; ++blk) {
      const Philox4 r = philox_block(seed, sl.stream, static_cast<uint64_t>(u * F::kBlocks + blk));
      TG_UNROLL
      for (int k = 0; k < kCodesPerBlock; ++k) {
        const int e = kCodesPerBlock * blk + k;
        uint32_t v = F::kPad;
        if (kFull || e0 + e < sl.n) {
          bool p = false;
          v = decide(x[e], sl.s, sl.c, primary_byte(r, k), p);
          pend.set(e, p);
        }
        w[F::word(e)] += v * F::mult(e);
      }
    }
    while (pend.any()) {  // rare: ~1 element in 256
      const int e = pend.pop();
      const int64_t i = e0 + e;
      const float gi = kEF ? add_rn(sl.residual[i], sl.g[i]) : sl.g[i];  // x[e], re-read
      if (refine_keep(gi, sl.c, seed, sl.stream, static_cast<uint64_t>(i))) {
        const uint32_t m = F::mult(e), add = gi > 0.0f ? m : 0u - m;  // digit 1 -> 2 or 0
        const int wi = F::word(e);
        TG_UNROLL
        for (int k = 0; k < 4; ++k) w[k] += k == wi ? add : 0u;  // no dynamic register index
      }
    }
  }
  uint8_t* out = sl.out + 16 * u;
  if (kFull && (sl.flags & kAlignedOut)) {
    store16(out, w);
  } else {
    const int64_t len = bytes - 16 * u < 16 ? bytes - 16 * u : 16;
    for (int64_t k = 0; k < len; ++k) out[k] = static_cast<uint8_t>(w[k >> 2] >> (8 * (k & 3)));
  }
  if (kEF) {
    TG_UNROLL
    for (int e = 0; e < F::kElems; ++e)
      x[e] = add_rn(x[e], -mul_rn(static_cast<float>(F::code(w, e)), sl.s));
    if (kFull && (sl.flags & kAlignedRes)) {
      TG_UNROLL
      for (int k = 0; k < F::kElems / 4; ++k) store16(sl.residual + e0 + 4 * k, x + 4 * k);
    } else {
      TG_UNROLL
      for (int e = 0; e < F::kElems; ++e)
        if (kFull || e0 + e < sl.n) sl.residual[e0 + e] = x[e];
    }
  }
}

// The slot of block `block`: the last one whose first block is <= block (slots are in order).
template <class Slot>
TG_HD int find_slot(const Slot* slot, int count, uint32_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (slot[mid].first_block <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// kEF: the launch's slots have residuals (a separate kernel: its registers would otherwise cost
// every launch occupancy).
template <class F, bool kEF>
TG_HD void pack_thread(const PackArgs& a, uint32_t block, uint32_t thread) {
  const PackSlot& sl = a.slot[find_slot(a.slot, a.count, block)];
  const int64_t u = static_cast<int64_t>(block - sl.first_block) * kPackThreads + thread;
  const int64_t units = units_of<F>(sl.n);
  if (u >= units) return;
  if (u == 0 && sl.scaler_out != nullptr) {
    const uint32_t bits = float_bits(sl.s);
    for (int k = 0; k < 4; ++k) sl.scaler_out[k] = static_cast<uint8_t>(bits >> (8 * k));
  }
  if ((u + 1) * F::kElems <= sl.n)
    pack_unit<F, true, kEF>(sl, a.seed, u);
  else
    pack_unit<F, false, kEF>(sl, a.seed, u);
}

// ---- statistics ----------------------------------------------------------------------------

struct StatsSlot {
  const float* g = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;  // elements per block, a multiple of 4
  uint32_t first_block = 0;
  uint32_t blocks = 0;
  uint32_t aligned = 0;  // g is 16-byte aligned
  double cap = 0;        // clipped launches: s^2 (each g_i^2 counts at most this)
};

// A statistics launch, or with `clipped` a clipped-sum-of-squares launch: sum_sq is then the
// sum of min(g_i^2, cap) (clipped_sum_sq of ternary_kernels.h) and the other three stay 0.
struct StatsArgs {
  bool clipped = false;
  int count = 0;
  uint32_t blocks = 0;        // of the launch
  double* partial = nullptr;  // 4 per block of the launch: sum, sum_sq, l1, max|g|
  double* out = nullptr;      // 4 per slot, the same quantities
  unsigned* done = nullptr;   // per slot: blocks finished; the last one sets it back to 0
  StatsSlot slot[kMaxSlots];
};
static_assert(sizeof(StatsArgs) <= 4000, "kernel parameters are limited to 4 KB");

// Blocks and chunk of a tensor of n > 0 elements (a function of n only).
inline void stats_split(int64_t n, int64_t& blocks, int64_t& chunk) {
  int64_t b = (n + kStatsThreads * kStatsPerThread - 1) / (kStatsThreads * kStatsPerThread);
  if (b < 1) b = 1;
  if (b > kMaxStatsBlocks) b = kMaxStatsBlocks;
  chunk = ((n + b - 1) / b + 3) / 4 * 4;
  blocks = (n + chunk - 1) / chunk;
}

struct StatsAcc {
  double s = 0, q = 0, l = 0;
  float m = 0;
  template <bool kClipped>
  TG_HD void add(float f, double cap) {
    const double d = f;
    if (kClipped) {
      const double d2 = d * d;  // exact: a float's square fits a double
      q += d2 < cap ? d2 : cap;
      return;
    }
    s += d;
    q = fma(d, d, q);
    l += fabs(d);
    m = fmaxf(m, fabsf(f));  // ignores NaN, like the CPU kernel
  }
};

// Shared-memory tree over the block's threads (fixed order); thread 0 ends with the total.
TG_DEV void stats_tree(StatsAcc& acc, uint32_t tid, double (&red)[3][kStatsThreads],
                       float (&rmax)[kStatsThreads]) {
  red[0][tid] = acc.s;
  red[1][tid] = acc.q;
  red[2][tid] = acc.l;
  rmax[tid] = acc.m;
  TG_SYNC();
  for (uint32_t w = kStatsThreads / 2; w > 0; w >>= 1) {
    if (tid < w) {
      for (int k = 0; k < 3; ++k) red[k][tid] += red[k][tid + w];
      rmax[tid] = fmaxf(rmax[tid], rmax[tid + w]);
    }
    TG_SYNC();
  }
  acc.s = red[0][0];
  acc.q = red[1][0];
  acc.l = red[2][0];
  acc.m = rmax[0];
  TG_SYNC();  // the arrays are reused next
}

template <bool kClipped>
TG_DEV void stats_block(const StatsArgs& a, uint32_t block, uint32_t tid) {
  TG_SHARED double red[3][kStatsThreads];
  TG_SHARED float rmax[kStatsThreads];
  TG_SHARED uint32_t last;
  const int t = find_slot(a.slot, a.count, block);
  const StatsSlot& sl = a.slot[t];
  const uint32_t j = block - sl.first_block;
  const int64_t b = static_cast<int64_t>(j) * sl.chunk;
  const int64_t len = sl.n - b < sl.chunk ? sl.n - b : sl.chunk;
  const float* g = sl.g + b;  // 16-byte aligned when sl.aligned (chunk % 4 == 0)
  const int64_t groups = len / 4;
  StatsAcc acc;
  // Group k = elements 4k .. 4k + 3, thread tid takes k = tid, tid + T, ... in increasing order
  // (four groups' loads in flight at once); the same order whether loaded as float4 or not.
  constexpr int kUnroll = 4;
  for (int64_t k0 = tid; k0 < groups; k0 += kUnroll * kStatsThreads) {
    float x[kUnroll][4];
    TG_UNROLL
    for (int v = 0; v < kUnroll; ++v) {
      const int64_t k = k0 + static_cast<int64_t>(v) * kStatsThreads;
      if (k < groups) {
        if (sl.aligned) {
          load16(g + 4 * k, x[v]);
        } else {
          for (int e = 0; e < 4; ++e) x[v][e] = g[4 * k + e];
        }
      }
    }
    TG_UNROLL
    for (int v = 0; v < kUnroll; ++v) {
      if (k0 + static_cast<int64_t>(v) * kStatsThreads < groups) {
        TG_UNROLL
        for (int e = 0; e < 4; ++e) acc.add<kClipped>(x[v][e], sl.cap);
      }
    }
  }
  if (tid < static_cast<uint32_t>(len - 4 * groups))
    acc.add<kClipped>(g[4 * groups + tid], sl.cap);  // < 4 left
  stats_tree(acc, tid, red, rmax);
  if (tid == 0) {
    double* p = a.partial + 4 * static_cast<int64_t>(block);
    p[0] = acc.s;
    p[1] = acc.q;
    p[2] = acc.l;
    p[3] = acc.m;
    TG_FENCE();  // the partials are visible before the count says so
    last = TG_ATOMIC_ADD_U32(a.done + t, 1u) == sl.blocks - 1 ? 1u : 0u;
  }
  TG_SYNC();
  if (!last) return;
  TG_FENCE();
  StatsAcc tot;
  for (uint32_t i = tid; i < sl.blocks; i += kStatsThreads) {
    const double* p = a.partial + 4 * static_cast<int64_t>(sl.first_block + i);
    tot.s += load_cg(p);
    tot.q += load_cg(p + 1);
    tot.l += load_cg(p + 2);
    tot.m = fmaxf(tot.m, static_cast<float>(load_cg(p + 3)));
  }
  stats_tree(tot, tid, red, rmax);
  if (tid == 0) {
    double* o = a.out + 4 * t;
    o[0] = tot.s;
    o[1] = tot.q;
    o[2] = tot.l;
    o[3] = tot.m;
    a.done[t] = 0;  // ready for the next launch on this stream
  }
}

// ---- scale ---------------------------------------------------------------------------------

struct ScaleSlot {
  const int32_t* acc = nullptr;
  float* out = nullptr;
  int64_t n = 0;
  float scale = 0;
  uint32_t first_block = 0;
  uint32_t aligned = 0;  // acc and out both 16-byte aligned
};

struct ScaleArgs {
  int count = 0;
  uint32_t blocks = 0;
  ScaleSlot slot[kMaxSlots];
};
static_assert(sizeof(ScaleArgs) <= 4000, "kernel parameters are limited to 4 KB");

TG_HD float int_to_float(int32_t v) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}

TG_HD void scale_thread(const ScaleArgs& a, uint32_t block, uint32_t thread) {
  const ScaleSlot& sl = a.slot[find_slot(a.slot, a.count, block)];
  const int64_t i0 = 4 * (static_cast<int64_t>(block - sl.first_block) * kScaleThreads + thread);
  if (i0 >= sl.n) return;
  if (sl.aligned && i0 + 4 <= sl.n) {  // one 16-byte load and store
    int32_t a[4];
    load16(sl.acc + i0, a);
    float v[4];
    for (int k = 0; k < 4; ++k) v[k] = mul_rn(int_to_float(a[k]), sl.scale);
    store16(sl.out + i0, v);
    return;
  }
  for (int64_t i = i0; i < i0 + 4 && i < sl.n; ++i)
    sl.out[i] = mul_rn(int_to_float(sl.acc[i]), sl.scale);
}

// ---- unpack + accumulate -------------------------------------------------------------------

struct UnpackSlot {
  const uint8_t* packed = nullptr;  // vector v at packed + v * stride
  int32_t* acc = nullptr;
  int64_t n = 0;
  int64_t vectors = 0;
  uint64_t stride = 0;
  uint32_t first_block = 0;
};

struct UnpackArgs {
  int count = 0;
  uint32_t blocks = 0;
  UnpackSlot slot[kMaxSlots];
};
static_assert(sizeof(UnpackArgs) <= 4000, "kernel parameters are limited to 4 KB");

// acc += the sum of the slot's code vectors at packed byte j: the vectors' digits summed in
// registers, one read-modify-write of acc per element. Per = 4 (two_bit) or 5 (base3). Byte
// values the packer never writes (two_bit digit 3, base3 bytes 243..255) decode as code 0,
// like the CPU table.
template <int Per>
TG_HD void unpack_thread(const UnpackArgs& a, uint32_t block, uint32_t thread) {
  const UnpackSlot& sl = a.slot[find_slot(a.slot, a.count, block)];
  const int64_t j = static_cast<int64_t>(block - sl.first_block) * kUnpackThreads + thread;
  if (j >= (sl.n + Per - 1) / Per) return;
  int32_t sum[Per];
  TG_UNROLL
  for (int k = 0; k < Per; ++k) sum[k] = 0;
  for (int64_t v = 0; v < sl.vectors; ++v) {
    uint32_t b = sl.packed[v * static_cast<int64_t>(sl.stride) + j];
    if (Per == 4) {
      TG_UNROLL
      for (int k = 0; k < Per; ++k) {
        const int d = static_cast<int>((b >> (2 * k)) & 3u);
        sum[k] += d == 3 ? 0 : d - 1;
      }
    } else if (b <= 242) {
      TG_UNROLL
      for (int k = 0; k < Per; ++k) {
        sum[k] += static_cast<int32_t>(b % 3) - 1;
        b /= 3;
      }
    }
  }
  TG_UNROLL
  for (int k = 0; k < Per; ++k)
    if (Per * j + k < sl.n) sl.acc[Per * j + k] += sum[k];
}

// ---- launch plans (host) -------------------------------------------------------------------

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The slot of a tensor of n elements and `blocks` blocks: the next one of the last launch, or the
// first of a new launch when that one is full (kMaxSlots tensors, or 2^31 - 1 blocks) or `apart`
// keeps the tensor out of it. The slot's first block is set and the launch's blocks counted.
template <class Args>
auto& add_slot(std::vector<Args>& plans, int64_t blocks, int64_t n, const char* fn,
               bool apart = false) {
  TG_CHECK(blocks < (int64_t{1} << 31), fn, ": ", n,
           " elements need more blocks than one launch has");
  if (plans.empty() || apart || plans.back().count == kMaxSlots ||
      plans.back().blocks + blocks > (int64_t{1} << 31) - 1)
    plans.emplace_back();
  Args& a = plans.back();
  auto& sl = a.slot[a.count++];
  sl.first_block = a.blocks;
  a.blocks += static_cast<uint32_t>(blocks);
  return sl;
}

// The launches for `count` tasks (kMaxSlots tensors per launch, in order).
inline std::vector<PackArgs> plan_pack(const PackTask* task, size_t count, uint64_t seed,
                                       PackFormat f) {
  std::vector<PackArgs> plans;
  for (size_t i = 0; i < count; ++i) {
    const PackTask& t = task[i];
    if (!detail::ternarize_args(t.g, t.n, f, t.out, "ternarize_pack_cuda")) continue;
    TG_CHECK(static_cast<uint64_t>(t.n) <= kMaxTernaryElements, "ternarize_pack_cuda: ", t.n,
             " elements exceed the limit of the random-number layout (", kMaxTernaryElements, ")");
    const int64_t units = f == PackFormat::two_bit ? units_of<TwoBit>(t.n) : units_of<Base3>(t.n);
    const int64_t blocks = (units + kPackThreads - 1) / kPackThreads;
    const bool ef = t.residual != nullptr;
    PackSlot& sl = add_slot(plans, blocks, t.n, "ternarize_pack_cuda",
                            !plans.empty() && plans.back().residual != ef);
    plans.back().seed = seed;
    plans.back().residual = ef;
    sl.g = t.g;
    sl.out = t.out;
    sl.scaler_out = t.scaler_out;
    sl.n = t.n;
    sl.stream = t.stream;
    sl.s = t.s;
    const bool zero = !(t.s > 0.0f);
    sl.c = zero ? 0.0f : keep_scale(t.s);
    sl.residual = t.residual;
    sl.flags = (aligned16(t.g) ? kAlignedIn : 0u) | (aligned16(t.out) ? kAlignedOut : 0u) |
               (zero ? kZeroCodes : 0u) | (aligned16(t.residual) ? kAlignedRes : 0u);
  }
  return plans;
}

// The launches for `count` tasks; index[k] = the task of slot k over all launches (tasks with
// n = 0 have no slot). With `scalers`: clipped launches, task i capped at scalers[i]^2.
inline std::vector<StatsArgs> plan_stats(const StatsTask* task, size_t count,
                                         std::vector<size_t>& index,
                                         const float* scalers = nullptr) {
  std::vector<StatsArgs> plans;
  index.clear();
  for (size_t i = 0; i < count; ++i) {
    const StatsTask& t = task[i];
    TG_CHECK(t.n >= 0, "tensor_stats_cuda: element count ", t.n, " is negative (expected n >= 0)");
    if (t.n == 0) continue;
    TG_CHECK(t.g != nullptr, "tensor_stats_cuda: g is null for n = ", t.n);
    int64_t b = 0, chunk = 0;
    stats_split(t.n, b, chunk);
    StatsSlot& sl = add_slot(plans, b, t.n, "tensor_stats_cuda");
    plans.back().clipped = scalers != nullptr;
    if (scalers != nullptr) sl.cap = static_cast<double>(scalers[i]) * scalers[i];
    sl.g = t.g;
    sl.n = t.n;
    sl.chunk = chunk;
    sl.blocks = static_cast<uint32_t>(b);
    sl.aligned = aligned16(t.g) ? 1u : 0u;
    index.push_back(i);
  }
  return plans;
}

inline std::vector<ScaleArgs> plan_scale(const ScaleTask* task, size_t count) {
  std::vector<ScaleArgs> plans;
  for (size_t i = 0; i < count; ++i) {
    const ScaleTask& t = task[i];
    if (!detail::scale_args(t.acc, t.n, t.out, "scale_accumulated_cuda")) continue;
    const int64_t blocks = (t.n + 4 * kScaleThreads - 1) / (4 * kScaleThreads);
    ScaleSlot& sl = add_slot(plans, blocks, t.n, "scale_accumulated_cuda");
    sl.acc = t.acc;
    sl.out = t.out;
    sl.n = t.n;
    sl.scale = t.scale;
    sl.aligned = aligned16(t.acc) && aligned16(t.out) ? 1u : 0u;
  }
  return plans;
}

inline std::vector<UnpackArgs> plan_unpack(const UnpackTask* task, size_t count, PackFormat f) {
  std::vector<UnpackArgs> plans;
  for (size_t i = 0; i < count; ++i) {
    const UnpackTask& t = task[i];
    if (!detail::unpack_args(t.packed, t.count, t.stride, t.n, f, t.acc, "unpack_accumulate_cuda"))
      continue;
    const int64_t blocks =
        (static_cast<int64_t>(packed_bytes(f, t.n)) + kUnpackThreads - 1) / kUnpackThreads;
    UnpackSlot& sl = add_slot(plans, blocks, t.n, "unpack_accumulate_cuda");
    sl.packed = t.packed;
    sl.acc = t.acc;
    sl.n = t.n;
    sl.vectors = t.count;
    sl.stride = t.stride;
  }
  return plans;
}

}  // namespace tg::tern::batch
