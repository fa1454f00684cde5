// Gradient compressors behind one interface: none (fp32), fp16, terngrad, qsgd, onebit.
//
// A step of data-parallel training runs three rounds (terngrad/exchange/aggregate.h runs them, the
// same code whether the N workers are emulated in one process or are processes joined by a
// communicator):
//   1. meta_w = local_meta(g_w)            per worker: num_meta() floats (TernGrad: one scaler
//      shared = elementwise max_w meta_w   candidate per tensor); an allreduce-max across workers
//   2. msg_w = encode(g_w, shared, ...)    per worker: payload_bytes(step) bytes on g's device
//   3. accumulate(msg_w, shared, acc)      for every worker, in any order for the exact methods
//      finalize(acc, shared, N, out)       out = the averaged gradient every replica applies
// With TernGrad and scaler sharing every worker's codes of a tensor live on one grid, so the
// accumulator holds integer code sums in [-N, N] and the average (s/N) * sum is exact and
// independent of the order messages arrive in.
//
// The flat gradient is split into slots (one per parameter tensor, the arena's entries); each
// slot is compressed on its own (layer-wise scalers, as in the paper) or sent as raw fp32 when an
// exclusion rule says so (the reference code's: fewer than min_size elements; the classifier's two
// tensors unless quantize_logits; every tensor during a floating_grad_epoch epoch).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/buckets.h"
#include "nn/core/enum_names.h"
#include "nn/core/tensor.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

// How a worker's gradient goes on the wire; kMethods names them (the config's
// compression.method).
enum class Method { none, fp16, terngrad, qsgd, onebit };
inline constexpr EnumTable<Method, 5> kMethods = {{{Method::none, "none"},
                                                   {Method::fp16, "fp16"},
                                                   {Method::terngrad, "terngrad"},
                                                   {Method::qsgd, "qsgd"},
                                                   {Method::onebit, "onebit"}}};
// TernGrad's scaler: the largest over the workers (shared, Section 3.2 of the paper) or each
// worker its own (the ablation).
enum class ScalerSharing { max, none };
inline constexpr EnumTable<ScalerSharing, 2> kScalerSharings = {
    {{ScalerSharing::max, "max"}, {ScalerSharing::none, "none"}}};
inline constexpr EnumTable<PackFormat, 2> kPackFormats = {
    {{PackFormat::two_bit, "two_bit"}, {PackFormat::base3, "base3"}}};
// QSGD's levels s: a level and its sign travel in one signed byte.
inline constexpr int kMaxQsgdLevels = 127;
// TernGrad's grid: 3 levels (its own), or the finer uniform grids of grid_kernels.h.
inline constexpr int kMinLevels = 3, kMaxLevels = 5;

struct CompressionOptions {
  Method method = Method::none;
  // terngrad
  double clip = 2.5;                // c: scaler c * sigma; 0 = no clipping, scaler max|g|
  int64_t min_size = 1;             // slots with fewer elements stay fp32
  bool quantize_logits = true;      // false: the last two slots (classifier w, b) stay fp32
  int64_t floating_grad_epoch = 0;  // F > 0: epochs e with e % F == F - 1 are sent in fp32
  double steps_per_epoch = 0;       // needed when floating_grad_epoch > 0
  ScalerSharing scaler_sharing = ScalerSharing::max;
  PackFormat pack = PackFormat::two_bit;
  // Error feedback (terngrad): worker w ternarizes v = g + e_w, its gradient plus its residual,
  // with the scaler of g (shared as usual), and keeps e_w = v - s * code, what its message
  // dropped (clipping and rounding), for its next step. The scaler is g's, not v's: with
  // stochastic codes |e| reaches s, and a scaler c * sigma(v) would grow with the residual it
  // creates (for c >= ~2.5 without bound). The wire is unchanged; the residuals are per-worker
  // state (checkpointed).
  bool error_feedback = false;
  // Levels of the uniform grid spanning [-s, s] each element is rounded to, stochastically and
  // without bias: 3 = TernGrad's {-1, 0, 1} s (packed by `pack`); 4 = {-3, -1, 1, 3} s / 3 in 2
  // bits (the state TernGrad's two_bit leaves unused); 5 = {-2, ..., 2} s / 2, 3 per byte
  // (terngrad/grid_kernels.h). With a shared scaler the integer codes sum exactly either way.
  int levels = 3;
  // Norm-preserving rescale (needs scaler_sharing = max): each worker also sends the length ratio
  // ||clip(g)|| / ||g|| of each tensor at its own scaler; the aggregate of the tensor is divided
  // by the largest ratio over the workers (the least shortened), restoring the length c * sigma
  // clipping removes. For momentum SGD this is a per-tensor learning-rate compensation. One more
  // float per tensor in the scaler allreduce; integer sums stay exact (one scale per tensor).
  bool rescale = false;
  // qsgd
  int qsgd_levels = 4;  // 1 .. kMaxQsgdLevels
  int64_t qsgd_bucket = 512;
  uint64_t seed = 123;  // Philox seed of every stochastic choice
  // (steps_per_epoch and seed are the run's, set from train.batch_size and train.seed by
  // train/options.cpp; every other field is a [compression] key of the same name.)
  bool operator==(const CompressionOptions&) const = default;
};

