// The local backend: P ranks are threads of one process sharing a LocalGroup. Every collective is
// two rendezvous of all P ranks (a generation-counted barrier on one mutex and condition variable):
//   1. each rank posts a descriptor of its call (kind, byte count, dtype, op, root) and its buffer
//      pointers, then waits for all P; every rank checks that all P descriptors agree;
//   2. each rank does its own part of the copy, reading the other ranks' posted buffers (their
//      owners are parked in the rendezvous, so the buffers are alive and unchanged), then waits
//      for all P to be done reading before it writes its own buffer (allreduce) or returns.
// allreduce reduces in rank order 0..P-1 (f32: ((b_0 + b_1) + b_2) + ...) into a private vector
// on every rank, so every rank gets bit-identical, deterministic results; integer sums wrap modulo
// 2^bits (computed in unsigned arithmetic).
//
// Wire accounting: the figures of comm/wire_model.h, i.e. what a message-passing implementation
// of the same algorithm moves: allreduce as a ring, 2 (P - 1) / P * B each way; allgather as a
// ring, (P - 1) B each way; gather and broadcast flat, the root receiving / sending (P - 1) B and
// every other rank sending / receiving B. Nothing actually leaves the process.
//
// Failures: a rank that does not arrive within the timeout makes the waiting ranks throw, naming
// the missing ranks; mismatched calls throw on every rank. Either marks the group broken, and
// every later call on any rank of the group throws at once instead of waiting.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/wire_model.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"

namespace tg::comm {

namespace {

enum class Kind : uint8_t { allreduce, allgather, alltoall, exchange, gather, broadcast, barrier };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allreduce:
      return "allreduce";
    case Kind::allgather:
      return "allgather";
    case Kind::alltoall:
      return "alltoall";
    case Kind::exchange:
      return "exchange";
    case Kind::gather:
      return "gather";
    case Kind::broadcast:
      return "broadcast";
    case Kind::barrier:
      return "barrier";
  }
  return "?";
}

struct Call {
  Kind kind = Kind::barrier;
  uint64_t count = 0;  // elements (allreduce) or bytes
  DType dtype = DType::u8;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  const void* in = nullptr;
  void* out = nullptr;
  std::span<const SendSpec> sends;  // exchange: this rank's lists (alive during the call)
  std::span<const RecvSpec> recvs;

  bool same_shape(const Call& o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype && op == o.op && root == o.root;
  }
  std::string str() const {
    std::string s = kind_name(kind);
    if (kind == Kind::allreduce) {
      s += detail::concat("(n=", count, ", ", dtype_name(dtype), ", ", name(op), ")");
    } else if (kind == Kind::exchange) {
      s += "(point-to-point)";
    } else if (kind != Kind::barrier) {
      s += detail::concat("(", count, " bytes");
      if (kind != Kind::allgather && kind != Kind::alltoall) s += detail::concat(", root ", root);
      s += ")";
    }
    return s;
  }
};

class LocalGroup {
 public:
  LocalGroup(int size, std::chrono::milliseconds timeout)
      : size_(size), timeout_(timeout), present_(size, false) {
    for (auto& c : calls_) c.resize(size);
  }

  int size() const { return size_; }
  // Calls are double-buffered by the parity of the per-rank call sequence number: after a
  // barrier-only call a fast rank may post its next call while a slow one still reads this one's
  // descriptors, but it cannot get two calls ahead.
  const Call& call(uint64_t seq, int r) const { return calls_[seq & 1][r]; }

  void post(uint64_t seq, int rank, const Call& c) {
    std::lock_guard<std::mutex> lk(mu_);
    calls_[seq & 1][rank] = c;
  }

