#include "terngrad/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "nn/ops/dispatch.h"
#include "terngrad/baseline_kernels.h"
#include "terngrad/grid_kernels.h"

namespace tg::tern {

namespace {

// ---- device-generic helpers on raw pointers --------------------------------------------------

// The batched forms (one launch per up to 60 tensors on CUDA; the per-tensor kernels in order on
// the CPU, so the same bits either way).
void stats_batch(const Device& d, const std::vector<StatsTask>& t, std::vector<TensorStats>& out) {
  out.assign(t.size(), TensorStats{});
  TG_DISPATCH(d, "tensor_stats", tensor_stats_batch_cpu(t.data(), t.size(), out.data()),
              tensor_stats_batch_cuda(t.data(), t.size(), out.data()));
}

void ternarize_batch(const Device& d, const std::vector<PackTask>& t, uint64_t seed, PackFormat f) {
  TG_DISPATCH(d, "ternarize_pack", ternarize_pack_batch_cpu(t.data(), t.size(), seed, f),
              ternarize_pack_batch_cuda(t.data(), t.size(), seed, f));
}

void scale_batch(const Device& d, const std::vector<ScaleTask>& t) {
  TG_DISPATCH(d, "scale_accumulated", scale_accumulated_batch_cpu(t.data(), t.size()),
              scale_accumulated_batch_cuda(t.data(), t.size()));
}

void unpack(const Device& d, const uint8_t* in, int64_t n, PackFormat f, int32_t* acc) {
  TG_DISPATCH(d, "unpack_accumulate", unpack_accumulate_cpu(in, n, f, acc),
              unpack_accumulate_cuda(in, n, f, acc));
}

void grid_pack(const Device& d, const float* g, int64_t n, float s, int levels, uint64_t seed,
               uint64_t stream, uint8_t* out) {
  TG_DISPATCH(d, "grid_quantize_pack", grid_quantize_pack_cpu(g, n, s, levels, seed, stream, out),
              grid_quantize_pack_cuda(g, n, s, levels, seed, stream, out));
}

void grid_unpack(const Device& d, const uint8_t* in, int64_t n, int levels, int32_t* acc) {
  TG_DISPATCH(d, "grid_unpack_accumulate", grid_unpack_accumulate_cpu(in, n, levels, acc),
              grid_unpack_accumulate_cuda(in, n, levels, acc));
}

void scale_ints(const Device& d, const int32_t* acc, int64_t n, float scale, float* out) {
  TG_DISPATCH(d, "scale_accumulated", scale_accumulated_cpu(acc, n, scale, out),
              scale_accumulated_cuda(acc, n, scale, out));
}

float read_float(const Device& d, const uint8_t* p) {
  float v = 0;
  if (d.is_cpu())
    std::memcpy(&v, p, sizeof v);
  else
    cuda::copy_d2h(d.index, &v, p, sizeof v);
  return v;
}

void write_float(const Device& d, uint8_t* p, float v) {
  if (d.is_cpu())
    std::memcpy(p, &v, sizeof v);
  else
    cuda::copy_h2d(d.index, p, &v, sizeof v);
}

void check_buffers(const Compressor& c, const Tensor& g, const Tensor& msg, size_t bytes) {
  check_tensor(g, "gradient", DType::f32, g.device());
  TG_CHECK(g.is_contiguous() && g.numel() == c.total(), c.name(),
           ": gradient must be a contiguous f32 [", c.total(), "], got ", g.str());
  check_tensor(msg, "message", DType::u8, g.device());
  TG_CHECK(msg.is_contiguous() && static_cast<size_t>(msg.numel()) == bytes, c.name(),
           ": message must be a contiguous u8 [", bytes, "] on the gradient's device, got ",
           msg.str());
}

// Slot t's tensor index in the random streams: its own fixed one, else its position.
uint64_t rng_index(const GradSlot& sl, size_t t) {
  return sl.rng_index >= 0 ? static_cast<uint64_t>(sl.rng_index) : t;
}

// "'a', 'b'" for error messages; "nothing" when empty.
std::string entry_names(const NamedTensors& state) {
  if (state.empty()) return "nothing";
  std::string s;
  for (const auto& [name, t] : state) s += (s.empty() ? "'" : ", '") + name + "'";
  return s;
}

void check_worker(const Compressor& c, const char* what, int worker) {
  TG_CHECK(worker >= 0, c.name(), " ", what, ": worker must be >= 0, got ", worker);
}

// out = 0 + acc.floats / workers at the elements [offset, offset + n): per element the same bits
// whether a call covers one slot, a range or the whole buffer.
void finalize_floats(const Accumulator& acc, int workers, int64_t offset, int64_t n, Tensor& out) {
  const Device d = out.device();
  float* o = out.data<float>() + offset;
  if (n == 0) return;
  if (d.is_cpu())
    std::memset(o, 0, n * sizeof(float));
  else
    cuda::memset_async(d.index, o, 0, n * sizeof(float));
  axpy(d, n, 1.0f / static_cast<float>(workers), acc.float_at(offset), o);
}

// The message layout of range r when every slot t is `bytes(t)` long with coding `coding(t)`.
template <class Bytes, class Coding>
WireLayout layout_of(SlotRange r, Bytes bytes, Coding coding) {
  WireLayout w;
  for (size_t t = r.first; t < r.last; ++t) {
    const auto b = static_cast<int64_t>(bytes(t));
    w.slots.push_back({coding(t), w.bytes, b});
    w.bytes += b;
  }
  return w;
}

// Per-worker residuals, f32 [total] each (error feedback: 1-bit SGD's, and TernGrad's with
// error_feedback), saved as the state entry "residual" (Compressor::state). `who` names the
// method in errors.
class Residuals {
 public:
  Residuals(std::string who, int64_t total) : who_(std::move(who)), total_(total) {}

