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

namespace tg::tern {

namespace {

// ---- device-generic helpers on raw pointers --------------------------------------------------

void copy_bytes(const Device& d, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (d.is_cpu())
    std::memcpy(dst, src, n);
  else
    cuda::copy_d2d(d.index, dst, src, n);
}

TensorStats stats(const Device& d, const float* g, int64_t n) {
  TensorStats st;
  TG_DISPATCH(d, "tensor_stats", tensor_stats_cpu(g, n, &st), tensor_stats_cuda(g, n, &st));
  return st;
}

void ternarize(const Device& d, const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
               PackFormat f, uint8_t* out) {
  TG_DISPATCH(d, "ternarize_pack", ternarize_pack_cpu(g, n, s, seed, stream, f, out),
              ternarize_pack_cuda(g, n, s, seed, stream, f, out));
}

void unpack(const Device& d, const uint8_t* in, int64_t n, PackFormat f, int32_t* acc) {
  TG_DISPATCH(d, "unpack_accumulate", unpack_accumulate_cpu(in, n, f, acc),
              unpack_accumulate_cuda(in, n, f, acc));
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
  TG_CHECK(g.is_contiguous() && g.numel() == c.total(), c.name(), ": gradient must be a contiguous f32 [",
           c.total(), "], got ", g.str());
  check_tensor(msg, "message", DType::u8, g.device());
  TG_CHECK(msg.is_contiguous() && static_cast<size_t>(msg.numel()) == bytes, c.name(),
           ": message must be a contiguous u8 [", bytes, "] on the gradient's device, got ",
           msg.str());
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

// out = acc.floats / workers over the whole buffer.
void finalize_floats(const Accumulator& acc, int workers, Tensor& out) {
  out.zero_();
  axpy(out.device(), out.numel(), 1.0f / static_cast<float>(workers), acc.floats.data<float>(),
       out.data<float>());
}

// The same for the elements [offset, offset + n) only (0 + x / workers: the same bits).
void finalize_floats_slot(const Accumulator& acc, int workers, int64_t offset, int64_t n,
                          Tensor& out) {
  const Device d = out.device();
  float* o = out.data<float>() + offset;
  if (d.is_cpu())
    std::memset(o, 0, n * sizeof(float));
  else
    cuda::memset_async(d.index, o, 0, n * sizeof(float));
  axpy(d, n, 1.0f / static_cast<float>(workers), acc.floats.data<float>() + offset, o);
}

// ---- none: raw fp32 --------------------------------------------------------------------------

class NoneCompressor final : public Compressor {
 public:
  explicit NoneCompressor(std::vector<GradSlot> layout) : Compressor(std::move(layout)) {}
  std::string name() const override { return "none"; }
  size_t payload_bytes(int64_t) const override { return fp32_bytes(); }
  void encode(const Tensor& g, const float*, int64_t step, int, Tensor& msg) override {
    check_buffers(*this, g, msg, payload_bytes(step));
    copy_bytes(g.device(), msg.raw_data(), g.raw_data(), fp32_bytes());
  }
  void accumulate(const Tensor& msg, const float*, int64_t, Accumulator& acc) const override {
    axpy(msg.device(), total_, 1.0f, reinterpret_cast<const float*>(msg.data<uint8_t>()),
         acc.floats.data<float>());
  }
  void finalize(const Accumulator& acc, const float*, int64_t, int workers,
                Tensor& out) const override {
    finalize_floats(acc, workers, out);
  }
  bool elementwise_fp32() const override { return true; }
};

// ---- terngrad --------------------------------------------------------------------------------

class TernGradCompressor final : public Compressor {
 public:
  TernGradCompressor(const CompressionOptions& o, std::vector<GradSlot> layout)
      : Compressor(std::move(layout)), o_(o) {
    ternary_ = ternarized_slots(layout_, o_);
  }
  std::string name() const override { return "terngrad"; }
  bool shared() const { return o_.scaler_sharing == "max"; }
  int64_t num_meta() const override { return shared() ? static_cast<int64_t>(layout_.size()) : 0; }

  // The reference code's floating_grad_epoch: the last epoch of every F-epoch window is fp32.
  bool floating(int64_t step) const { return floating_grad_step(o_, step); }
  bool ternary(size_t t, int64_t step) const { return ternary_[t] && !floating(step); }

  float scaler_of(const TensorStats& st) const { return terngrad_scaler(st, o_.clip); }

  void local_meta(const Tensor& g, float* meta) const override {
    if (!shared()) return;
    const float* p = g.data<float>();
    for (size_t t = 0; t < layout_.size(); ++t)
      meta[t] = ternary_[t] ? scaler_of(stats(g.device(), p + layout_[t].offset, layout_[t].numel))
                            : 0.0f;
  }

  size_t slot_bytes(size_t t, int64_t step) const {
    const int64_t n = layout_[t].numel;
    if (!ternary(t, step)) return static_cast<size_t>(n) * sizeof(float);
    return packed_bytes(o_.pack, n) + (shared() ? 0 : sizeof(float));
  }
  size_t payload_bytes(int64_t step) const override {
    size_t b = 0;
    for (size_t t = 0; t < layout_.size(); ++t) b += slot_bytes(t, step);
    return b;
  }

  void encode(const Tensor& g, const float* shared_meta, int64_t step, int worker,
              Tensor& msg) override {
    check_buffers(*this, g, msg, payload_bytes(step));
    const Device d = g.device();
    const float* p = g.data<float>();
    uint8_t* m = msg.data<uint8_t>();
    for (size_t t = 0; t < layout_.size(); ++t) {
      const GradSlot& sl = layout_[t];
      if (!ternary(t, step)) {
        copy_bytes(d, m, p + sl.offset, sl.numel * sizeof(float));
      } else {
        float s = 0;
        uint8_t* codes = m;
        if (shared()) {
          s = shared_meta[t];
        } else {
          s = scaler_of(stats(d, p + sl.offset, sl.numel));
          write_float(d, m, s);
          codes = m + sizeof(float);
        }
        ternarize(d, p + sl.offset, sl.numel, s, o_.seed,
                  rng_stream(RngPurpose::ternarize, static_cast<uint64_t>(step),
                             static_cast<uint64_t>(worker), t),
                  o_.pack, codes);
      }
      m += slot_bytes(t, step);
    }
  }

  void accumulate(const Tensor& msg, const float*, int64_t step, Accumulator& acc) const override {
    const Device d = msg.device();
    const uint8_t* m = msg.data<uint8_t>();
    int32_t* ints = acc.ints.data<int32_t>();
    float* floats = acc.floats.data<float>();
    Tensor tmp_i, tmp_f;  // scratch, made on first use, sized for the largest slot
    auto scratch = [&] {
      if (tmp_i.defined()) return;
      int64_t largest = 0;
      for (const GradSlot& x : layout_) largest = std::max(largest, x.numel);
      tmp_i = Tensor::empty({largest}, DType::i32, d);
      tmp_f = Tensor::empty({largest}, DType::f32, d);
    };
    for (size_t t = 0; t < layout_.size(); ++t) {
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
        axpy(d, sl.numel, 1.0f, src, floats + sl.offset);
      } else if (shared()) {
        unpack(d, m, sl.numel, o_.pack, ints + sl.offset);  // exact integer code sums
      } else {
        // Own scalers (the no-sharing ablation): codes of different workers are on different
        // grids, so they are summed as floats s_w * code (in message order).
        const float s = read_float(d, m);
        scratch();
        Tensor codes = tmp_i.slice(0, 0, sl.numel);
        codes.zero_();
        unpack(d, m + sizeof(float), sl.numel, o_.pack, tmp_i.data<int32_t>());
        scale_ints(d, tmp_i.data<int32_t>(), sl.numel, s, tmp_f.data<float>());
        axpy(d, sl.numel, 1.0f, tmp_f.data<float>(), floats + sl.offset);
      }
      m += slot_bytes(t, step);
    }
  }

  void finalize(const Accumulator& acc, const float* shared_meta, int64_t step, int workers,
                Tensor& out) const override {
    if (!shared()) return finalize_floats(acc, workers, out);  // every slot summed as floats
    // Shared scalers: ternary slots are (s / N) * integer sums, the rest (raw slots, or every
    // slot in a floating-gradient epoch) float sums; each slot written once.
    const Device d = out.device();
    for (size_t t = 0; t < layout_.size(); ++t) {
      const GradSlot& sl = layout_[t];
      if (ternary(t, step))
        scale_ints(d, acc.ints.data<int32_t>() + sl.offset, sl.numel,
                   shared_meta[t] / static_cast<float>(workers), out.data<float>() + sl.offset);
      else
        finalize_floats_slot(acc, workers, sl.offset, sl.numel, out);
    }
  }

 private:
  CompressionOptions o_;
  std::vector<bool> ternary_;
};

// ---- fp16, qsgd, onebit: per-slot baselines accumulated as floats ------------------------------

class BaselineCompressor final : public Compressor {
 public:
  BaselineCompressor(const CompressionOptions& o, std::vector<GradSlot> layout)
      : Compressor(std::move(layout)), o_(o) {}
  std::string name() const override { return o_.method; }