// The layout every compressor works on: one slot per parameter tensor of the flat gradient, and
// the slot ranges (the Reducer's buckets) each round runs on (comm/buckets.h).
using GradSlot = comm::GradSlot;
using SlotRange = comm::SlotRange;

// Named tensors, as optimizers and checkpoints hold them.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Sums of decoded messages: integer code sums for grid-aligned slots, floats for the rest, over
// the elements [origin, origin + ints.numel()) of the flat gradient (one slot range's).
struct Accumulator {
  Tensor ints;    // i32
  Tensor floats;  // f32
  int64_t origin = 0;
  // The integer-sum (ternary-coded) slots are already final in `out`: the exchange decoded their
  // sums straight into scaled values (terngrad/exchange/ternary_collectives.h, ScaledSums), so
  // finalize writes only the other slots and `ints` may be empty.
  bool ints_final = false;
  // The sums of flat-gradient element `element` (which must lie in the accumulator's range).
  int32_t* int_at(int64_t element) { return ints.data<int32_t>() + (element - origin); }
  float* float_at(int64_t element) { return floats.data<float>() + (element - origin); }
  const int32_t* int_at(int64_t element) const { return ints.data<int32_t>() + (element - origin); }
  const float* float_at(int64_t element) const { return floats.data<float>() + (element - origin); }
};

// How one slot travels inside a message, and how its messages sum: the description the exchange
// (terngrad/exchange/aggregate.h) picks its collectives from, without knowing the method.
enum class SlotCoding : uint8_t {
  // numel raw floats, summed element by element in worker order, acc = 0 + m_0 + m_1 + ..., and
  // averaged out = 0 + acc * (1 / N): any range of elements reduces on its own with the same bits
  f32,
  // numel IEEE binary16 values, summed as floats the same way (acc += float(m_w)) and averaged
  f16,
  // packed ternary codes (WireLayout::pack) on one grid that every worker shares (the scaler is
  // the shared meta, not in the message): integer code sums are exact in any order, and the
  // compressor's finalize scales them once
  ternary,
  // only the compressor can decode or sum it (qsgd, 1-bit, ternary with per-worker scalers, the
  // 4- and 5-level grids)
  opaque,
};
const char* name(SlotCoding c);  // "f32", "f16", "ternary", "opaque"

struct SlotWire {
  SlotCoding coding = SlotCoding::opaque;
  int64_t offset = 0;  // bytes into the range's message
  int64_t bytes = 0;
};

// One worker's message for a slot range at one step: the slots back to back, in layout order.
struct WireLayout {
  std::vector<SlotWire> slots;  // one per slot of the range
  int64_t bytes = 0;
  PackFormat pack = PackFormat::two_bit;  // of the ternary slots
  bool uniform(SlotCoding c) const;       // every slot has coding c (true for no slot)
  bool any(SlotCoding c) const;
};

