// terngrad_torch._C: the library's TernGrad aggregation behind a PyTorch process group.
//
// Nothing of TernGrad is reimplemented here. A torch c10d::ProcessGroup (Gloo or NCCL) is adapted
// to the library's Communicator interface (comm/communicator.h), and each DDP bucket is aggregated
// by tern::aggregate (terngrad/aggregate.h) with the library's own compressor
// (terngrad/compressor.h): the same shared scalers, ternarize + pack kernels, exact integer sums
// and byte-cost choice of collective as the `terngrad train` data-parallel step. The bucket's
// memory is used in place (Tensor::borrow); the result goes into a fresh tensor.
//
// Python side: terngrad_torch/__init__.py (TernGradState, terngrad_hook).
#include <torch/cuda.h>
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/wire_model.h"
#include "nn/core/error.h"
#include "nn/core/tensor.h"
#include "nn/core/worker_thread.h"
#include "terngrad/aggregate.h"
#include "terngrad/compressor.h"

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

std::vector<tg::tern::GradSlot> layout_of(const std::vector<int64_t>& numels) {
  std::vector<tg::tern::GradSlot> layout;
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    TG_CHECK(numels[i] >= 0, "terngrad_torch: parameter ", i, " has a negative size");
    layout.push_back({"p" + std::to_string(i), offset, numels[i]});
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

// The hook's options, in the library's terms.
struct HookOptions {
  double clip = 2.5;
  std::string pack = "two_bit";
  uint64_t seed = 0;
  std::string algorithm = "auto";
  int64_t chunk_bytes = int64_t{2} << 20;
  int64_t min_size = 1;
};

tg::tern::CompressionOptions compression(const HookOptions& h, uint64_t seed) {
  tg::tern::CompressionOptions o;
  o.method = tg::tern::Method::terngrad;
  o.clip = h.clip;
  o.pack = parse_pack(h.pack);
  o.seed = seed;
  o.min_size = h.min_size;
  return o;
}

// Bucket b's Philox seed: the state's seed mixed with the bucket index (SplitMix64), so two
// buckets' tensors at the same position never draw the same random stream.
uint64_t bucket_seed(uint64_t seed, int64_t bucket) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(bucket + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// What one bucket's aggregation did on this rank.
struct BucketResult {
  at::Tensor out;
  uint64_t sent = 0, received = 0;
  std::vector<float> scalers;                     // one per parameter of the bucket
  std::string route;                              // tern::describe of the call
  double encode_s = 0, comm_s = 0, reduce_s = 0;  // AggregateStats' phases
};

// One rank's TernGrad reducer for DDP buckets: a compressor per bucket layout, reused while the
// bucket's parameter sizes stay the same (DDP rebuilds its buckets once, after the first step).
class Engine {
 public:
  Engine(c10::intrusive_ptr<c10d::ProcessGroup> pg, HookOptions options)
      : pg_(std::move(pg)), options_(std::move(options)) {
    TG_CHECK(pg_, "terngrad_torch: no process group");
    agg_.algorithm =
        tg::tern::exchange_algorithm(tg::tern::parse_ternary_algorithm(options_.algorithm));
    TG_CHECK(options_.chunk_bytes >= 0, "terngrad_torch: chunk_bytes must be >= 0");
    agg_.chunk_bytes = options_.chunk_bytes;
    // Refuse bad options here, by name, rather than at the first bucket: pack is parsed by
    // compression(), clip and min_size are checked by make_compressor.
    tg::tern::make_compressor(compression(options_, 0), layout_of({1}));
  }

  int rank() const { return pg_->getRank(); }
  int size() const { return pg_->getSize(); }

  BucketResult reduce(int64_t bucket, const at::Tensor& buffer, const std::vector<int64_t>& numels,
                      int64_t step) {
    TG_CHECK(bucket >= 0, "terngrad_torch: negative bucket index");
    TG_CHECK(step >= 0, "terngrad_torch: negative step");
    int64_t total = 0;
    for (const int64_t n : numels) total += n;
    TG_CHECK(total == buffer.numel(), "terngrad_torch: bucket ", bucket, " holds ", buffer.numel(),
             " elements but its parameters have ", total);
    const tg::Tensor grad = borrow_flat(buffer, "the bucket's buffer");
    Slot& slot = slot_for(bucket, numels, grad.device());
    BucketResult res;
    // The bucket's output tensor is reused from step to step: DDP has copied the last one into
    // the gradients before it hands this bucket to the hook again (it waits for every future at
    // the end of backward), and a fresh tensor of a large bucket costs its page faults each step.
    if (!slot.out.defined() || slot.out.sizes() != buffer.sizes() ||
        slot.out.device() != buffer.device())
      slot.out = at::empty_like(buffer);
    res.out = slot.out;
    tg::Tensor out = borrow_flat(res.out, "the output");
    const tg::Tensor locals[] = {grad};
    // On CUDA, DDP filled the bucket on torch's stream and will read the result on it, while
    // the library's kernels run on the library's own stream: the device is idle at both ends.
    const bool cuda = grad.device().type == tg::DeviceType::cuda;
    if (cuda) torch::cuda::synchronize(grad.device().index);
    const tg::tern::AggregateStats st = tg::tern::aggregate(*slot.compressor, *slot.comm, locals,
                                                            step, out, agg_, {}, &collectives_);
    if (cuda) torch::cuda::synchronize(grad.device().index);
    res.sent = st.wire.sent;
    res.received = st.wire.received;
    res.scalers = st.shared_meta;
    res.route = tg::tern::describe(st);
    res.encode_s = st.encode_s;
    res.comm_s = st.comm_s;
    res.reduce_s = st.reduce_s;
    return res;
  }

 private:
  struct Slot {
    std::vector<int64_t> numels;
    tg::Device device;
    std::unique_ptr<tg::tern::Compressor> compressor;
    std::unique_ptr<ProcessGroupCommunicator> comm;
    at::Tensor out;
  };

  Slot& slot_for(int64_t bucket, const std::vector<int64_t>& numels, const tg::Device& device) {
    if (static_cast<size_t>(bucket) >= slots_.size()) slots_.resize(bucket + 1);
    Slot& s = slots_[bucket];
    if (!s.compressor || s.numels != numels || !(s.device == device)) {
      s.numels = numels;
      s.device = device;
      s.compressor = tg::tern::make_compressor(
          compression(options_, bucket_seed(options_.seed, bucket)), layout_of(numels));
      s.comm = std::make_unique<ProcessGroupCommunicator>(pg_, device);
    }
    return s;
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  HookOptions options_;
  tg::tern::AggregateOptions agg_;
  std::vector<Slot> slots_;
  tg::WorkerThread collectives_;  // the ternary path's chunk collectives, for the hook's lifetime
};

// The library's own aggregation of N workers' bucket gradients in one process
// (tern::aggregate_local): the reference the hook must equal bit for bit.
at::Tensor aggregate_local(const std::vector<at::Tensor>& grads, const std::vector<int64_t>& numels,
                           const HookOptions& h, int64_t bucket, int64_t step) {
  TG_CHECK(!grads.empty(), "terngrad_torch: no gradients");
  std::vector<tg::Tensor> g;
  for (const auto& t : grads) g.push_back(borrow_flat(t, "a gradient"));
  auto c =
      tg::tern::make_compressor(compression(h, bucket_seed(h.seed, bucket)), layout_of(numels));
  TG_CHECK(c->total() == grads[0].numel(), "terngrad_torch: gradients hold ", grads[0].numel(),
           " elements but the sizes add up to ", c->total());
  at::Tensor result = at::empty_like(grads[0]);
  tg::Tensor out = borrow_flat(result, "the output");
  tg::tern::aggregate_local(*c, g, step, out);
  return result;
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
      .def_readwrite("min_size", &HookOptions::min_size);

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
           py::arg("step"), py::call_guard<py::gil_scoped_release>(),
           "Aggregates one bucket across the process group (blocking; releases the GIL).");

  m.def("aggregate_local", &aggregate_local, py::arg("grads"), py::arg("numels"),
        py::arg("options"), py::arg("bucket"), py::arg("step"),
        py::call_guard<py::gil_scoped_release>(),
        "The library's one-process aggregation of the workers' bucket gradients.");
  m.def("bucket_seed", &bucket_seed, py::arg("seed"), py::arg("bucket"));
}