  // Worker w's residual on device d: zeros before its first use; one restored by load (on the
  // host) is moved to d once.
  float* on(int worker, const Device& d) {
    if (v_.size() <= static_cast<size_t>(worker)) v_.resize(worker + 1);
    Tensor& res = v_[worker];
    if (!res.defined())
      res = Tensor::zeros({total_}, DType::f32, d);
    else if (res.device() != d)
      res = res.to(d);
    return res.data<float>();
  }
  // Worker w's residual if it has one (on any device), else nullptr: an absent residual is zeros.
  const Tensor* find(int worker) const {
    const bool live = static_cast<size_t>(worker) < v_.size() && v_[worker].defined();
    return live ? &v_[worker] : nullptr;
  }

  NamedTensors state(int worker) const {
    const Tensor* r = find(worker);
    return {{"residual", r ? r->clone() : Tensor::zeros({total_})}};
  }

  void load(int worker, const NamedTensors& state) {
    const std::string who = who_ + " load_state: worker " + std::to_string(worker);
    const Tensor* residual = nullptr;
    for (const auto& [name, t] : state) {
      TG_CHECK(name == "residual", who, ": unexpected entry '", name,
               "' (expected 'residual'; got ", entry_names(state), ")");
      TG_CHECK(residual == nullptr, who, ": entry 'residual' appears twice");
      residual = &t;
    }
    TG_CHECK(residual != nullptr, who, ": missing entry 'residual' (expected 'residual'; got ",
             entry_names(state), ")");
    TG_CHECK(residual->defined(), who, ": entry 'residual' is undefined");
    TG_CHECK(
        residual->dtype() == DType::f32 && residual->ndim() == 1 && residual->numel() == total_,
        who, ": 'residual' must be f32 [", total_, "] (the gradient's size), got ",
        residual->str());
    Tensor copy = residual->clone();
    if (v_.size() <= static_cast<size_t>(worker)) v_.resize(worker + 1);
    v_[worker] = std::move(copy);
  }

 private:
  std::string who_;
  int64_t total_ = 0;
  std::vector<Tensor> v_;
};

// ---- none: raw fp32 --------------------------------------------------------------------------

class NoneCompressor final : public Compressor {
 public:
  explicit NoneCompressor(std::vector<GradSlot> layout) : Compressor(std::move(layout)) {}
  std::string name() const override { return "none"; }

