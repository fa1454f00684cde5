// Figure 2's gradient histograms (see histograms.h).
#include "terngrad/analysis/histograms.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "nn/core/error.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::tern {

Histogram bin_values(std::span<const float> x, double lo, double hi, int bins) {
  TG_CHECK(bins >= 1, "bin_values: bins must be >= 1, got ", bins);
  TG_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi,
           "bin_values: need finite lo < hi, got [", lo, ", ", hi, "]");
  Histogram h{lo, hi, std::vector<int64_t>(static_cast<size_t>(bins), 0)};
  const double per = bins / (hi - lo);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    TG_CHECK(v >= lo && v <= hi, "bin_values: value ", v, " at index ", i, " lies outside [", lo,
             ", ", hi, "]");
    const auto b = static_cast<int64_t>(std::floor((v - lo) * per));
    ++h.counts[static_cast<size_t>(std::clamp<int64_t>(b, 0, bins - 1))];
  }
  return h;
}

GridCounts grid_counts(std::span<const float> x, double step, int kmax) {
  TG_CHECK(kmax >= 0, "grid_counts: kmax must be >= 0, got ", kmax);
  TG_CHECK(std::isfinite(step) && step >= 0, "grid_counts: step must be finite and >= 0, got ",
           step);
  GridCounts g{step, kmax, std::vector<int64_t>(static_cast<size_t>(2 * kmax + 1), 0)};
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double k = step > 0 ? std::nearbyint(v / step) : 0.0;
    TG_CHECK(std::fabs(v - k * step) <= 1e-3 * step && std::fabs(k) <= kmax, "grid_counts: value ",
             v, " at index ", i, " is not on the grid k * ", step, ", |k| <= ", kmax);
    ++g.counts[static_cast<size_t>(static_cast<int>(k) + kmax)];
  }
  return g;
}

namespace {

// Symmetric bins over ±r; an all-zero range becomes ±1 so the zeros land in the middle bin.
Histogram symmetric_bins(std::span<const float> x, double r, int bins) {
  const double half = r > 0 ? r : 1.0;
  return bin_values(x, -half, half, bins);
}

}  // namespace

std::vector<TensorHistograms> figure2_histograms(std::span<const Tensor> grads,
                                                 const CompressionOptions& o,
                                                 const std::vector<GradSlot>& layout,
                                                 const std::vector<size_t>& slots, int worker,
                                                 int64_t step, int bins) {
  const int n = static_cast<int>(grads.size());
  TG_CHECK(n >= 1, "figure2_histograms: no worker gradients");
  TG_CHECK(worker >= 0 && worker < n, "figure2_histograms: worker ", worker, " out of range 0 .. ",
           n - 1);
  TG_CHECK(bins >= 1, "figure2_histograms: bins must be >= 1, got ", bins);
  TG_CHECK(o.scaler_sharing == ScalerSharing::max,
           "gradient histograms need compression.scaler_sharing = \"max\" (got \"",
           enum_name(kScalerSharings, o.scaler_sharing),
           "\"): with per-worker scalers the averaged gradient lies on no grid");
  TG_CHECK(o.levels == 3, "gradient histograms need compression.levels = 3 (got ", o.levels,
           "): their panels are TernGrad's grid {-s, 0, s}");
  CompressionOptions to = o;
  to.method = Method::terngrad;
  TG_CHECK(!floating_grad_step(to, step), "figure2_histograms: iteration ", step,
           " is in a floating-gradient epoch (compression.floating_grad_epoch): nothing is "
           "ternarized");
  const std::vector<bool> tern = ternarized_slots(layout, to);
  for (size_t t : slots) {
    TG_CHECK(t < layout.size(), "figure2_histograms: slot ", t, " out of range (", layout.size(),
             " slots)");
    TG_CHECK(tern[t], "figure2_histograms: tensor '", layout[t].name,
             "' is not ternarized (compression.min_size, compression.quantize_logits)");
  }

  // The real aggregation (shared scalers, every worker's codes, the average), then worker W's
  // codes alone with the same scalers, by a compressor of its own (an error-feedback residual
  // of that encode must not reach the average).
  const std::unique_ptr<Compressor> c = make_compressor(to, layout);
  const Device cpu = Device::cpu();
  for (int w = 0; w < n; ++w)
    TG_CHECK(grads[w].device() == cpu && grads[w].numel() == c->total(),
             "figure2_histograms: worker ", w, "'s gradient must be f32 [", c->total(),
             "] on the host");
  Tensor avg = Tensor::empty({c->total()}, DType::f32, cpu);
  const std::vector<float> shared = aggregate_local(*c, grads, step, avg).shared_meta;
  Tensor mine = Tensor::empty({c->total()}, DType::f32, cpu);
  {
    const std::unique_ptr<Compressor> alone = make_compressor(to, layout);
    Tensor msg = Tensor::empty({static_cast<int64_t>(alone->payload_bytes(step))}, DType::u8, cpu);
    Accumulator acc = alone->make_accumulator(cpu);
    alone->encode(grads[worker], shared.data(), step, worker, msg);
    alone->accumulate(msg, shared.data(), step, acc);
    alone->finalize(acc, shared.data(), step, 1, mine);
  }

  const Tensor g = grads[worker].contiguous();
  std::vector<TensorHistograms> out;
  for (size_t t : slots) {
    const GradSlot& sl = layout[t];
    const std::span<const float> gt(g.data<float>() + sl.offset, static_cast<size_t>(sl.numel));
    const float s = shared[t * static_cast<size_t>(c->meta_per_slot())];  // the scaler
    TensorHistograms th;
    th.tensor = sl.name;
    th.numel = sl.numel;
    th.scaler = s;
    float gmax = 0;
    std::vector<float> h(gt.size());
    for (size_t i = 0; i < gt.size(); ++i) {
      gmax = std::max(gmax, std::fabs(gt[i]));
      h[i] = std::clamp(gt[i], -s, s);
    }
    th.original = symmetric_bins(gt, gmax, bins);
    th.clipped = symmetric_bins(h, s, bins);
    th.ternary = grid_counts(
        std::span<const float>(mine.data<float>() + sl.offset, static_cast<size_t>(sl.numel)), s,
        1);
    th.averaged = grid_counts(
        std::span<const float>(avg.data<float>() + sl.offset, static_cast<size_t>(sl.numel)),
        static_cast<double>(s) / n, n);
    out.push_back(std::move(th));
  }
  return out;
}

}  // namespace tg::tern
