// Bound statistics of ternary gradients (see bounds.h for every definition).
#include "terngrad/analysis/bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "nn/core/error.h"
#include "nn/core/philox.h"

namespace tg::tern {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double ratio(double num, double den) {
  return den > 0.0 ? num / den : kNaN;
}

}  // namespace

void BoundStats::add(const BoundStats& o) {
  // An empty total takes the part's zero codes; a part not drawn makes the whole not drawn.
  if (numel == 0)
    zero_codes = o.zero_codes;
  else
    zero_codes = zero_codes < 0 || o.zero_codes < 0 ? -1 : zero_codes + o.zero_codes;
  numel += o.numel;
  scaler = std::max(scaler, o.scaler);
  g_sq += o.g_sq;
  g_l1 += o.g_l1;
  g_inf = std::max(g_inf, o.g_inf);
  h_sq += o.h_sq;
  h_l1 += o.h_l1;
  g_dot_h += o.g_dot_h;
  second_moment += o.second_moment;
  keep_sum += o.keep_sum;
  clipped += o.clipped;
}

double BoundStats::inf_l1_ratio() const {
  return ratio(inf_l1(), g_sq);
}
double BoundStats::bound_ratio() const {
  return ratio(second_moment, h_sq);
}
double BoundStats::sparsity() const {
  return numel > 0 ? 1.0 - keep_sum / static_cast<double>(numel) : kNaN;
}
double BoundStats::realized_sparsity() const {
  return numel > 0 && zero_codes >= 0 ? static_cast<double>(zero_codes) / static_cast<double>(numel)
                                      : kNaN;
}
double BoundStats::clipped_fraction() const {
  return numel > 0 ? static_cast<double>(clipped) / static_cast<double>(numel) : kNaN;
}
double BoundStats::length_ratio() const {
  if (clipped == 0 && g_sq > 0) return 1.0;
  return ratio(std::sqrt(h_sq), std::sqrt(g_sq));
}
double BoundStats::angle_deg() const {
  if (clipped == 0 && g_sq > 0) return 0.0;  // h == g exactly; acos(1 - eps) would not be 0
  const double den = std::sqrt(g_sq) * std::sqrt(h_sq);
  if (!(den > 0.0)) return kNaN;
  const double c = std::clamp(g_dot_h / den, -1.0, 1.0);
  return std::acos(c) * 180.0 / std::numbers::pi;
}

BoundStats tensor_bound_stats(std::span<const float> g, float s) {
  TG_CHECK(s >= 0.0f, "tensor_bound_stats: scaler must be >= 0, got ", s);
  BoundStats b;
  b.numel = static_cast<int64_t>(g.size());
  b.scaler = s;
  const double sd = s;
  for (const float gi : g) {
    const double v = gi, a = std::fabs(v);
    // clamp(g, -s, s); with s = 0 every h_i is 0 (all-zero codes, ternary_kernels.h).
    const double h = a > sd ? std::copysign(sd, v) : v;
    b.g_sq += v * v;
    b.g_l1 += a;
    b.g_inf = std::max(b.g_inf, a);
    b.h_sq += h * h;
    b.h_l1 += std::fabs(h);
    b.g_dot_h += v * h;
    if (a > sd) ++b.clipped;
  }
  b.second_moment = sd * b.h_l1;
  b.keep_sum = sd > 0 ? b.h_l1 / sd : 0.0;  // sum min(|g_i| / s, 1) = ||h||_1 / s
  return b;
}

int64_t realized_zero_codes(std::span<const float> g, float s, uint64_t seed, uint64_t stream) {
  const auto n = static_cast<int64_t>(g.size());
  if (n == 0) return 0;
  std::vector<uint8_t> packed(packed_bytes(PackFormat::two_bit, n));
  ternarize_pack_cpu(g.data(), n, s, seed, stream, PackFormat::two_bit, packed.data());
  std::vector<int32_t> codes(static_cast<size_t>(n), 0);
  unpack_accumulate_cpu(packed.data(), n, PackFormat::two_bit, codes.data());
  return static_cast<int64_t>(std::count(codes.begin(), codes.end(), 0));
}

const char* name(Scaling s) {
  return s == Scaling::layer ? "layer" : "model";
}

std::vector<BoundRow> bound_rows(std::span<const float> g, const std::vector<GradSlot>& layout,
                                 const std::vector<bool>& ternarized, Scaling scaling, double clip,
                                 const RealizedCodes* codes) {
  TG_CHECK(ternarized.size() == layout.size(), "bound_rows: ", ternarized.size(),
           " ternarized flags for a layout of ", layout.size(), " slots");
  TG_CHECK(clip >= 0 && std::isfinite(clip), "bound_rows: clip must be a finite c >= 0, got ",
           clip);
  std::vector<size_t> slots;
  for (size_t t = 0; t < layout.size(); ++t) {
    if (!ternarized[t]) continue;
    const GradSlot& sl = layout[t];
    TG_CHECK(
        sl.offset >= 0 && sl.numel >= 0 && static_cast<uint64_t>(sl.offset + sl.numel) <= g.size(),
        "bound_rows: slot '", sl.name, "' [", sl.offset, ", ", sl.offset + sl.numel,
        ") lies outside the gradient of ", g.size(), " elements");
    slots.push_back(t);
  }
  TG_CHECK(!slots.empty(),
           "bound_rows: no tensor is ternarized (compression.min_size and "
           "compression.quantize_logits exclude all ",
           layout.size(), ")");
  auto span_of = [&](size_t t) { return g.subspan(layout[t].offset, layout[t].numel); };

  // The model-wide scaler: the compressor's scaler of the concatenated ternarized tensors.
  float model_s = 0;
  if (scaling == Scaling::model) {
    std::vector<float> cat;
    for (size_t t : slots) cat.insert(cat.end(), span_of(t).begin(), span_of(t).end());
    TensorStats st;
    tensor_stats_cpu(cat.data(), static_cast<int64_t>(cat.size()), &st);
    model_s = terngrad_scaler(st, clip);
  }

  std::vector<BoundRow> rows;
  BoundStats model;
  for (size_t t : slots) {
    const std::span<const float> gt = span_of(t);
    float s = model_s;
    if (scaling == Scaling::layer) {
      TensorStats st;
      tensor_stats_cpu(gt.data(), static_cast<int64_t>(gt.size()), &st);
      s = terngrad_scaler(st, clip);
    }
    BoundRow r{layout[t].name, scaling, clip, tensor_bound_stats(gt, s)};
    if (codes)
      r.stats.zero_codes =
          realized_zero_codes(gt, s, codes->seed,
                              rng_stream(RngPurpose::ternarize, static_cast<uint64_t>(codes->step),
                                         static_cast<uint64_t>(codes->worker), t));
    model.add(r.stats);
    rows.push_back(std::move(r));
  }
  rows.push_back({"model", scaling, clip, model});
  return rows;
}

}  // namespace tg::tern