 protected:
  WireLayout wire_range(int64_t, SlotRange r) const override {
    return layout_of(
        r, [&](size_t t) { return layout_[t].numel * sizeof(float); },
        [](size_t) { return SlotCoding::f32; });
  }
  void encode_range(const Tensor& g, const float*, int64_t, int, SlotRange r,
                    Tensor& msg) override {
    const auto [b, e] = elements(r);
    copy_bytes(g.device(), msg.raw_data(), g.data<float>() + b, (e - b) * sizeof(float));
  }
  void accumulate_range(const Tensor& msg, const float*, int64_t, SlotRange r,
                        Accumulator& acc) const override {
    const auto [b, e] = elements(r);
    axpy(msg.device(), e - b, 1.0f, reinterpret_cast<const float*>(msg.data<uint8_t>()),
         acc.float_at(b));
  }
  void finalize_range(const Accumulator& acc, const float*, int64_t, int workers, SlotRange r,
                      Tensor& out) const override {
    const auto [b, e] = elements(r);
    finalize_floats(acc, workers, b, e - b, out);
  }
};

// ---- terngrad --------------------------------------------------------------------------------

class TernGradCompressor final : public Compressor {
 public:
  TernGradCompressor(const CompressionOptions& o, std::vector<GradSlot> layout)
      : Compressor(std::move(layout)), o_(o) {
    ternary_ = ternarized_slots(layout_, o_);
  }
  std::string name() const override { return "terngrad"; }
  bool shared() const { return o_.scaler_sharing == ScalerSharing::max; }
  // Per slot: the scaler candidate, and with rescale the length ratio ||clip(g)|| / ||g||.
  int64_t meta_per_slot() const override { return shared() ? (o_.rescale ? 2 : 1) : 0; }
  // A grid of 4 or 5 levels (grid_kernels.h) instead of TernGrad's three.
  bool grid() const { return o_.levels != 3; }
  // The value of integer code 1: s for TernGrad's codes in {-1, 0, 1}, s / (L - 1) for the
  // grid's codes 2j - (L - 1).
  float unit(float s) const { return grid() ? s / static_cast<float>(o_.levels - 1) : s; }

  float integer_sum_scale(const float* shared_meta, int64_t step, int workers, SlotRange r,
                          size_t t) const override {
    TG_CHECK(t >= r.first && t < r.last && shared() && ternary(t, step), name(), ": slot ", t,
             " is not sent as integer-summed ternary codes at step ", step);
    return final_scale(shared_meta + (t - r.first) * meta_per_slot(), workers);
  }

 protected:
  // The reference code's floating_grad_epoch: the last epoch of every F-epoch window is fp32.
  bool floating(int64_t step) const { return floating_grad_step(o_, step); }
  bool ternary(size_t t, int64_t step) const { return ternary_[t] && !floating(step); }

  float scaler_of(const TensorStats& st) const { return terngrad_scaler(st, o_.clip); }

  // The scaler candidates are the gradient's own, with or without error feedback (see
  // CompressionOptions::error_feedback).
  // With rescale also the length ratio of the worker's clipped gradient (at its own scaler);
  // the max over the workers, the least shortened, sets the shared rescale 1 / ratio.
  void local_meta_range(const Tensor& g, SlotRange r, float* meta) const override {
    if (!shared()) return;
    const Device d = g.device();
    const float* p = g.data<float>();
    const int64_t m = meta_per_slot();
    std::vector<StatsTask> tasks;  // the statistics of all ternarized slots in one batched call
    for (size_t t = r.first; t < r.last; ++t)
      if (ternary_[t]) tasks.push_back({p + layout_[t].offset, layout_[t].numel});
    std::vector<TensorStats> st;
    stats_batch(d, tasks, st);
    std::vector<float> scaler(st.size());
    for (size_t k = 0; k < st.size(); ++k) scaler[k] = scaler_of(st[k]);
    // With rescale: ||clamp(g, -s, s)||^2 of every ternarized slot at its own scaler, again in
    // one batched call, for the length ratio ||clip(g)|| / ||g|| in (0, 1] (1 for an all-zero g).
    std::vector<double> clipped(st.size(), 0.0);
    if (o_.rescale) {
      TG_DISPATCH(
          d, "clipped_sum_sq",
          clipped_sum_sq_batch_cpu(tasks.data(), tasks.size(), scaler.data(), clipped.data()),
          clipped_sum_sq_batch_cuda(tasks.data(), tasks.size(), scaler.data(), clipped.data()));
    }
    size_t k = 0;
    for (size_t t = r.first; t < r.last; ++t) {
      float* out = meta + (t - r.first) * m;
      out[0] = 0.0f;
      if (o_.rescale) out[1] = 0.0f;
      if (!ternary_[t]) continue;
      out[0] = scaler[k];
      if (o_.rescale)
        out[1] = st[k].sum_sq > 0
                     ? static_cast<float>(std::min(1.0, std::sqrt(clipped[k] / st[k].sum_sq)))
                     : 1.0f;
      ++k;
    }
  }

  // The factor of a shared-scaler slot's integer sums: s / (N (L - 1)) (L - 1 = 1 for TernGrad),
  // and with rescale divided by the shared length ratio (the norm-preserving rescale, a
  // per-tensor learning-rate compensation of what clipping removed).
  float final_scale(const float* meta, int workers) const {
    const float denom = static_cast<float>(grid() ? (o_.levels - 1) * workers : workers);
    if (!o_.rescale || !(meta[1] > 0)) return meta[0] / denom;
    return meta[0] / (denom * meta[1]);
  }

