// terngrad_torch._C: the library's TernGrad aggregation behind a PyTorch process group.
//
// Nothing of TernGrad is reimplemented here. A torch c10d::ProcessGroup (Gloo or NCCL) is adapted
// to the library's Communicator interface (comm/communicator.h), and each DDP bucket is aggregated
// by tern::aggregate (terngrad/exchange/aggregate.h) with the library's own compressor
// (terngrad/compressor.h): the same shared scalers, ternarize + pack kernels, exact integer sums,
// error feedback and byte-cost choice of collective as the `terngrad train` data-parallel step.
// An f32 bucket's memory is used in place (Tensor::borrow); an fp16 or bf16 bucket is widened to
// f32 (exactly) first, and the f32 average is rounded to the bucket's dtype at the end.
//
// Each parameter carries a fixed index (the hook's parameter id: its position in the model's
// parameter list, or in the order DDP first hands it over), which is its slot's random stream
// (GradSlot::rng_index) and the key of its error-feedback residual. DDP rebuilds its buckets after
// the first step, so a bucket's parameters change; with the index fixed, a parameter's random
// numbers and residual do not (per parameter, the aggregation never depends on the bucket: its
// scaler, codes and sums are its own).
//
// Python side: terngrad_torch/__init__.py (TernGradState, terngrad_hook).
#include <torch/cuda.h>
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "comm/wire_model.h"
#include "nn/core/error.h"
#include "nn/core/tensor.h"
#include "nn/core/worker_thread.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"

namespace {

namespace py = pybind11;
using tg::comm::WireBytes;

at::Device torch_device(const tg::Device& d) {
  return d.type == tg::DeviceType::cuda ? at::Device(at::kCUDA, static_cast<int8_t>(d.index))
                                        : at::Device(at::kCPU);
}

tg::Device tg_device(const at::Tensor& t) {
  if (t.is_cuda()) return tg::Device::cuda(t.get_device());
  TG_CHECK(t.is_cpu(), "terngrad_torch: tensors must be on the CPU or a CUDA device, not ",
           t.device().str());
  return tg::Device::cpu();
}

// A Communicator whose collectives are a torch process group's. Every call blocks until its work
// is done (for CUDA: until the device is idle, since the library's kernels run on the library's
// own stream, not torch's). Wire bytes are the message-passing model of comm/wire_model.h, as
// for the library's NCCL backend: torch reports no byte counts.
class ProcessGroupCommunicator final : public tg::comm::Communicator {
 public:
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pg, tg::Device device)
      : pg_(std::move(pg)), device_(device), name_("torch-" + pg_->getBackendName()) {}

  std::string backend() const override { return name_; }
  int rank() const override { return pg_->getRank(); }
  int size() const override { return pg_->getSize(); }
  tg::Device device() const override { return device_; }

  void allreduce(void* buf, int64_t n, tg::DType dtype, tg::comm::ReduceOp op) override {
    at::ScalarType st = at::kFloat;
    switch (dtype) {
      case tg::DType::f32:
        st = at::kFloat;
        break;
      case tg::DType::i32:
        st = at::kInt;
        break;
      case tg::DType::i64:
        st = at::kLong;
        break;
      case tg::DType::u64:
        // Sums wrap alike in two's complement; a max would not.
        TG_CHECK(op == tg::comm::ReduceOp::sum, name_, ": allreduce max of u64 is not supported");
        st = at::kLong;
        break;
      default:
        TG_CHECK(false, name_, ": allreduce of an unsupported dtype");
    }
    std::vector<at::Tensor> t{at::from_blob(buf, {n}, options(st))};
    c10d::AllreduceOptions o;
    o.reduceOp = op == tg::comm::ReduceOp::sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    run("allreduce", [&] { return pg_->allreduce(t, o); });
    tg::comm::wire_model::add(
        wire_, tg::comm::wire_model::allreduce(static_cast<uint64_t>(n) * tg::element_size(dtype),
                                               size()));
  }

