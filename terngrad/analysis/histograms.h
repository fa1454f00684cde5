// The gradient histograms of the paper's Figure 2, for one tensor at one iteration:
//   (a) original   worker W's raw gradient g                       equal-width bins over ±max|g|
//   (b) clipped    h = clamp(g, -s, s), the gradient ternarized     equal-width bins over ±s
//   (c) ternary    worker W's ternary gradient s * code, code ∈ {-1, 0, 1}    counts per level
//   (d) averaged   the aggregate every replica applies, (s/N) * Σ_w code_w    counts per level
// s is the tensor's scaler as the compressor uses it: with scaler sharing (the default, "max") the
// max over the N workers of each one's c·σ (or max|g| without clipping), so (b)-(d) are exactly
// what TernGrad's compressor clips, sends and applies. (c) and (d) are not re-derived: they come
// from the real compressor (make_compressor with the given options, method terngrad) run on the N
// gradients with its own Philox streams, i.e. the codes and the aggregate of that training step.
// Host computation on CPU tensors.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nn/core/tensor.h"
#include "terngrad/compressor.h"

namespace tg::tern {

// Equal-width bins over [lo, hi]: bin i holds lo + i·w <= x < lo + (i+1)·w, w = (hi - lo) / bins,
// and x == hi falls in the last bin.
struct Histogram {
  double lo = 0, hi = 0;
  std::vector<int64_t> counts;
};

// Bins x over [lo, hi]. Throws if bins < 1, lo >= hi, either is not finite, or a value lies
// outside [lo, hi] or is NaN (naming it and its index).
Histogram bin_values(std::span<const float> x, double lo, double hi, int bins);

// Values on the grid k·step, k = -kmax .. kmax: counts[k + kmax]. step = 0 is allowed (an all-zero
// tensor: every value must be 0 and lands at k = 0).
struct GridCounts {
  double step = 0;
  int kmax = 0;
  std::vector<int64_t> counts;
  double level(int k) const { return k * step; }
};

// Counts x on the grid k·step. A value counts as k·step when it is within 1e-3·step of it (the
// compressor computes (s/N)·k in f32, whose rounding grows with |k| <= N; levels are a whole step
// apart, so the tolerance cannot confuse two of them). Throws if kmax < 0, step < 0 or not finite,
// or a value is off the grid or beyond ±kmax·step (naming it and its index).
GridCounts grid_counts(std::span<const float> x, double step, int kmax);

struct TensorHistograms {
  std::string tensor;
  int64_t numel = 0;
  float scaler = 0;  // s (shared over the workers)
  Histogram original, clipped;
  GridCounts ternary, averaged;
};

// The four panels for the given slots of `layout` (indices; each must be ternarized under `o`),
// from the N workers' flat gradients at `step` (f32 [total] on the host, N = grads.size()):
// (a) and (b) of worker `worker`, (c) its codes, (d) the aggregate of all N. `o.method` is
// ignored (terngrad is used); scaler_sharing must be max (with per-worker scalers the average
// lies on no common grid). Throws on a slot that is not ternarized (naming it), on a floating-
// gradient step (nothing is ternarized then), bins < 1, or a worker out of range.
std::vector<TensorHistograms> figure2_histograms(std::span<const Tensor> grads,
                                                 const CompressionOptions& o,
                                                 const std::vector<GradSlot>& layout,
                                                 const std::vector<size_t>& slots, int worker,
                                                 int64_t step, int bins);

}  // namespace tg::tern