  // acc += the integer codes of one worker's slot of n elements (TernGrad's or the grid's).
  void unpack_codes(const Device& d, const uint8_t* codes, int64_t n, int32_t* acc) const {
    if (grid())
      grid_unpack(d, codes, n, o_.levels, acc);
    else
      unpack(d, codes, n, o_.pack, acc);
  }

  // Bytes of n codes (TernGrad's packing or the grid's), without a scaler.
  size_t code_bytes(int64_t n) const {
    return grid() ? grid_packed_bytes(o_.levels, n) : packed_bytes(o_.pack, n);
  }

  int64_t largest_slot(SlotRange r) const {
    int64_t n = 0;
    for (size_t t = r.first; t < r.last; ++t) n = std::max(n, layout_[t].numel);
    return n;
  }

  size_t slot_bytes(size_t t, int64_t step) const {
    const int64_t n = layout_[t].numel;
    if (!ternary(t, step)) return static_cast<size_t>(n) * sizeof(float);
    return code_bytes(n) + (shared() ? 0 : sizeof(float));
  }
  WireLayout wire_range(int64_t step, SlotRange r) const override {
    WireLayout w = layout_of(
        r, [&](size_t t) { return slot_bytes(t, step); },
        [&](size_t t) {
          if (!ternary(t, step)) return SlotCoding::f32;
          // The communication layer sums TernGrad's shared-scaler codes itself; a grid's codes
          // only the compressor decodes (still exact integer sums, in accumulate).
          return shared() && !grid() ? SlotCoding::ternary : SlotCoding::opaque;
        });
    w.pack = o_.pack;
    return w;
  }

  // With error feedback, worker w ternarizes v = residual + g of a ternarized slot (with g's
  // scaler) and keeps as its residual what the message does not carry, v - s * code; slots sent
  // as fp32 carry g and leave their residual as it is (zero, unless a floating-gradient epoch
  // interrupts the slot's ternarization: then it waits for the next ternarized step).
  void encode_range(const Tensor& g, const float* shared_meta, int64_t step, int worker,
                    SlotRange r, Tensor& msg) override {
    const Device d = g.device();
    const float* p = g.data<float>();
    uint8_t* m = msg.data<uint8_t>();
    float* res = nullptr;
    if (o_.error_feedback) {
      check_worker(*this, "encode", worker);
      res = residuals_.on(worker, d);
    }
    // Own scalers: the statistics of every ternarized slot first, in one batched call.
    std::vector<TensorStats> own;
    if (!shared()) {
      std::vector<StatsTask> st;
      for (size_t t = r.first; t < r.last; ++t)
        if (ternary(t, step)) st.push_back({p + layout_[t].offset, layout_[t].numel});
      stats_batch(d, st, own);
    }
    // Raw slots are copied and the grid's slots coded one by one; TernGrad's slots (with error
    // feedback: the codes of v = residual + g and the residual update, in the same pass) are
    // gathered and coded in one batched call (ternary_kernels.h).
    std::vector<PackTask> tasks;
    Tensor tmp_i, tmp_f;  // grid with error feedback: decoded codes, made on first use
    size_t k = 0;
    for (size_t t = r.first; t < r.last; ++t) {
      const GradSlot& sl = layout_[t];
      if (!ternary(t, step)) {
        copy_bytes(d, m, p + sl.offset, sl.numel * sizeof(float));
        m += slot_bytes(t, step);
        continue;
      }
      // The scaler is always the gradient's (shared or own), also with error feedback.
      float s = 0;
      uint8_t* codes = m;
      uint8_t* scaler_at = nullptr;
      if (shared()) {
        s = shared_meta[(t - r.first) * meta_per_slot()];
      } else {
        s = scaler_of(own[k++]);
        scaler_at = m;
        codes = m + sizeof(float);
      }
      const uint64_t stream = rng_stream(RngPurpose::ternarize, static_cast<uint64_t>(step),
                                         static_cast<uint64_t>(worker), rng_index(sl, t));
      float* e = res != nullptr ? res + sl.offset : nullptr;
      if (!grid() && sl.numel > 0) {
        tasks.push_back({p + sl.offset, sl.numel, s, stream, codes, scaler_at, e});
      } else {
        if (scaler_at != nullptr) write_float(d, scaler_at, s);
        if (grid()) grid_encode(d, p + sl.offset, e, sl.numel, s, stream, codes, r, tmp_i, tmp_f);
      }
      m += slot_bytes(t, step);
    }
    ternarize_batch(d, tasks, o_.seed, o_.pack);
  }