  // Blocks until all ranks arrive (or throws on timeout / a broken group). `what` names the call.
  void arrive_and_wait(int rank, const std::string& what) {
    std::unique_lock<std::mutex> lk(mu_);
    throw_if_broken(rank, what);
    const uint64_t gen = generation_;
    present_[rank] = true;
    if (++arrived_ == size_) {
      arrived_ = 0;
      std::fill(present_.begin(), present_.end(), false);
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool done =
        cv_.wait_for(lk, timeout_, [&] { return generation_ != gen || !broken_.empty(); });
    if (generation_ != gen) return;  // completed (possibly just as someone else broke later)
    if (done) throw_if_broken(rank, what);
    std::string missing;
    for (int r = 0; r < size_; ++r) {
      if (!present_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    broken_ = detail::concat("rank(s) ", missing, " did not reach ", what, " within ",
                             timeout_.count(), " ms");
    cv_.notify_all();
    TG_THROW("local ", what, " on rank ", rank, " of ", size_, ": timed out waiting for ", broken_);
  }

  // Marks the group broken (after a mismatch found by every rank) and throws.
  [[noreturn]] void fail(int rank, const std::string& why) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (broken_.empty()) broken_ = why;
      cv_.notify_all();
    }
    TG_THROW("local communicator, rank ", rank, " of ", size_, ": ", why);
  }

 private:
  void throw_if_broken(int rank, const std::string& what) {
    if (!broken_.empty()) {
      TG_THROW("local ", what, " on rank ", rank, " of ", size_, ": the group failed earlier (",
               broken_, ") and cannot be used again");
    }
  }

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<Call> calls_[2];
  std::vector<bool> present_;
  std::string broken_;  // why the group is unusable ("" while healthy)
};

template <typename T, typename U = T>
void reduce_rank_order(const LocalGroup& g, uint64_t seq, int64_t n, ReduceOp op,
                       std::vector<char>& out) {
  out.resize(static_cast<size_t>(n) * sizeof(T));
  T* o = reinterpret_cast<T*>(out.data());
  const T* b0 = static_cast<const T*>(g.call(seq, 0).out);
  std::copy(b0, b0 + n, o);
  for (int r = 1; r < g.size(); ++r) {
    const T* b = static_cast<const T*>(g.call(seq, r).out);
    if (op == ReduceOp::max) {
      for (int64_t i = 0; i < n; ++i) o[i] = std::max(o[i], b[i]);
    } else {
      // U: unsigned twin of an integer T, so overflow wraps instead of being undefined.
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<T>(static_cast<U>(o[i]) + static_cast<U>(b[i]));
    }
  }
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  std::string backend() const override { return "local"; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Device device() const override { return Device::cpu(); }

  void allreduce(void* buf, int64_t n, DType dtype, ReduceOp op) override {
    TG_CHECK(n >= 0, "local allreduce: n = ", n, " (expected >= 0)");
    TG_CHECK(
        dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u64,
        "local allreduce: dtype ", dtype_name(dtype),
        " is not supported (expected f32, i32, i64 or u64)");
    TG_CHECK(buf != nullptr || n == 0, "local allreduce: null buffer for n = ", n);
    Call c{Kind::allreduce, static_cast<uint64_t>(n), dtype, op, 0, nullptr, buf, {}, {}};
    rendezvous(c);
    std::vector<char> result;
    switch (dtype) {
      case DType::f32:
        reduce_rank_order<float>(*group_, seq_, n, op, result);
        break;
      case DType::i32:
        reduce_rank_order<int32_t, uint32_t>(*group_, seq_, n, op, result);
        break;
      case DType::i64:
        reduce_rank_order<int64_t, uint64_t>(*group_, seq_, n, op, result);
        break;
      default:
        reduce_rank_order<uint64_t>(*group_, seq_, n, op, result);
        break;
    }
    finish(c);
    if (!result.empty()) std::memcpy(buf, result.data(), result.size());
    wire_model::add(wire_, wire_model::allreduce(result.size(), size()));
  }

  void allgather(const void* in, void* out, size_t bytes) override {
    TG_CHECK((in != nullptr && out != nullptr) || bytes == 0, "local allgather: null buffer");
    Call c{Kind::allgather, bytes, DType::u8, ReduceOp::sum, 0, in, out, {}, {}};
    rendezvous(c);
    char* o = static_cast<char*>(out);
    for (int r = 0; r < size(); ++r) {
      const void* src = group_->call(seq_, r).in;
      char* dst = o + static_cast<size_t>(r) * bytes;
      if (bytes > 0 && src != dst) std::memcpy(dst, src, bytes);
    }
    finish(c);
    wire_model::add(wire_, wire_model::allgather(bytes, size()));
  }

  void alltoall(const void* in, void* out, size_t bytes) override {
    TG_CHECK((in != nullptr && out != nullptr) || bytes == 0, "local alltoall: null buffer");
    Call c{Kind::alltoall, bytes, DType::u8, ReduceOp::sum, 0, in, out, {}, {}};
    rendezvous(c);
    char* o = static_cast<char*>(out);
    for (int r = 0; r < size(); ++r) {
      const char* src =
          static_cast<const char*>(group_->call(seq_, r).in) + static_cast<size_t>(rank_) * bytes;
      if (bytes > 0) std::memcpy(o + static_cast<size_t>(r) * bytes, src, bytes);
    }
    finish(c);
    wire_model::add(wire_, wire_model::alltoall(bytes, size()));
  }

  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) override {
    check_exchange("local", rank_, size(), sends, recvs);
    Call c{Kind::exchange, 0, DType::u8, ReduceOp::sum, 0, nullptr, nullptr, sends, recvs};
    rendezvous(c);
    // Each rank checks and copies its own receives: a send nobody receives, or a length the two
    // sides disagree on, is found by the rank that should have received it.
    std::vector<bool> received(static_cast<size_t>(size()), false);
    for (const RecvSpec& r : recvs) {
      const Call& from = group_->call(seq_, r.peer);
      const auto it = std::find_if(from.sends.begin(), from.sends.end(),
                                   [&](const SendSpec& s) { return s.peer == rank_; });
      if (it == from.sends.end() || it->bytes != r.bytes)
        group_->fail(rank_, detail::concat("exchange: rank ", rank_, " expects ", r.bytes,
                                           " bytes from rank ", r.peer, ", which sends ",
                                           it == from.sends.end() ? 0 : it->bytes,
                                           " (the ranks disagree on the plan)"));
      if (r.bytes > 0) std::memcpy(r.data, it->data, r.bytes);
      received[static_cast<size_t>(r.peer)] = true;
    }
    for (int q = 0; q < size(); ++q) {
      if (q == rank_ || received[static_cast<size_t>(q)]) continue;
      for (const SendSpec& s : group_->call(seq_, q).sends)
        if (s.peer == rank_)
          group_->fail(rank_, detail::concat("exchange: rank ", q, " sends ", s.bytes,
                                             " bytes to rank ", rank_,
                                             ", which receives nothing from it (the ranks "
                                             "disagree on the plan)"));
    }
    finish(c);
    wire_model::add(wire_, wire_model::exchange(sends, recvs));
  }

  void gather(const void* in, void* out, size_t bytes, int root) override {
    check_root(root, "gather");
    TG_CHECK(in != nullptr || bytes == 0, "local gather: null input buffer on rank ", rank_);
    TG_CHECK(rank_ != root || out != nullptr || bytes == 0, "local gather: the root (rank ", root,
             ") passed a null output buffer");
    Call c{Kind::gather, bytes, DType::u8, ReduceOp::sum, root, in, out, {}, {}};
    rendezvous(c);
    if (rank_ == root) {
      char* o = static_cast<char*>(out);
      for (int r = 0; r < size(); ++r) {
        const void* src = group_->call(seq_, r).in;
        char* dst = o + static_cast<size_t>(r) * bytes;
        if (bytes > 0 && src != dst) std::memcpy(dst, src, bytes);
      }
    }
    finish(c);
    wire_model::add(wire_, wire_model::gather(bytes, size(), rank_, root));
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    check_root(root, "broadcast");
    TG_CHECK(buf != nullptr || bytes == 0, "local broadcast: null buffer on rank ", rank_);
    Call c{Kind::broadcast, bytes, DType::u8, ReduceOp::sum, root, nullptr, buf, {}, {}};
    rendezvous(c);
    if (rank_ != root && bytes > 0) std::memcpy(buf, group_->call(seq_, root).out, bytes);
    finish(c);
    wire_model::add(wire_, wire_model::broadcast(bytes, size(), rank_, root));
  }

  void barrier() override {
    Call c{};
    rendezvous(c);
    ++seq_;
  }

 private:
  void check_root(int root, const char* what) const {
    TG_CHECK(root >= 0 && root < size(), "local ", what, ": root ", root,
             " is not a rank (expected 0..", size() - 1, ")");
  }

  // Posts this rank's call, waits for all ranks, and checks that every rank made the same call.
  void rendezvous(const Call& c) {
    group_->post(seq_, rank_, c);
    group_->arrive_and_wait(rank_, c.str());
    for (int r = 0; r < size(); ++r) {
      const Call& other = group_->call(seq_, r);
      if (!other.same_shape(group_->call(seq_, 0))) {
        group_->fail(rank_, detail::concat("mismatched collective: rank 0 called ",
                                           group_->call(seq_, 0).str(), ", rank ", r, " called ",
                                           other.str(),
                                           " (all ranks must make the same calls in "
                                           "the same order)"));
      }
    }
  }

  // Waits until every rank is done reading the others' buffers (so this rank may write its own).
  void finish(const Call& c) {
    group_->arrive_and_wait(rank_, c.str() + " (done reading)");
    ++seq_;
  }

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  uint64_t seq_ = 0;  // this rank's number of collectives so far
};

// The group of one (make_self_communicator): no peer, no rendezvous; each collective's result is
// this rank's own data, copied on its device where in and out differ.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(const Device& device) : device_(device) {}