  size_t slot_bytes(const GradSlot& sl) const {
    if (o_.method == "fp16") return fp16_packed_bytes(sl.numel);
    if (o_.method == "qsgd") return qsgd_packed_bytes(sl.numel, o_.qsgd_levels, o_.qsgd_bucket);
    return onebit_packed_bytes(sl.numel);
  }
  size_t payload_bytes(int64_t) const override {
    size_t b = 0;
    for (const GradSlot& sl : layout_) b += slot_bytes(sl);
    return b;
  }

  void encode(const Tensor& g, const float*, int64_t step, int worker, Tensor& msg) override {
    check_buffers(*this, g, msg, payload_bytes(step));
    const Device d = g.device();
    const float* p = g.data<float>();
    uint8_t* m = msg.data<uint8_t>();
    float* residual = nullptr;
    if (o_.method == "onebit") {
      check_worker(*this, "encode", worker);
      if (residuals_.size() <= static_cast<size_t>(worker)) residuals_.resize(worker + 1);
      Tensor& r = residuals_[worker];
      if (!r.defined())
        r = Tensor::zeros({total_}, DType::f32, d);
      else if (r.device() != d)
        r = r.to(d);  // restored by load_state (from a checkpoint on the host): moved once
      residual = r.data<float>();
    }
    for (size_t t = 0; t < layout_.size(); ++t) {
      const GradSlot& sl = layout_[t];
      const float* gs = p + sl.offset;
      if (o_.method == "fp16") {
        TG_DISPATCH(d, "fp16_pack", fp16_pack_cpu(gs, sl.numel, m), fp16_pack_cuda(gs, sl.numel, m));
      } else if (o_.method == "qsgd") {
        const uint64_t stream = rng_stream(RngPurpose::ternarize, static_cast<uint64_t>(step),
                                           static_cast<uint64_t>(worker), t);
        TG_DISPATCH(d, "qsgd_pack",
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

  void accumulate(const Tensor& msg, const float*, int64_t, Accumulator& acc) const override {
    const Device d = msg.device();
    const uint8_t* m = msg.data<uint8_t>();
    float* floats = acc.floats.data<float>();
    for (const GradSlot& sl : layout_) {
      float* a = floats + sl.offset;
      if (o_.method == "fp16") {
        TG_DISPATCH(d, "fp16_unpack", fp16_unpack_accumulate_cpu(m, sl.numel, 1.0f, a),
                    fp16_unpack_accumulate_cuda(m, sl.numel, 1.0f, a));
      } else if (o_.method == "qsgd") {
        TG_DISPATCH(d, "qsgd_unpack",
                    qsgd_unpack_accumulate_cpu(m, sl.numel, o_.qsgd_levels, o_.qsgd_bucket, 1.0f, a),
                    qsgd_unpack_accumulate_cuda(m, sl.numel, o_.qsgd_levels, o_.qsgd_bucket, 1.0f, a));
      } else {
        TG_DISPATCH(d, "onebit_unpack", onebit_unpack_accumulate_cpu(m, sl.numel, 1.0f, a),
                    onebit_unpack_accumulate_cuda(m, sl.numel, 1.0f, a));
      }
      m += slot_bytes(sl);
    }
  }

  void finalize(const Accumulator& acc, const float*, int64_t, int workers,
                Tensor& out) const override {
    finalize_floats(acc, workers, out);
  }

  NamedTensors state(int worker) const override {
    if (o_.method != "onebit") return Compressor::state(worker);
    check_worker(*this, "state", worker);
    const bool live =
        static_cast<size_t>(worker) < residuals_.size() && residuals_[worker].defined();
    return {{"residual", live ? residuals_[worker].clone() : Tensor::zeros({total_})}};
  }

  void load_state(int worker, const NamedTensors& state) override {
    if (o_.method != "onebit") return Compressor::load_state(worker, state);
    check_worker(*this, "load_state", worker);
    const Tensor* residual = nullptr;
    for (const auto& [name, t] : state) {
      TG_CHECK(name == "residual", "onebit load_state: worker ", worker, ": unexpected entry '",
               name, "' (expected 'residual'; got ", entry_names(state), ")");
      TG_CHECK(residual == nullptr, "onebit load_state: worker ", worker,
               ": entry 'residual' appears twice");
      residual = &t;
    }
    TG_CHECK(residual != nullptr, "onebit load_state: worker ", worker,
             ": missing entry 'residual' (expected 'residual'; got ", entry_names(state), ")");
    TG_CHECK(residual->defined(), "onebit load_state: worker ", worker,
             ": entry 'residual' is undefined");
    TG_CHECK(
        residual->dtype() == DType::f32 && residual->ndim() == 1 && residual->numel() == total_,
        "onebit load_state: worker ", worker, ": 'residual' must be f32 [", total_,
        "] (the gradient's size), got ", residual->str());
    Tensor copy = residual->clone();
    if (residuals_.size() <= static_cast<size_t>(worker)) residuals_.resize(worker + 1);
    residuals_[worker] = std::move(copy);
  }

 private:
  CompressionOptions o_;
  std::vector<Tensor> residuals_;  // onebit: error feedback, one per worker
};

}  // namespace

Compressor::Compressor(std::vector<GradSlot> layout) : layout_(std::move(layout)) {
  int64_t expect = 0;
  for (const GradSlot& s : layout_) {
    TG_CHECK(s.offset == expect && s.numel >= 0, "compressor layout: slot '", s.name,
             "' must start at ", expect, " (slots are contiguous, in order), got offset ", s.offset);
    expect += s.numel;
  }
  total_ = expect;
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

Accumulator Compressor::make_accumulator(const Device& device) const {
  return {Tensor::zeros({total_}, DType::i32, device), Tensor::zeros({total_}, DType::f32, device)};
}

std::vector<std::string> compressor_names() { return {"none", "fp16", "terngrad", "qsgd", "onebit"}; }

std::unique_ptr<Compressor> make_compressor(const CompressionOptions& o,
                                            std::vector<GradSlot> layout) {
  TG_CHECK(o.clip >= 0 && std::isfinite(o.clip), "compression.clip must be >= 0, got ", o.clip);
  TG_CHECK(o.min_size >= 0, "compression.min_size must be >= 0, got ", o.min_size);
  TG_CHECK(o.floating_grad_epoch >= 0, "compression.floating_grad_epoch must be >= 0, got ",
           o.floating_grad_epoch);
  TG_CHECK(o.floating_grad_epoch == 0 || o.steps_per_epoch > 0,
           "compression.floating_grad_epoch needs the number of steps per epoch");
  TG_CHECK(o.scaler_sharing == "max" || o.scaler_sharing == "none",
           "compression.scaler_sharing must be 'max' or 'none', got '", o.scaler_sharing, "'");
  TG_CHECK(o.qsgd_levels >= 1 && o.qsgd_levels <= 127, "compression.qsgd_levels must be in [1, 127], got ",
           o.qsgd_levels);
  TG_CHECK(o.qsgd_bucket >= 1, "compression.qsgd_bucket must be >= 1, got ", o.qsgd_bucket);
  if (o.method == "none") return std::make_unique<NoneCompressor>(std::move(layout));
  if (o.method == "terngrad") return std::make_unique<TernGradCompressor>(o, std::move(layout));
  if (o.method == "fp16" || o.method == "qsgd" || o.method == "onebit")
    return std::make_unique<BaselineCompressor>(o, std::move(layout));
  std::string known;
  for (const auto& n : compressor_names()) known += (known.empty() ? "" : ", ") + n;
  TG_THROW("unknown compression.method '", o.method, "' (known: ", known, ")");
}

std::vector<float> shared_meta(const Compressor& c, std::span<const Tensor> worker_grads) {
  std::vector<float> shared(static_cast<size_t>(c.num_meta()), 0.0f), meta(shared.size());
  for (size_t w = 0; w < worker_grads.size(); ++w) {
    c.local_meta(worker_grads[w], meta.data());
    for (size_t i = 0; i < meta.size(); ++i) shared[i] = w == 0 ? meta[i] : std::max(shared[i], meta[i]);
  }
  return shared;
}

void aggregate_emulated(Compressor& c, std::span<const Tensor> worker_grads, int64_t step,
                        Tensor& out) {
  const int n = static_cast<int>(worker_grads.size());
  TG_CHECK(n >= 1, "aggregate_emulated: no worker gradients");
  const Device d = worker_grads[0].device();
  // Round 1: scaler candidates, shared as the elementwise max over workers.
  const std::vector<float> shared = shared_meta(c, worker_grads);
  // Rounds 2 and 3: each worker's message, accumulated in worker order.
  Accumulator acc = c.make_accumulator(d);
  Tensor msg = Tensor::empty({static_cast<int64_t>(c.payload_bytes(step))}, DType::u8, d);
  for (int w = 0; w < n; ++w) {
    c.encode(worker_grads[w], shared.data(), step, w, msg);
    c.accumulate(msg, shared.data(), step, acc);
  }
  c.finalize(acc, shared.data(), step, n, out);
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