  // One grid slot of n elements: its codes from g, or with error feedback (e = the slot's
  // residual) from v = residual + g, after which residual = v - unit(s) * code. On the CPU the
  // update runs kResidualChunk elements at a time (element-wise, so the same bits as one pass).
  // tmp_i / tmp_f: the range's scratch for one chunk, made on the first call.
  void grid_encode(const Device& d, const float* g, float* e, int64_t n, float s, uint64_t stream,
                   uint8_t* codes, SlotRange r, Tensor& tmp_i, Tensor& tmp_f) {
    const float* x = g;
    if (e != nullptr) {
      axpy(d, n, 1.0f, g, e);  // e = residual + g = v
      x = e;
    }
    grid_pack(d, x, n, s, o_.levels, o_.seed, stream, codes);
    if (e == nullptr) return;
    if (!tmp_i.defined()) {
      const int64_t c = d.is_cpu() ? std::min(kResidualChunk, largest_slot(r)) : largest_slot(r);
      tmp_i = Tensor::empty({c}, DType::i32, d);
      tmp_f = Tensor::empty({c}, DType::f32, d);
    }
    const int64_t chunk = tmp_i.numel();
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t len = std::min(chunk, n - c0);
      Tensor ci = tmp_i.slice(0, 0, len);
      ci.zero_();
      unpack_codes(d, codes + code_bytes(c0), len, ci.data<int32_t>());
      scale_ints(d, ci.data<int32_t>(), len, unit(s), tmp_f.data<float>());
      axpy(d, len, -1.0f, tmp_f.data<float>(), e + c0);
    }
  }

  void accumulate_range(const Tensor& msg, const float*, int64_t step, SlotRange r,
                        Accumulator& acc) const override {
    const Device d = msg.device();
    const uint8_t* m = msg.data<uint8_t>();
    Tensor tmp_i, tmp_f;  // scratch, made on first use, sized for the largest slot
    auto scratch = [&] {
      if (tmp_i.defined()) return;
      int64_t largest = 0;
      for (const GradSlot& x : layout_) largest = std::max(largest, x.numel);
      tmp_i = Tensor::empty({largest}, DType::i32, d);
      tmp_f = Tensor::empty({largest}, DType::f32, d);
    };
    for (size_t t = r.first; t < r.last; ++t) {
      const GradSlot& sl = layout_[t];
      if (!ternary(t, step)) {
        // Raw floats follow code slots of any byte length, so they may sit at an address that is
        // not a multiple of 4 (not a valid float* on the GPU): read those through an aligned copy.
        const float* src = reinterpret_cast<const float*>(m);
        if (reinterpret_cast<uintptr_t>(m) % alignof(float) != 0) {
          scratch();
          copy_bytes(d, tmp_f.data<float>(), m, sl.numel * sizeof(float));
          src = tmp_f.data<float>();
        }
        axpy(d, sl.numel, 1.0f, src, acc.float_at(sl.offset));
      } else if (shared()) {
        unpack_codes(d, m, sl.numel, acc.int_at(sl.offset));  // exact integer code sums
      } else {
        // Own scalers (the no-sharing ablation): codes of different workers are on different
        // grids, so they are summed as floats s_w * code (in message order).
        const float s = read_float(d, m);
        scratch();
        Tensor codes = tmp_i.slice(0, 0, sl.numel);
        codes.zero_();
        unpack_codes(d, m + sizeof(float), sl.numel, tmp_i.data<int32_t>());
        scale_ints(d, tmp_i.data<int32_t>(), sl.numel, unit(s), tmp_f.data<float>());
        axpy(d, sl.numel, 1.0f, tmp_f.data<float>(), acc.float_at(sl.offset));
      }
      m += slot_bytes(t, step);
    }
  }

  void finalize_range(const Accumulator& acc, const float* shared_meta, int64_t step, int workers,
                      SlotRange r, Tensor& out) const override {
    // Shared scalers: ternary slots are (s / N) * integer sums, the rest (raw slots, or every
    // slot in a floating-gradient epoch) float sums; each slot written once. Own scalers: every
    // slot was summed as floats.
    const Device d = out.device();
    std::vector<ScaleTask> tasks;  // the integer-sum slots, scaled in one batched call
    for (size_t t = r.first; t < r.last; ++t) {
      const GradSlot& sl = layout_[t];
      if (shared() && ternary(t, step) && acc.ints_final) continue;  // written by the exchange
      if (shared() && ternary(t, step))
        tasks.push_back({acc.int_at(sl.offset), sl.numel,
                         final_scale(shared_meta + (t - r.first) * meta_per_slot(), workers),
                         out.data<float>() + sl.offset});
      else
        finalize_floats(acc, workers, sl.offset, sl.numel, out);
    }
    scale_batch(d, tasks);
  }