// Every method runs the rounds above for the whole layout or for any slot range r (default: all
// slots): the meta of r is meta_per_slot() floats per slot of r, in slot order, and the message
// of r is wire(step, r).bytes long. The public calls check their arguments and resolve the
// default range; each method implements the protected *_range versions.
class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;

  SlotRange all_slots() const { return {0, layout_.size()}; }

  // Floats of meta per worker (0 when the method shares nothing).
  virtual int64_t meta_per_slot() const { return 0; }
  int64_t num_meta(SlotRange r = {}) const;
  void local_meta(const Tensor& g, float* meta, SlotRange r = {}) const;
  // The message layout of range r at `step` (exact: what goes on the wire).
  WireLayout wire(int64_t step, SlotRange r = {}) const;
  size_t payload_bytes(int64_t step, SlotRange r = {}) const;
  // Worker `worker`'s message for the slots r of its flat gradient g (f32 [total]) into msg (u8,
  // on g's device, payload_bytes(step, r) long). May update per-worker state (1-bit SGD's
  // residual, for the slots of r).
  void encode(const Tensor& g, const float* shared, int64_t step, int worker, Tensor& msg,
              SlotRange r = {});
  // Adds the message of range r into acc (whole-layout buffers; r's slots only).
  void accumulate(const Tensor& msg, const float* shared, int64_t step, Accumulator& acc,
                  SlotRange r = {}) const;
  // out (f32 [total]) at r's slots = the average over `workers` messages accumulated in acc.
  void finalize(const Accumulator& acc, const float* shared, int64_t step, int workers, Tensor& out,
                SlotRange r = {}) const;
  // For slot t of range r (resolved, t in r) whose coding at `step` is SlotCoding::ternary: the
  // factor finalize multiplies its integer sum by, out = float(sum) * factor, which is all it does
  // with such a slot (`shared` is r's shared meta, as for finalize). Throws for a method without
  // such slots.
  virtual float integer_sum_scale(const float* shared, int64_t step, int workers, SlotRange r,
                                  size_t t) const;

  // Per-worker state carried from one encode to the next, for checkpoints. Each worker (each
  // rank, when workers are processes) saves and restores only its own entries.
  //   none, fp16, terngrad, qsgd:        nothing (stateless)
  //   onebit, terngrad + error_feedback: "residual" f32 [total] (the error feedback)
  // state(w) is a snapshot (a copy on the state's device). A residual that worker w has not
  // created yet (before its first encode) is reported as zeros on the host: it is exactly the
  // residual the first encode would start from, so "absent" and "zeros" round-trip alike.
  // load_state(w, s): exactly the names above, each once, with that dtype and shape, else it
  // throws naming the entry and what was expected, and changes nothing. The tensors are copied;
  // a restored residual keeps its device until worker w's next encode moves it to the
  // gradient's device (once).
  virtual NamedTensors state(int worker) const;
  virtual void load_state(int worker, const NamedTensors& state);

  const std::vector<GradSlot>& layout() const { return layout_; }
  int64_t total() const { return total_; }
  // The elements [begin, end) of the flat gradient that range r covers.
  std::pair<int64_t, int64_t> elements(SlotRange r) const;
  // Zeroed sums for the elements of range r (default: all).
  Accumulator make_accumulator(const Device& device, SlotRange r = {}) const;
  // fp32 bytes of the whole gradient: the uncompressed payload, for ratios.
  size_t fp32_bytes() const { return static_cast<size_t>(total_) * sizeof(float); }

 protected:
  Compressor(std::vector<GradSlot> layout);
  // r is resolved and checked; shared/meta point at r's meta (meta_per_slot() floats per slot).
  virtual void local_meta_range(const Tensor& g, SlotRange r, float* meta) const {}
  virtual WireLayout wire_range(int64_t step, SlotRange r) const = 0;
  virtual void encode_range(const Tensor& g, const float* shared, int64_t step, int worker,
                            SlotRange r, Tensor& msg) = 0;
  virtual void accumulate_range(const Tensor& msg, const float* shared, int64_t step, SlotRange r,
                                Accumulator& acc) const = 0;
  virtual void finalize_range(const Accumulator& acc, const float* shared, int64_t step,
                              int workers, SlotRange r, Tensor& out) const = 0;
  SlotRange resolve(SlotRange r) const;  // {} -> all slots; throws when out of the layout
  std::vector<GradSlot> layout_;
  int64_t total_ = 0;
};

// TernGrad's scaler of one tensor from its statistics: c * sigma for clip c > 0 (gradient
// clipping), max|g| for c = 0, rounded to f32. The one definition the compressor and
// measure-bounds (terngrad/analysis/bounds.h) use. Throws if clip < 0 or is not finite.
float terngrad_scaler(const TensorStats& st, double clip);

// Which slots of `layout` the terngrad compressor with options `o` ternarizes (true) rather than
// sends in fp32: numel >= min_size, and not the last two slots (the classifier's weights and
// bias) unless quantize_logits. floating_grad_epoch (whole epochs in fp32) is applied on top.
std::vector<bool> ternarized_slots(const std::vector<GradSlot>& layout,
                                   const CompressionOptions& o);

// True when `step` falls in a floating-gradient epoch (floating_grad_epoch = F > 0: epoch e with
// e % F == F - 1, e = floor(step / steps_per_epoch)), when terngrad sends every slot in fp32.
// Throws if F > 0 and steps_per_epoch is not positive.
bool floating_grad_step(const CompressionOptions& o, int64_t step);

// Throws on an unknown method (listing the known ones) or invalid options, naming the key.
std::unique_ptr<Compressor> make_compressor(const CompressionOptions& options,
                                            std::vector<GradSlot> layout);
std::vector<std::string> compressor_names();
// True when the method's average of one worker is that worker's gradient unchanged ("none"): a
// single worker then needs no compressor at all.
bool identity_for_one_worker(const CompressionOptions& options);

}  // namespace tg::tern