  std::string backend() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Device device() const override { return device_; }

  void allreduce(void* buf, int64_t n, DType dtype, ReduceOp op) override {
    TG_CHECK(n >= 0 && (buf != nullptr || n == 0), "local allreduce: n = ", n, ", buffer ", buf);
  }
  void allgather(const void* in, void* out, size_t bytes) override { copy(out, in, bytes); }
  void alltoall(const void* in, void* out, size_t bytes) override { copy(out, in, bytes); }
  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) override {
    check_exchange("local", 0, 1, sends, recvs);  // a group of one has no peer: both empty
  }
  void gather(const void* in, void* out, size_t bytes, int root) override {
    TG_CHECK(root == 0, "local gather: root ", root, " is not a rank (a group of one)");
    copy(out, in, bytes);
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    TG_CHECK(root == 0, "local broadcast: root ", root, " is not a rank (a group of one)");
  }
  void barrier() override {}

 private:
  void copy(void* out, const void* in, size_t bytes) const {
    if (bytes == 0 || in == out) return;
    TG_CHECK(in != nullptr && out != nullptr, "local collective: null buffer");
    if (device_.is_cuda())
      cuda::copy_d2d(device_.index, out, in, bytes);
    else
      std::memcpy(out, in, bytes);
  }
  Device device_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const Device& device) {
  return std::make_unique<SelfCommunicator>(device);
}

std::vector<std::unique_ptr<Communicator>> make_local_group(int size,
                                                            std::chrono::milliseconds timeout) {
  TG_CHECK(size >= 1, "make_local_group: size = ", size, " (expected >= 1)");
  TG_CHECK(timeout.count() > 0, "make_local_group: timeout = ", timeout.count(),
           " ms (expected > 0)");
  auto group = std::make_shared<LocalGroup>(size, timeout);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(size);
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<LocalCommunicator>(group, r));
  return comms;
}

}  // namespace tg::comm