 public:
  NamedTensors state(int worker) const override {
    if (!o_.error_feedback) return Compressor::state(worker);
    check_worker(*this, "state", worker);
    return residuals_.state(worker);
  }

  void load_state(int worker, const NamedTensors& state) override {
    if (!o_.error_feedback) return Compressor::load_state(worker, state);
    check_worker(*this, "load_state", worker);
    residuals_.load(worker, state);
  }

 private:
  CompressionOptions o_;
  std::vector<bool> ternary_;
  Residuals residuals_{"terngrad (error feedback)", total_};  // error_feedback: per worker
};

// ---- fp16, qsgd, onebit: per-slot baselines accumulated as floats ------------------------------

class BaselineCompressor final : public Compressor {
 public:
  BaselineCompressor(const CompressionOptions& o, std::vector<GradSlot> layout)
      : Compressor(std::move(layout)), o_(o) {}
  std::string name() const override { return std::string(enum_name(kMethods, o_.method)); }

 protected:
  size_t slot_bytes(const GradSlot& sl) const {
    if (o_.method == Method::fp16) return fp16_packed_bytes(sl.numel);
    if (o_.method == Method::qsgd)
      return qsgd_packed_bytes(sl.numel, o_.qsgd_levels, o_.qsgd_bucket);
    return onebit_packed_bytes(sl.numel);
  }
  WireLayout wire_range(int64_t, SlotRange r) const override {
    const SlotCoding coding = o_.method == Method::fp16 ? SlotCoding::f16 : SlotCoding::opaque;
    return layout_of(
        r, [&](size_t t) { return slot_bytes(layout_[t]); }, [&](size_t) { return coding; });
  }

  void encode_range(const Tensor& g, const float*, int64_t step, int worker, SlotRange r,
                    Tensor& msg) override {
    const Device d = g.device();
    const float* p = g.data<float>();
    uint8_t* m = msg.data<uint8_t>();
    float* residual = nullptr;
    if (o_.method == Method::onebit) {
      check_worker(*this, "encode", worker);
      residual = residuals_.on(worker, d);
    }
    for (size_t t = r.first; t < r.last; ++t) {
      const GradSlot& sl = layout_[t];
      const float* gs = p + sl.offset;
      if (o_.method == Method::fp16) {
        TG_DISPATCH(d, "fp16_pack", fp16_pack_cpu(gs, sl.numel, m),
                    fp16_pack_cuda(gs, sl.numel, m));
      } else if (o_.method == Method::qsgd) {
        const uint64_t stream = rng_stream(RngPurpose::ternarize, static_cast<uint64_t>(step),
                                           static_cast<uint64_t>(worker), rng_index(sl, t));
        TG_DISPATCH(
            d, "qsgd_pack",
            qsgd_pack_cpu(gs, sl.numel, o_.qsgd_levels, o_.qsgd_bucket, o_.seed, stream, m),
            qsgd_pack_cuda(gs, sl.numel, o_.qsgd_levels, o_.qsgd_bucket, o_.seed, stream, m));
      } else {
        float* rs = residual + sl.offset;
        TG_DISPATCH(d, "onebit_pack", onebit_pack_cpu(gs, rs, sl.numel, m),
                    onebit_pack_cuda(gs, rs, sl.numel, m));
      }
      m += slot_bytes(sl);
    }
  }

  void accumulate_range(const Tensor& msg, const float*, int64_t, SlotRange r,
                        Accumulator& acc) const override {
    const Device d = msg.device();
    const uint8_t* m = msg.data<uint8_t>();
    for (size_t t = r.first; t < r.last; ++t) {
      const GradSlot& sl = layout_[t];
      float* a = acc.float_at(sl.offset);
      if (o_.method == Method::fp16) {
        TG_DISPATCH(d, "fp16_unpack", fp16_unpack_accumulate_cpu(m, sl.numel, 1.0f, a),
                    fp16_unpack_accumulate_cuda(m, sl.numel, 1.0f, a));
      } else if (o_.method == Method::qsgd) {
        TG_DISPATCH(
            d, "qsgd_unpack",
            qsgd_unpack_accumulate_cpu(m, sl.numel, o_.qsgd_levels, o_.qsgd_bucket, 1.0f, a),
            qsgd_unpack_accumulate_cuda(m, sl.numel, o_.qsgd_levels, o_.qsgd_bucket, 1.0f, a));
      } else {
        TG_DISPATCH(d, "onebit_unpack", onebit_unpack_accumulate_cpu(m, sl.numel, 1.0f, a),
                    onebit_unpack_accumulate_cuda(m, sl.numel, 1.0f, a));
      }
      m += slot_bytes(sl);
    }
  }