  void allgather(const void* in, void* out, size_t bytes) override {
    std::vector<at::Tensor> input{bytes_at(const_cast<void*>(in), bytes)};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < size(); ++r)
      output[0].push_back(bytes_at(static_cast<uint8_t*>(out) + r * bytes, bytes));
    run("allgather", [&] { return pg_->allgather(output, input); });
    tg::comm::wire_model::add(wire_, tg::comm::wire_model::allgather(bytes, size()));
  }

  void alltoall(const void* in, void* out, size_t bytes) override {
    at::Tensor input = bytes_at(const_cast<void*>(in), bytes * size());
    at::Tensor output = bytes_at(out, bytes * size());
    std::vector<int64_t> even;  // empty split sizes: equal blocks
    run("alltoall", [&] { return pg_->alltoall_base(output, input, even, even); });
    tg::comm::wire_model::add(wire_, tg::comm::wire_model::alltoall(bytes, size()));
  }

  // One alltoall_base with split sizes (torch's alltoallv, on Gloo and NCCL alike) through two
  // staging buffers in peer order: a peer this rank has no message for gets a 0-byte split.
  void exchange(std::span<const tg::comm::SendSpec> sends,
                std::span<const tg::comm::RecvSpec> recvs) override {
    tg::comm::check_exchange(name_.c_str(), rank(), size(), sends, recvs);
    const auto p = static_cast<size_t>(size());
    std::vector<int64_t> in_split(p, 0), out_split(p, 0);
    std::vector<const tg::comm::SendSpec*> to(p, nullptr);
    std::vector<const tg::comm::RecvSpec*> from(p, nullptr);
    for (const auto& e : sends) to[static_cast<size_t>(e.peer)] = &e;
    for (const auto& e : recvs) from[static_cast<size_t>(e.peer)] = &e;
    int64_t in_bytes = 0, out_bytes = 0;
    for (size_t q = 0; q < p; ++q) {
      in_split[q] = to[q] ? static_cast<int64_t>(to[q]->bytes) : 0;
      out_split[q] = from[q] ? static_cast<int64_t>(from[q]->bytes) : 0;
      in_bytes += in_split[q];
      out_bytes += out_split[q];
    }
    at::Tensor input = at::empty({in_bytes}, options(at::kByte));
    at::Tensor output = at::empty({out_bytes}, options(at::kByte));
    int64_t at_in = 0;
    for (size_t q = 0; q < p; ++q) {
      if (in_split[q] > 0)
        input.narrow(0, at_in, in_split[q])
            .copy_(bytes_at(const_cast<void*>(to[q]->data), to[q]->bytes));
      at_in += in_split[q];
    }
    // (Copies: the process group moves from the split-size vectors it is handed.)
    run("exchange", [&] {
      std::vector<int64_t> outs = out_split, ins = in_split;
      return pg_->alltoall_base(output, input, outs, ins);
    });
    int64_t at_out = 0;
    for (size_t q = 0; q < p; ++q) {
      if (out_split[q] > 0)
        bytes_at(from[q]->data, from[q]->bytes).copy_(output.narrow(0, at_out, out_split[q]));
      at_out += out_split[q];
    }
    if (device_.type == tg::DeviceType::cuda) torch::cuda::synchronize(device_.index);
    tg::comm::wire_model::add(wire_, tg::comm::wire_model::exchange(sends, recvs));
  }

  void gather(const void* in, void* out, size_t bytes, int root) override {
    std::vector<at::Tensor> input{bytes_at(const_cast<void*>(in), bytes)};
    std::vector<std::vector<at::Tensor>> output;
    if (rank() == root) {
      output.resize(1);
      for (int r = 0; r < size(); ++r)
        output[0].push_back(bytes_at(static_cast<uint8_t*>(out) + r * bytes, bytes));
    }
    c10d::GatherOptions o;
    o.rootRank = root;
    run("gather", [&] { return pg_->gather(output, input, o); });
    tg::comm::wire_model::add(wire_, tg::comm::wire_model::gather(bytes, size(), rank(), root));
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    std::vector<at::Tensor> t{bytes_at(buf, bytes)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run("broadcast", [&] { return pg_->broadcast(t, o); });
    tg::comm::wire_model::add(wire_, tg::comm::wire_model::broadcast(bytes, size(), rank(), root));
  }

  void barrier() override {
    run("barrier", [&] { return pg_->barrier(); });
  }

 private:
  at::TensorOptions options(at::ScalarType st) const {
    return at::TensorOptions().dtype(st).device(torch_device(device_));
  }
  at::Tensor bytes_at(void* p, size_t bytes) const {
    return at::from_blob(p, {static_cast<int64_t>(bytes)}, options(at::kByte));
  }
  template <typename F>
  void run(const char* what, F&& issue) {
    try {
      if (device_.type == tg::DeviceType::cuda) torch::cuda::synchronize(device_.index);
      issue()->wait();
      if (device_.type == tg::DeviceType::cuda) torch::cuda::synchronize(device_.index);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      TG_THROW(name_, ": ", what, " failed on rank ", rank(), ": ", msg);
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  tg::Device device_;
  std::string name_;
};

tg::tern::PackFormat parse_pack(const std::string& s) {
  return tg::parse_enum(tg::tern::kPackFormats, s, "terngrad_torch: pack");
}

// Slots of the given sizes back to back; slot i draws the random stream of parameter ids[i]
// (empty ids: of its position, as `terngrad train`'s layout does).
std::vector<tg::tern::GradSlot> layout_of(const std::vector<int64_t>& numels,
                                          const std::vector<int64_t>& ids) {
  TG_CHECK(ids.empty() || ids.size() == numels.size(), "terngrad_torch: ", numels.size(),
           " parameter sizes but ", ids.size(), " parameter ids");
  std::vector<tg::tern::GradSlot> layout;
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    TG_CHECK(numels[i] >= 0, "terngrad_torch: parameter ", i, " has a negative size");
    const int64_t id = ids.empty() ? static_cast<int64_t>(i) : ids[i];
    TG_CHECK(id >= 0, "terngrad_torch: parameter ids must be >= 0, got ", id);
    std::string name = "p";  // (not "p" + to_string: GCC 12's false -Wrestrict, PR 105329)
    name += std::to_string(id);
    layout.push_back({std::move(name), offset, numels[i], ids.empty() ? -1 : id});
    offset += numels[i];
  }
  return layout;
}

// A flat f32 view of a contiguous torch tensor, on its memory.
tg::Tensor borrow_flat(const at::Tensor& t, const char* what) {
  TG_CHECK(t.scalar_type() == at::kFloat, "terngrad_torch: ", what, " must be float32, not ",
           std::string(c10::toString(t.scalar_type())));
  TG_CHECK(t.is_contiguous(), "terngrad_torch: ", what, " must be contiguous");
  return tg::Tensor::borrow(t.data_ptr(), {t.numel()}, tg::DType::f32, tg_device(t));
}

// A bucket's dtype: f32, or fp16 / bf16 (AMP), aggregated in f32.
bool low_precision(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// The hook's options, in the library's terms.
struct HookOptions {
  double clip = 2.5;
  std::string pack = "two_bit";
  uint64_t seed = 0;
  std::string algorithm = "auto";
  int64_t chunk_bytes = int64_t{2} << 20;
  int64_t min_size = 1;
  bool error_feedback = false;
  // node_of[r]: the node of rank r (comm/topology.h); empty: unknown. The hierarchical route's
  // nodes and the cost model's slow links.
  std::vector<int> node_of;
};

tg::tern::CompressionOptions compression(const HookOptions& h, uint64_t seed) {
  tg::tern::CompressionOptions o;
  o.method = tg::tern::Method::terngrad;
  o.clip = h.clip;
  o.pack = parse_pack(h.pack);
  o.seed = seed;
  o.min_size = h.min_size;
  o.error_feedback = h.error_feedback;
  return o;
}

// What one bucket's aggregation did on this rank.
struct BucketResult {
  at::Tensor out;
  uint64_t sent = 0, received = 0;
  std::vector<float> scalers;                     // one per parameter of the bucket
  std::string route;                              // tern::describe of the call
  double encode_s = 0, comm_s = 0, reduce_s = 0;  // AggregateStats' phases
};

// A host f32 copy of a library tensor (any device).
at::Tensor to_torch(const tg::Tensor& t) {
  const tg::Tensor host = t.to(tg::Device::cpu());
  at::Tensor out = at::empty({host.numel()}, at::kFloat);
  std::memcpy(out.data_ptr(), host.raw_data(), host.numel() * sizeof(float));
  return out;
}

// One rank's TernGrad reducer for DDP buckets: a compressor per bucket layout, reused while the
// bucket's parameters stay the same (DDP rebuilds its buckets once, after the first step).
//
// Error feedback: the library keeps a residual per compressor, f32 [bucket] (terngrad/
// compressor.h). A parameter's residual lives in the compressor of the bucket that holds it, or,
// between buckets (after a rebuild, or when loaded), in pending_ under the parameter's id. When
// a bucket's parameters change, every compressor gives its residuals back to pending_ (a rebuild
// can move a parameter from any bucket to any other), and a new compressor starts from those of
// its parameters (zeros for a parameter never seen).
class Engine {
 public:
  Engine(c10::intrusive_ptr<c10d::ProcessGroup> pg, HookOptions options)
      : pg_(std::move(pg)), options_(std::move(options)) {
    TG_CHECK(pg_, "terngrad_torch: no process group");
    agg_.algorithm =
        tg::parse_enum(tg::tern::kAlgorithms, options_.algorithm, "terngrad_torch: algorithm");
    TG_CHECK(agg_.algorithm != tg::tern::Route::ring,
             "terngrad_torch: algorithm 'ring' is the fp32 ring allreduce, not a route for ternary "
             "codes (known: auto, ps, allgather, packed-allreduce, sharded, hierarchical)");
    TG_CHECK(options_.chunk_bytes >= 0, "terngrad_torch: chunk_bytes must be >= 0");
    agg_.chunk_bytes = options_.chunk_bytes;
    agg_.nodes.node_of = options_.node_of;
    agg_.nodes.check(pg_->getSize());
    // Refuse bad options here, by name, rather than at the first bucket: pack is parsed by
    // compression(), clip and min_size are checked by make_compressor.
    tg::tern::make_compressor(compression(options_, options_.seed), layout_of({1}, {}));
  }

  int rank() const { return pg_->getRank(); }
  int size() const { return pg_->getSize(); }

  // ids: each parameter's fixed id (its random stream and residual key), in bucket order.
  BucketResult reduce(int64_t bucket, const at::Tensor& buffer, const std::vector<int64_t>& numels,
                      const std::vector<int64_t>& ids, int64_t step) {
    TG_CHECK(bucket >= 0, "terngrad_torch: negative bucket index");
    TG_CHECK(step >= 0, "terngrad_torch: negative step");
    TG_CHECK(ids.size() == numels.size(), "terngrad_torch: bucket ", bucket, " has ", numels.size(),
             " parameter sizes but ", ids.size(), " parameter ids");
    int64_t total = 0;
    for (const int64_t n : numels) total += n;
    TG_CHECK(total == buffer.numel(), "terngrad_torch: bucket ", bucket, " holds ", buffer.numel(),
             " elements but its parameters have ", total);
    TG_CHECK(buffer.scalar_type() == at::kFloat || low_precision(buffer),
             "terngrad_torch: the bucket's buffer must be float32, float16 or bfloat16, not ",
             std::string(c10::toString(buffer.scalar_type())));
    TG_CHECK(buffer.is_contiguous(), "terngrad_torch: the bucket's buffer must be contiguous");
    std::lock_guard<std::mutex> lock(mu_);
    Slot& slot = slot_for(bucket, numels, ids, tg_device(buffer));
    // The bucket's output tensors are reused from step to step: DDP has copied the last one into
    // the gradients before it hands this bucket to the hook again (it waits for every future at
    // the end of backward), and a fresh tensor of a large bucket costs its page faults each step.
    auto reuse = [&](at::Tensor& t, at::ScalarType dtype) {
      if (!t.defined() || t.sizes() != buffer.sizes() || t.device() != buffer.device() ||
          t.scalar_type() != dtype)
        t = at::empty(buffer.sizes(), buffer.options().dtype(dtype));
      return t;
    };
    const bool low = low_precision(buffer);
    BucketResult res;
    res.out = reuse(slot.out, buffer.scalar_type());
    // fp16 / bf16: widening to f32 is exact, so the codes are drawn from the bucket's own values;
    // scalers, sums and the residual stay f32, and only the average is rounded to the dtype.
    at::Tensor in32 = low ? reuse(slot.in32, at::kFloat).copy_(buffer) : buffer;
    at::Tensor out32 = low ? reuse(slot.out32, at::kFloat) : res.out;
    const tg::Tensor grad = borrow_flat(in32, "the bucket's buffer");
    tg::Tensor out = borrow_flat(out32, "the output");
    const tg::Tensor locals[] = {grad};
    // On CUDA, DDP filled the bucket on torch's stream and will read the result on it, while
    // the library's kernels run on the library's own stream: the device is idle at both ends.
    const bool cuda = grad.device().type == tg::DeviceType::cuda;
    if (cuda) torch::cuda::synchronize(grad.device().index);
    const tg::tern::AggregateStats st = tg::tern::aggregate(*slot.compressor, *slot.comm, locals,
                                                            step, out, agg_, {}, &collectives_);
    if (cuda) torch::cuda::synchronize(grad.device().index);
    if (low) res.out.copy_(out32);
    res.sent = st.wire.sent;
    res.received = st.wire.received;
    res.scalers = st.shared_meta;
    res.route = tg::tern::describe(st);
    res.encode_s = st.encode_s;
    res.comm_s = st.comm_s;
    res.reduce_s = st.reduce_s;
    return res;
  }

  // Every parameter's error-feedback residual, {id: host f32 [numel]} (copies). Between steps.
  std::map<int64_t, at::Tensor> residuals() {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<int64_t, at::Tensor> all;
    if (!options_.error_feedback) return all;
    for (const auto& [id, r] : pending_) all[id] = r.clone();
    for (const Slot& s : slots_)
      if (s.compressor) split_residual(s, all);
    return all;
  }

  // Replaces every residual by `residuals` ({id: f32 tensor of the parameter's numel}); the
  // compressors are rebuilt at their next bucket and start from them. Between steps.
  void load_residuals(const std::map<int64_t, at::Tensor>& residuals) {
    TG_CHECK(options_.error_feedback, "terngrad_torch: residuals loaded without error_feedback");
    std::map<int64_t, at::Tensor> loaded;
    for (const auto& [id, r] : residuals) {
      TG_CHECK(id >= 0, "terngrad_torch: residual of parameter id ", id, " (ids are >= 0)");
      loaded[id] = r.detach().to(at::kCPU, at::kFloat).contiguous().reshape({-1}).clone();
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (Slot& s : slots_) s.compressor.reset();
    pending_ = std::move(loaded);
  }

 private:
  struct Slot {
    std::vector<int64_t> numels, ids;
    tg::Device device;
    std::unique_ptr<tg::tern::Compressor> compressor;
    std::unique_ptr<ProcessGroupCommunicator> comm;
    at::Tensor out, in32, out32;  // the result (bucket dtype); fp16/bf16: f32 staging
  };

  // Slot s's residual, cut into its parameters' entries of `into`.
  void split_residual(const Slot& s, std::map<int64_t, at::Tensor>& into) const {
    const tg::tern::NamedTensors st = s.compressor->state(rank());
    const at::Tensor flat = to_torch(st.at(0).second);
    int64_t offset = 0;
    for (size_t i = 0; i < s.ids.size(); ++i) {
      into[s.ids[i]] = flat.narrow(0, offset, s.numels[i]).clone();
      offset += s.numels[i];
    }
  }

  Slot& slot_for(int64_t bucket, const std::vector<int64_t>& numels,
                 const std::vector<int64_t>& ids, const tg::Device& device) {
    if (static_cast<size_t>(bucket) >= slots_.size()) slots_.resize(bucket + 1);
    Slot& s = slots_[bucket];
    if (s.compressor && s.numels == numels && s.ids == ids && s.device == device) return s;
    if (options_.error_feedback) {
      for (Slot& other : slots_) {
        if (!other.compressor) continue;
        split_residual(other, pending_);
        other.compressor.reset();
      }
    }
    s.numels = numels;
    s.ids = ids;
    s.device = device;
    s.compressor =
        tg::tern::make_compressor(compression(options_, options_.seed), layout_of(numels, ids));
    s.comm = std::make_unique<ProcessGroupCommunicator>(pg_, device);
    if (options_.error_feedback) {
      at::Tensor flat = at::zeros({s.compressor->total()}, at::kFloat);
      int64_t offset = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (const auto it = pending_.find(ids[i]); it != pending_.end()) {
          TG_CHECK(it->second.numel() == numels[i], "terngrad_torch: the residual of parameter ",
                   ids[i], " has ", it->second.numel(), " elements but the parameter has ",
                   numels[i], " (a state of another model?)");
          flat.narrow(0, offset, numels[i]).copy_(it->second);
          pending_.erase(it);
        }
        offset += numels[i];
      }
      s.compressor->load_state(
          rank(), {{"residual", tg::Tensor::borrow(flat.data_ptr(), {flat.numel()}, tg::DType::f32,
                                                   tg::Device::cpu())}});
    }
    return s;
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  HookOptions options_;
  tg::tern::AggregateOptions agg_;
  std::mutex
      mu_;  // slots_ and pending_: reduce runs on the hook's thread, the rest on the caller's
  std::vector<Slot> slots_;
  std::map<int64_t, at::Tensor> pending_;  // error feedback: residuals no compressor holds
  tg::WorkerThread collectives_;  // the ternary path's chunk collectives, for the hook's lifetime
};

// The library's own aggregation of N workers' gradients in one process (tern::aggregate_local,
// what `terngrad train` runs for emulated workers), with one compressor kept from call to call
// (its error-feedback residuals per worker): the reference the hook must equal bit for bit.
// ids: each slot's random stream (empty: its position, as `terngrad train`'s layout).
class LocalAggregation {
 public:
  LocalAggregation(const HookOptions& h, const std::vector<int64_t>& numels,
                   const std::vector<int64_t>& ids)
      : c_(tg::tern::make_compressor(compression(h, h.seed), layout_of(numels, ids))) {}

  at::Tensor reduce(const std::vector<at::Tensor>& grads, int64_t step) {
    TG_CHECK(!grads.empty(), "terngrad_torch: no gradients");
    std::vector<tg::Tensor> g;
    for (const auto& t : grads) {
      TG_CHECK(t.numel() == c_->total(), "terngrad_torch: gradients hold ", t.numel(),
               " elements but the sizes add up to ", c_->total());
      g.push_back(borrow_flat(t, "a gradient"));
    }
    at::Tensor result = at::empty_like(grads[0]);
    tg::Tensor out = borrow_flat(result, "the output");
    tg::tern::aggregate_local(*c_, g, step, out);
    return result;
  }

 private:
  std::unique_ptr<tg::tern::Compressor> c_;
};

at::Tensor aggregate_local(const std::vector<at::Tensor>& grads, const std::vector<int64_t>& numels,
                           const std::vector<int64_t>& ids, const HookOptions& h, int64_t step) {
  return LocalAggregation(h, numels, ids).reduce(grads, step);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "terngrad_torch._C: the terngrad library's TernGrad aggregation for torch";
  py::register_exception<tg::Error>(m, "TernGradError", PyExc_RuntimeError);

  py::class_<HookOptions>(m, "HookOptions")
      .def(py::init<>())
      .def_readwrite("clip", &HookOptions::clip)
      .def_readwrite("pack", &HookOptions::pack)
      .def_readwrite("seed", &HookOptions::seed)
      .def_readwrite("algorithm", &HookOptions::algorithm)
      .def_readwrite("chunk_bytes", &HookOptions::chunk_bytes)
      .def_readwrite("min_size", &HookOptions::min_size)
      .def_readwrite("error_feedback", &HookOptions::error_feedback)
      .def_readwrite("node_of", &HookOptions::node_of);

  py::class_<BucketResult>(m, "BucketResult")
      .def_readonly("out", &BucketResult::out)
      .def_readonly("sent", &BucketResult::sent)
      .def_readonly("received", &BucketResult::received)
      .def_readonly("scalers", &BucketResult::scalers)
      .def_readonly("route", &BucketResult::route)
      .def_readonly("encode_s", &BucketResult::encode_s)
      .def_readonly("comm_s", &BucketResult::comm_s)
      .def_readonly("reduce_s", &BucketResult::reduce_s);

  py::class_<Engine>(m, "Engine")
      .def(py::init<c10::intrusive_ptr<c10d::ProcessGroup>, HookOptions>(), py::arg("pg"),
           py::arg("options"))
      .def_property_readonly("rank", &Engine::rank)
      .def_property_readonly("size", &Engine::size)
      .def("reduce", &Engine::reduce, py::arg("bucket"), py::arg("buffer"), py::arg("numels"),
           py::arg("ids"), py::arg("step"), py::call_guard<py::gil_scoped_release>(),
           "Aggregates one bucket across the process group (blocking; releases the GIL).")
      .def("residuals", &Engine::residuals, py::call_guard<py::gil_scoped_release>(),
           "Every parameter's error-feedback residual, {id: f32 [numel]} (host copies).")
      .def("load_residuals", &Engine::load_residuals, py::arg("residuals"),
           py::call_guard<py::gil_scoped_release>(),
           "Replaces the error-feedback residuals by {id: f32 tensor}.");

  py::class_<LocalAggregation>(m, "LocalAggregation")
      .def(py::init<HookOptions, std::vector<int64_t>, std::vector<int64_t>>(), py::arg("options"),
           py::arg("numels"), py::arg("ids") = std::vector<int64_t>{})
      .def("reduce", &LocalAggregation::reduce, py::arg("grads"), py::arg("step"),
           py::call_guard<py::gil_scoped_release>(),
           "The library's one-process aggregation of the workers' gradients at `step`.");
  m.def("aggregate_local", &aggregate_local, py::arg("grads"), py::arg("numels"), py::arg("ids"),
        py::arg("options"), py::arg("step"), py::call_guard<py::gil_scoped_release>(),
        "The library's one-process aggregation of the workers' bucket gradients (stateless).");
}
