// The quantities behind TernGrad's convergence argument (Assumption 3, Figure 2), measured on a
// real gradient: how much stronger the ternary gradient's bound is than SGD's, and how layer-wise
// scalers and clipping shrink it. Host computation on f32 spans, double accumulation; no device.
// `terngrad measure-bounds` (cmd/measure_bounds_cmd.h) feeds it with training gradients.
//
// Definitions, for one tensor g of n elements (or the model: the concatenation of every tensor
// the compressor ternarizes):
//   s        the scaler g is ternarized with, exactly as the compressor computes it
//            (terngrad_scaler): clip c > 0 -> s = c * sigma (sigma: population std of g, as
//            tensor_stats_cpu computes it, on the unclipped g); c = 0 -> s = max|g|. Rounded to
//            f32 like the compressor's. Layer scaling: each tensor its own s_l. Model scaling: one
//            s for the concatenation of all ternarized tensors (the same formula on it).
//   h        the gradient that is really ternarized: h_i = clamp(g_i, -s, s). Elements with
//            |g_i| >= s are kept with probability 1 at s * sign(g_i) (ternary_rule.h), i.e.
//            "clip, then ternarize". Without clipping s >= max|g|, so h = g.
//   ternary  t_i = s * sign(h_i) * b_i, P(b_i = 1) = |h_i| / s: E[t] = h,
//            E||t||^2 = s ||h||_1 (the "second moment"), Var = s ||h||_1 - ||h||^2 (derived).
//   bound_ratio   = s ||h||_1 / ||h||^2 >= 1: how much larger TernGrad's second moment is than
//            the (clipped) gradient's own. For the model: sum_l s_l ||h_l||_1 / sum_l ||h_l||^2
//            (s_l = the tensor's own scaler under layer scaling, the model-wide one under model
//            scaling). Without clipping and with s = ||g||_inf it is the paper's
//            ||g||_inf ||g||_1 / ||g||^2 (Assumption 3 versus SGD's bound).
//   inf_l1_ratio  = ||g||_inf ||g||_1 / ||g||^2 >= 1 of the original g (no scaler involved).
//   sparsity      = the expected fraction of zero codes = 1 - sum_i min(|g_i| / s, 1) / n
//            = 1 - ||h||_1 / (n s) (1 when s = 0: an all-zero tensor gives all-zero codes).
//   clipped_fraction = #{i : |g_i| > s} / n; length_ratio = ||h|| / ||g||;
//   angle_deg     = the angle between h and g in degrees (0 when nothing is clipped).
// Ratios with a zero denominator (an all-zero gradient) are NaN (JSON null).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "terngrad/compressor.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

// The scaler of TernGrad's compressor for a tensor with statistics `st` (tensor_stats_cpu):
// terngrad_scaler and ternarized_slots (the compressor's own rules) are in terngrad/compressor.h.

// Sums over the elements of one tensor, or of several (add), with h = clamp(g, -s, s).
struct BoundStats {
  int64_t numel = 0;
  double scaler = 0;         // s; for several tensors the largest s_l
  double g_sq = 0;           // ||g||^2
  double g_l1 = 0;           // ||g||_1
  double g_inf = 0;          // ||g||_inf
  double h_sq = 0;           // ||h||^2
  double h_l1 = 0;           // ||h||_1
  double g_dot_h = 0;        // <g, h>
  double second_moment = 0;  // sum_l s_l ||h_l||_1 = E||ternary||^2
  double keep_sum = 0;       // sum_i min(|g_i| / s, 1): expected number of non-zero codes
  int64_t clipped = 0;       // #{i : |g_i| > s}
  int64_t zero_codes = -1;   // realized zero codes of one real ternarization; -1 = not drawn

  // Adds another tensor's sums (the model row: tensors concatenated, each with its own s_l).
  // zero_codes: an empty total takes the part's; a part with -1 makes the total -1.
  void add(const BoundStats& o);

  double inf_l1() const { return g_inf * g_l1; }  // ||g||_inf ||g||_1
  double inf_l1_ratio() const;                    // ||g||_inf ||g||_1 / ||g||^2
  double bound_ratio() const;                     // second_moment / ||h||^2
  double variance() const { return second_moment - h_sq; }
  double sparsity() const;           // 1 - keep_sum / numel
  double realized_sparsity() const;  // zero_codes / numel; NaN when not drawn
  double clipped_fraction() const;
  double length_ratio() const;  // ||h|| / ||g||
  double angle_deg() const;     // angle(g, h) in degrees
};

// The sums for one tensor g (host f32) ternarized with scaler s >= 0. Throws if s < 0 or is NaN.
BoundStats tensor_bound_stats(std::span<const float> g, float s);

// The realized number of zero codes when g is ternarized with scaler s by the real kernel
// (ternarize_pack_cpu, two_bit) with Philox (seed, stream).
int64_t realized_zero_codes(std::span<const float> g, float s, uint64_t seed, uint64_t stream);

enum class Scaling : uint8_t { layer, model };
const char* name(Scaling s);  // "layer", "model"

struct BoundRow {
  std::string tensor;  // the slot's name, or "model"
  Scaling scaling = Scaling::layer;
  double clip = 0;  // c; 0 = no clipping
  BoundStats stats;
};

// Draw one real ternarization per tensor (for realized_sparsity) with the compressor's Philox
// stream of (step, worker, slot index).
struct RealizedCodes {
  uint64_t seed = 0;
  int64_t step = 0;
  int worker = 0;
};

// One row per ternarized slot of `layout` (in layout order) and a last row "model", for the flat
// gradient g (host f32 [total]) under one (scaling, clip) combination. Throws if g is shorter
// than the layout, `ternarized` has another size than the layout, no slot is ternarized, or clip
// is negative.
std::vector<BoundRow> bound_rows(std::span<const float> g, const std::vector<GradSlot>& layout,
                                 const std::vector<bool>& ternarized, Scaling scaling, double clip,
                                 const RealizedCodes* codes = nullptr);

}  // namespace tg::tern