  void finalize_range(const Accumulator& acc, const float*, int64_t, int workers, SlotRange r,
                      Tensor& out) const override {
    const auto [b, e] = elements(r);
    finalize_floats(acc, workers, b, e - b, out);
  }

 public:
  NamedTensors state(int worker) const override {
    if (o_.method != Method::onebit) return Compressor::state(worker);
    check_worker(*this, "state", worker);
    return residuals_.state(worker);
  }

  void load_state(int worker, const NamedTensors& state) override {
    if (o_.method != Method::onebit) return Compressor::load_state(worker, state);
    check_worker(*this, "load_state", worker);
    residuals_.load(worker, state);
  }

 private:
  CompressionOptions o_;
  Residuals residuals_{"onebit", total_};  // onebit: error feedback, one per worker
};

}  // namespace

Compressor::Compressor(std::vector<GradSlot> layout) : layout_(std::move(layout)) {
  int64_t expect = 0;
  for (const GradSlot& s : layout_) {
    TG_CHECK(s.offset == expect && s.numel >= 0, "compressor layout: slot '", s.name,
             "' must start at ", expect, " (slots are contiguous, in order), got offset ",
             s.offset);
    expect += s.numel;
  }
  total_ = expect;
}

const char* name(SlotCoding c) {
  switch (c) {
    case SlotCoding::f32:
      return "f32";
    case SlotCoding::f16:
      return "f16";
    case SlotCoding::ternary:
      return "ternary";
    case SlotCoding::opaque:
      return "opaque";
  }
  return "?";
}

bool WireLayout::uniform(SlotCoding c) const {
  return std::all_of(slots.begin(), slots.end(), [c](const SlotWire& s) { return s.coding == c; });
}

bool WireLayout::any(SlotCoding c) const {
  return std::any_of(slots.begin(), slots.end(), [c](const SlotWire& s) { return s.coding == c; });
}

SlotRange Compressor::resolve(SlotRange r) const {
  if (r.first == 0 && r.last == 0) return all_slots();
  TG_CHECK(r.first < r.last && r.last <= layout_.size(), name(), ": slot range [", r.first, ", ",
           r.last, ") is not a non-empty range of the ", layout_.size(), " slots");
  return r;
}

std::pair<int64_t, int64_t> Compressor::elements(SlotRange r) const {
  r = resolve(r);
  if (r.size() == 0) return {0, 0};
  return {layout_[r.first].offset, layout_[r.last - 1].offset + layout_[r.last - 1].numel};
}

int64_t Compressor::num_meta(SlotRange r) const {
  return meta_per_slot() * static_cast<int64_t>(resolve(r).size());
}

void Compressor::local_meta(const Tensor& g, float* meta, SlotRange r) const {
  r = resolve(r);
  check_tensor(g, "gradient", DType::f32, g.device());
  TG_CHECK(g.is_contiguous() && g.numel() == total_, name(),
           ": gradient must be a contiguous f32 [", total_, "], got ", g.str());
  local_meta_range(g, r, meta);
}

WireLayout Compressor::wire(int64_t step, SlotRange r) const {
  return wire_range(step, resolve(r));
}

size_t Compressor::payload_bytes(int64_t step, SlotRange r) const {
  return static_cast<size_t>(wire(step, r).bytes);
}

void Compressor::encode(const Tensor& g, const float* shared, int64_t step, int worker, Tensor& msg,
                        SlotRange r) {
  r = resolve(r);
  check_buffers(*this, g, msg, payload_bytes(step, r));
  encode_range(g, shared, step, worker, r, msg);
}

void Compressor::accumulate(const Tensor& msg, const float* shared, int64_t step, Accumulator& acc,
                            SlotRange r) const {
  r = resolve(r);
  const size_t bytes = payload_bytes(step, r);
  TG_CHECK(
      msg.dtype() == DType::u8 && msg.is_contiguous() && static_cast<size_t>(msg.numel()) == bytes,
      name(), ": message must be a contiguous u8 [", bytes, "], got ", msg.str());
  accumulate_range(msg, shared, step, r, acc);
}

float Compressor::integer_sum_scale(const float*, int64_t, int, SlotRange, size_t) const {
  TG_THROW(name(), ": no slot is sent as integer-summed ternary codes");
}

void Compressor::finalize(const Accumulator& acc, const float* shared, int64_t step, int workers,
                          Tensor& out, SlotRange r) const {
  r = resolve(r);
  TG_CHECK(workers >= 1, name(), " finalize: workers must be >= 1, got ", workers);
  TG_CHECK(out.dtype() == DType::f32 && out.is_contiguous() && out.numel() == total_, name(),
           " finalize: out must be a contiguous f32 [", total_, "], got ", out.str());
  finalize_range(acc, shared, step, workers, r, out);
}

NamedTensors Compressor::state(int worker) const {
  check_worker(*this, "state", worker);
  return {};
}

void Compressor::load_state(int worker, const NamedTensors& state) {
  check_worker(*this, "load_state", worker);
  TG_CHECK(state.empty(), name(), " load_state: worker ", worker,
           ": the method keeps no state, got ", entry_names(state));
}

Accumulator Compressor::make_accumulator(const Device& device, SlotRange r) const {
  const auto [b, e] = elements(r);
  return {Tensor::zeros({e - b}, DType::i32, device), Tensor::zeros({e - b}, DType::f32, device),
          b};
}

std::vector<std::string> compressor_names() {
  std::vector<std::string> out;
  for (std::string_view n : enum_names(kMethods)) out.emplace_back(n);
  return out;
}

bool identity_for_one_worker(const CompressionOptions& o) {
  return o.method == Method::none;
}

std::unique_ptr<Compressor> make_compressor(const CompressionOptions& o,
                                            std::vector<GradSlot> layout) {
  TG_CHECK(o.clip >= 0 && std::isfinite(o.clip), "compression.clip must be >= 0, got ", o.clip);
  TG_CHECK(o.min_size >= 0, "compression.min_size must be >= 0, got ", o.min_size);
  TG_CHECK(o.floating_grad_epoch >= 0, "compression.floating_grad_epoch must be >= 0, got ",
           o.floating_grad_epoch);
  TG_CHECK(o.floating_grad_epoch == 0 || o.steps_per_epoch > 0,
           "compression.floating_grad_epoch needs the number of steps per epoch");
  TG_CHECK(o.qsgd_levels >= 1 && o.qsgd_levels <= kMaxQsgdLevels,
           "compression.qsgd_levels must be in [1, ", kMaxQsgdLevels, "], got ", o.qsgd_levels);
  TG_CHECK(o.qsgd_bucket >= 1, "compression.qsgd_bucket must be >= 1, got ", o.qsgd_bucket);
  TG_CHECK(!o.rescale || o.method != Method::terngrad || o.scaler_sharing == ScalerSharing::max,
           "compression.rescale needs compression.scaler_sharing = \"max\" (the rescale is "
           "shared with the scaler)");
  TG_CHECK(o.levels >= kMinLevels && o.levels <= kMaxLevels, "compression.levels must be in [",
           kMinLevels, ", ", kMaxLevels, "], got ", o.levels);
  if (o.method == Method::none) return std::make_unique<NoneCompressor>(std::move(layout));
  if (o.method == Method::terngrad)
    return std::make_unique<TernGradCompressor>(o, std::move(layout));
  if (o.method == Method::fp16 || o.method == Method::qsgd || o.method == Method::onebit)
    return std::make_unique<BaselineCompressor>(o, std::move(layout));
  TG_THROW("compression.method: no compressor for method ", static_cast<int>(o.method));
}

float terngrad_scaler(const TensorStats& st, double clip) {
  TG_CHECK(clip >= 0 && std::isfinite(clip), "terngrad_scaler: clip must be a finite c >= 0, got ",
           clip);
  return static_cast<float>(clip > 0 ? clip * st.sigma() : st.max_abs);
}

std::vector<bool> ternarized_slots(const std::vector<GradSlot>& layout,
                                   const CompressionOptions& o) {
  const size_t n = layout.size();
  std::vector<bool> out(n);
  for (size_t t = 0; t < n; ++t) {
    const bool logits = n >= 2 && t >= n - 2;
    out[t] = layout[t].numel >= o.min_size && (o.quantize_logits || !logits);
  }
  return out;
}

bool floating_grad_step(const CompressionOptions& o, int64_t step) {
  if (o.floating_grad_epoch <= 0) return false;
  TG_CHECK(o.steps_per_epoch > 0, "compression.floating_grad_epoch = ", o.floating_grad_epoch,
           " needs steps_per_epoch > 0 (got ", o.steps_per_epoch, ")");
  const auto e = static_cast<int64_t>(std::floor(static_cast<double>(step) / o.steps_per_epoch));
  return e % o.floating_grad_epoch == o.floating_grad_epoch - 1;
}

}  // namespace tg::tern
