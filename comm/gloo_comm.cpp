// The Gloo communicator (see comm/gloo_comm.h): Gloo's TCP transport and its stock collectives
// (ring allreduce, ring allgather, flat gather, binomial-tree broadcast, dissemination barrier) on
// host buffers, with rendezvous through our Store, every Gloo exception turned into a tg::Error
// naming the collective, and the wire bytes of each algorithm counted per call.
#include "comm/gloo_comm.h"

#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/gather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/store.h"
#include "comm/wire_model.h"
#include "nn/core/error.h"
#include "nn/core/hash.h"

namespace tg::comm {

// The segment size gloo_wire::allreduce assumes (comm/gloo_wire.h) is Gloo's.
static_assert(gloo_wire::kMaxSegmentBytes == gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize,
              "comm/gloo_wire.h: kMaxSegmentBytes differs from this Gloo's allreduce segment size");

namespace {

void add(WireBytes& total, const WireBytes& w) {
  total.sent += w.sent;
  total.received += w.received;
}

// Gloo writes sockets with writev: a write to a peer that died raises SIGPIPE, whose default
// action kills the process before Gloo can report the broken connection. Ignore it (only if
// nobody installed a handler), so the write fails with EPIPE and the collective throws.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Element-wise reductions for Gloo's allreduce: out may alias a. Integer sums wrap modulo 2^bits
// (done in the unsigned type: signed overflow would be undefined behaviour).
template <typename T>
void reduce_sum(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < n; ++i)
      o[i] = static_cast<T>(static_cast<U>(x[i]) + static_cast<U>(y[i]));
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  }
}

template <typename T>
void reduce_max(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] < y[i] ? y[i] : x[i];
}

// Gloo's rendezvous talks to a gloo::rendezvous::Store: this one forwards to our Store under
// "<prefix>/gloo/addr/", so our timeout (the communicator's) and our errors apply.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(tg::comm::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override {
    store_.wait({prefix_ + key}, timeout_);
    return store_.get(prefix_ + key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout_);
  }

 private:
  tg::comm::Store& store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

// The header every exchange_legs message is preceded by (one per peer per call). Gloo's TCP
// pairs carry no identity and accept a shorter message than the receive posted without saying so,
// and abort the process (in their event thread) on a longer one. The header is received and
// checked before the payload's receive is posted, so a peer that disagrees on the length, the
// job, the collective or what it is about (the call context: step, bucket, layout) is named here
// instead of corrupting or killing this rank. It also
// carries the payload's last bytes: the receiver fills that spot with their complement before
// posting the receive, so a payload cut short (which cannot reach its own end) is caught exactly,
// with no false alarm. Without a job secret this is a consistency check between cooperating
// ranks, not authentication: a peer that lies consistently is not detected (the security model,
// README). With one (CommOptions::mac_key, comm/secret.h) `mac` is the first 16 bytes of
// HMAC-SHA256(K, the fields above it), checked first: a header from anyone without the secret is
// refused, naming the rank it came in as, before its payload is received.
struct WireHeader {
  uint32_t magic;   // kWireMagic
  uint32_t rank;    // the sender's rank
  uint64_t job;     // fnv1a64(prefix): the job the sender belongs to
  uint64_t seq;     // the sender's collective counter (its tag)
  uint64_t bytes;   // the payload bytes that follow
  uint64_t tail;    // the payload's last min(8, bytes) bytes, zero-padded
  uint64_t call;    // the sender's call context (Communicator::set_call_context)
  uint8_t mac[16];  // with a job secret: the MAC above; without: zero
};
static_assert(sizeof(WireHeader) == 64 && offsetof(WireHeader, mac) == 48,
              "WireHeader: the MAC covers the 48 bytes before it, with no padding");
constexpr uint32_t kWireMagic = 0x31584754;  // "TGX1"
// Payloads of at most kInlineBytes travel inside their header's message (exchange_legs): the
// scaler allgather of a ternary bucket, a tiny bucket's codes or values. A slot is what each peer's
// header receive is posted for (Gloo accepts a shorter message into it).
constexpr size_t kInlineBytes = 448;
constexpr size_t kSlotBytes = sizeof(WireHeader) + kInlineBytes;

// The last min(8, bytes) bytes of p[0 .. bytes), zero-padded.
uint64_t tail_of(const uint8_t* p, size_t bytes) {
  uint64_t t = 0;
  const size_t k = std::min<size_t>(bytes, 8);
  if (k > 0) std::memcpy(&t, p + bytes - k, k);
  return t;
}

// The injected fault (inject_wire_fault), for the communicators made after it.
std::mutex g_fault_mu;
WireFault g_fault;

WireFault fault_for(int rank) {
  std::lock_guard<std::mutex> lock(g_fault_mu);
  return g_fault.rank == rank ? g_fault : WireFault{};
}

// The address a hostname resolves to, as text, when it is a wildcard (0.0.0.0, ::): binding it
// listens on every interface of the host. "" otherwise.
std::string wildcard_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return "";
  std::string found;
  for (addrinfo* a = res; a && found.empty(); a = a->ai_next) {
    if (a->ai_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr == htonl(INADDR_ANY))
      found = "0.0.0.0";
    if (a->ai_family == AF_INET6 &&
        IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr))
      found = "::";
  }
  ::freeaddrinfo(res);
  return found;
}

// ---- fail-fast transport: every connection closed before a failed collective unwinds ---------
//
// When a peer dies mid-collective, the transfer that notices throws while the collective's other
// transfers are still posted on the healthy peers' connections, and Gloo's TCP device thread may
// still complete one of them: read a segment into its buffer (the caller's memory, or scratch such
// as the ring allreduce's tmp, which gloo::allreduce allocates and frees itself) and signal the
// unbound buffer's condition variable. Meanwhile the throwing thread unwinds and frees those
// buffers. Gloo's only guard is ~UnboundBuffer spinning until the device thread drops its
// weak_ptr-derived reference (gloo/common/memory.h): a relaxed load that orders nothing, so in
// the memory model (and for ThreadSanitizer, which reported it in those tests: RELIABILITY.md)
// the destruction races with the device thread's last signal and writes.
//
// Keeping a failed collective's buffers alive until the communicator dies (a graveyard) cannot
// fix that: the ring's tmp is destroyed inside gloo::allreduce before any of our code runs; a
// kept unbound buffer over the caller's memory would let the device thread write into memory the
// caller has reused; and each TCP unbound buffer owns the transport context, which owns the
// device thread, so that thread cannot be stopped before the buffers are freed. Instead every
// unbound buffer (ours, and those Gloo's algorithms create through the context) is a
// FailFastBuffer: the first of its operations that throws closes all of this rank's connections
// before the exception leaves it, so before any frame above it unwinds. Pair::close takes the
// pair's mutex, under which the device thread does all its work on that pair (every read into a
// buffer, every completion signal), and unregisters the socket from the device loop: once all
// pairs are closed, the device thread never touches those buffers again, and everything it did
// to them happens-before the unwinding that frees them. Gloo does the same on a timed-out wait
// (tcp::Context::signalException closes every pair); this extends it to every transport error.
// The communicator is broken after such a failure anyway (guarded), and the peers see their
// connections to this rank close at once rather than at their own timeout. The same transport
// can be aborted from another thread (Communicator::abort, when another rank reports a failure):
// it closes the connections, interrupts every wait in progress, and every operation throws.
// Success path: one small allocation and a locked list insert per unbound buffer, one more
// indirect call and an atomic load per operation; nothing copied.
class FailFastTransport;

class FailFastBuffer final : public gloo::transport::UnboundBuffer {
 public:
  FailFastBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner,
                 std::shared_ptr<FailFastTransport> transport);
  ~FailFastBuffer() override;
  FailFastBuffer(const FailFastBuffer&) = delete;
  FailFastBuffer& operator=(const FailFastBuffer&) = delete;

  using gloo::transport::UnboundBuffer::waitRecv;
  using gloo::transport::UnboundBuffer::waitSend;

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    return guard([&] { return inner_->waitRecv(rank, timeout); });
  }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    return guard([&] { return inner_->waitSend(rank, timeout); });
  }
  // abort(): makes the wait in progress (or the next one) on either side return false.
  void interrupt() noexcept;
  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }
  void send(int dst, uint64_t slot, size_t offset, size_t nbytes) override {
    guard([&] { inner_->send(dst, slot, offset, nbytes); });
  }
  void recv(int src, uint64_t slot, size_t offset, size_t nbytes) override {
    guard([&] { inner_->recv(src, slot, offset, nbytes); });
  }
  void recv(std::vector<int> srcs, uint64_t slot, size_t offset, size_t nbytes) override {
    guard([&] { inner_->recv(std::move(srcs), slot, offset, nbytes); });
  }

 private:
  template <typename F>
  auto guard(F&& op) -> decltype(op());

  std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
  std::shared_ptr<FailFastTransport> transport_;
};

// The transport context every collective sees: Gloo's own (TCP) context, its unbound buffers
// wrapped in FailFastBuffer.
class FailFastTransport final : public gloo::transport::Context,
                                public std::enable_shared_from_this<FailFastTransport> {
 public:
  explicit FailFastTransport(std::shared_ptr<gloo::transport::Context> inner)
      : gloo::transport::Context(inner->rank, inner->size), inner_(std::move(inner)) {
    setTimeout(inner_->getTimeout());
  }

  std::unique_ptr<gloo::transport::Pair>& getPair(int peer) override {
    return inner_->getPair(peer);
  }
  std::unique_ptr<gloo::transport::Pair>& createPair(int peer) override {
    return inner_->createPair(peer);
  }
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr,
                                                                      size_t size) override {
    return std::make_unique<FailFastBuffer>(inner_->createUnboundBuffer(ptr, size),
                                            shared_from_this());
  }

  // Stops every collective of this rank, from any thread (Communicator::abort): marks the
  // transport aborted, closes every connection (the peers see this rank fail at once), and
  // interrupts every wait in progress (UnboundBuffer::abortWait*, which makes it return false).
  // Every FailFastBuffer operation then throws gloo::IoException(why): the wait that was
  // interrupted, and any later send, receive or wait (FailFastBuffer::guard).
  void abort(const std::string& why) noexcept {
    {
      std::lock_guard<std::mutex> lock(abort_mu_);
      if (aborted_.load()) return;
      why_ = why;
      aborted_.store(true);
    }
    close_all();
    std::lock_guard<std::mutex> lock(live_mu_);
    for (FailFastBuffer* b : live_) b->interrupt();
  }

  void throw_if_aborted() {
    if (!aborted_.load()) return;
    std::lock_guard<std::mutex> lock(abort_mu_);
    throw gloo::IoException(why_);
  }
  // Why abort() stopped this transport; nothing when it did not.
  std::optional<std::string> abort_reason() {
    if (!aborted_.load()) return std::nullopt;
    std::lock_guard<std::mutex> lock(abort_mu_);
    return why_;
  }

  // The buffers alive now, for abort(): each adds itself when made and removes itself when
  // destroyed, under live_mu_, so abort() never touches a freed one.
  void enlist(FailFastBuffer* b) {
    std::lock_guard<std::mutex> lock(live_mu_);
    live_.push_back(b);
  }
  void delist(FailFastBuffer* b) {
    std::lock_guard<std::mutex> lock(live_mu_);
    live_.erase(std::find(live_.begin(), live_.end(), b));
  }

  // Closes every connection (see above). Pair::close is idempotent and takes the pair's lock; it
  // returns once the device loop no longer watches the socket.
  void close_all() noexcept {
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      try {
        if (auto& pair = inner_->getPair(r)) pair->close();
      } catch (...) {  // keep the collective's own error; close what can be closed
      }
    }
  }

 private:
  const std::shared_ptr<gloo::transport::Context> inner_;
  std::mutex abort_mu_;  // why_, written once before aborted_
  std::atomic<bool> aborted_{false};
  std::string why_;
  std::mutex live_mu_;
  std::vector<FailFastBuffer*> live_;
};

FailFastBuffer::FailFastBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner,
                               std::shared_ptr<FailFastTransport> transport)
    : gloo::transport::UnboundBuffer(inner->ptr, inner->size),
      inner_(std::move(inner)),
      transport_(std::move(transport)) {
  transport_->enlist(this);
}

FailFastBuffer::~FailFastBuffer() {
  transport_->delist(this);
}

void FailFastBuffer::interrupt() noexcept {
  inner_->abortWaitRecv();
  inner_->abortWaitSend();
}

template <typename F>
auto FailFastBuffer::guard(F&& op) -> decltype(op()) {
  try {
    transport_->throw_if_aborted();
    if constexpr (std::is_void_v<decltype(op())>) {
      op();
    } else {
      auto done = op();
      transport_->throw_if_aborted();  // a wait that abort() interrupted returns false
      return done;
    }
  } catch (...) {
    transport_->close_all();
    throw;
  }
}

// Gloo's rendezvous context, its transport context swapped for the fail-fast one once the full
// mesh is connected (gloo::Context creates every unbound buffer through it).
class FailFastContext final : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  void connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device>& device) {
    connectFullMesh(store, device);
    transportContext_ = std::make_shared<FailFastTransport>(std::move(transportContext_));
  }

  // Closes this rank's connections (FailFastTransport::close_all): for the failures found by
  // our own checks rather than by Gloo, so the peers blocked on this rank fail at once and can
  // report (comm/process_group.h) instead of waiting out their timeout.
  void close_all() noexcept {
    if (auto* t = dynamic_cast<FailFastTransport*>(transportContext_.get())) t->close_all();
  }
  bool abort(const std::string& why) noexcept {
    auto* t = transport();
    if (t) t->abort(why);
    return t != nullptr;
  }
  std::optional<std::string> abort_reason() {
    auto* t = transport();
    return t ? t->abort_reason() : std::nullopt;
  }

 private:
  FailFastTransport* transport() {
    return dynamic_cast<FailFastTransport*>(transportContext_.get());
  }
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const CommOptions& options, Store& store, const std::string& prefix)
      : rank_(options.rank),
        size_(options.size),
        timeout_(options.timeout),
        job_(fnv1a64(prefix)),
        mac_(options.mac_key
                 ? std::make_optional<HmacSha256>(options.mac_key->data(), options.mac_key->size())
                 : std::nullopt),
        fault_(fault_for(options.rank)) {
    TG_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "gloo communicator: rank ", rank_,
             " and world size ", size_, " are invalid (expected 0 <= rank < size)");
    TG_CHECK(options.device.is_cpu(),
             "gloo communicator: buffers must live on the CPU (got a "
             "CUDA device); use the nccl backend for CUDA buffers");
    TG_CHECK(timeout_.count() > 0, "gloo communicator: timeout must be positive, got ",
             timeout_.count(), " ms");
    ignore_sigpipe_once();
    const std::string where = " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                              ", store " + store.url() + ", prefix '" + prefix + "')";
    check_world_size(store, prefix, where);
    if (size_ == 1) return;  // every collective is a local copy: no device, no connections

    gloo::transport::tcp::attr attr;
    if (!options.interface.empty()) {
      attr.iface = options.interface;
    } else if (!options.hostname.empty()) {
      attr.hostname = options.hostname;
    } else {
      char host[256] = {};
      TG_CHECK(::gethostname(host, sizeof(host) - 1) == 0,
               "gloo communicator: gethostname failed: ", std::strerror(errno));
      attr.hostname = host;
    }
    // Gloo binds every pair's listening socket to the one address the interface or hostname
    // gives; a name that resolves to the wildcard would listen on all interfaces.
    if (attr.iface.empty()) {
      const std::string any = wildcard_address(attr.hostname);
      TG_CHECK(any.empty(), "gloo communicator", where, ": host '", attr.hostname,
               "' resolves to the wildcard address ", any,
               ", which would listen on every interface; set comm.interface (or the hostname) to "
               "the one address the other ranks reach this rank on");
    }
    std::shared_ptr<gloo::transport::Device> device;
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      TG_THROW(
          "gloo communicator: cannot open a TCP device on ",
          attr.iface.empty() ? "host '" + attr.hostname + "'" : "interface '" + attr.iface + "'",
          where, ": ", e.what(),
          " (set the comm interface or hostname to an address the other ranks can reach)");
    }
    try {
      auto context = std::make_shared<FailFastContext>(rank_, size_);
      context->setTimeout(timeout_);
      RendezvousStore rendezvous(store, prefix + "/gloo/addr/", timeout_);
      context->connect(rendezvous, device);
      context_ = std::move(context);
    } catch (const std::exception& e) {
      TG_THROW("gloo rendezvous failed", where, ": ", e.what());
    }
  }

  std::string backend() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }

  void allreduce(void* buf, int64_t n, DType dtype, ReduceOp op) override {
    TG_CHECK(n >= 0, "gloo allreduce: negative element count ", n);
    TG_CHECK(buf != nullptr || n == 0, "gloo allreduce: null buffer for ", n, " elements");
    switch (dtype) {
      case DType::f32:
        return allreduce_typed(static_cast<float*>(buf), n, op);
      case DType::i32:
        return allreduce_typed(static_cast<int32_t*>(buf), n, op);
      case DType::i64:
        return allreduce_typed(static_cast<int64_t*>(buf), n, op);
      case DType::u64:
        return allreduce_typed(static_cast<uint64_t*>(buf), n, op);
      default:
        TG_THROW("gloo allreduce: dtype ", dtype_name(dtype),
                 " is not supported (expected f32, i32, i64 or u64)");
    }
  }

  void allgather(const void* in, void* out, size_t bytes) override {
    if (bytes == 0) return;
    TG_CHECK(in != nullptr && out != nullptr, "gloo allgather: null buffer");
    auto* o = static_cast<uint8_t*>(out);
    auto* own = o + static_cast<size_t>(rank_) * bytes;
    if (in != own) std::memmove(own, in, bytes);
    if (size_ == 1) return;
    // This rank's block to every peer (the bytes of a ring: (P - 1) blocks each way per rank).
    guarded("allgather", [&] {
      auto buf = context_->createUnboundBuffer(o, bytes * static_cast<size_t>(size_));
      std::vector<Leg> sends, recvs;
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        sends.push_back({q, buf.get(), static_cast<size_t>(rank_) * bytes, bytes});
        recvs.push_back({q, buf.get(), static_cast<size_t>(q) * bytes, bytes});
      }
      exchange_legs(gloo::kAllgatherSlotPrefix, std::move(sends), std::move(recvs));
    });
    add(wire_, gloo_wire::allgather(bytes, size_));
  }

  void alltoall(const void* in, void* out, size_t bytes) override {
    if (bytes == 0) return;
    TG_CHECK(in != nullptr && out != nullptr, "gloo alltoall: null buffer");
    const size_t total = bytes * static_cast<size_t>(size_);
    auto* o = static_cast<uint8_t*>(out);
    const auto* i = static_cast<const uint8_t*>(in);
    std::memcpy(o + static_cast<size_t>(rank_) * bytes, i + static_cast<size_t>(rank_) * bytes,
                bytes);
    if (size_ == 1) return;
    // Block q of `in` to rank q.
    guarded("alltoall", [&] {
      auto recv_buf = context_->createUnboundBuffer(o, total);
      auto send_buf = context_->createUnboundBuffer(const_cast<uint8_t*>(i), total);
      std::vector<Leg> sends, recvs;
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        sends.push_back({q, send_buf.get(), static_cast<size_t>(q) * bytes, bytes});
        recvs.push_back({q, recv_buf.get(), static_cast<size_t>(q) * bytes, bytes});
      }
      exchange_legs(gloo::kAlltoallSlotPrefix, std::move(sends), std::move(recvs));
    });
    add(wire_, gloo_wire::alltoall(bytes, size_));
  }

  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) override {
    check_exchange("gloo", rank_, size_, sends, recvs);
    if (size_ == 1) return;  // no peer: both lists are empty
    guarded("exchange", [&] {
      // One unbound buffer per message (Gloo registers each with the transport).
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
      std::vector<Leg> out, in;
      for (const SendSpec& e : sends) {
        bufs.push_back(context_->createUnboundBuffer(const_cast<void*>(e.data), e.bytes));
        out.push_back({e.peer, bufs.back().get(), 0, e.bytes});
      }
      for (const RecvSpec& e : recvs) {
        bufs.push_back(context_->createUnboundBuffer(e.data, e.bytes));
        in.push_back({e.peer, bufs.back().get(), 0, e.bytes});
      }
      exchange_legs(gloo::kAlltoallSlotPrefix, std::move(out), std::move(in));
    });
    add(wire_, wire_model::exchange(sends, recvs));
  }

  void gather(const void* in, void* out, size_t bytes, int root) override {
    check_root("gather", root);
    if (bytes == 0) return;
    TG_CHECK(in != nullptr, "gloo gather: null input buffer");
    TG_CHECK(rank_ != root || out != nullptr, "gloo gather: null output buffer on the root");
    auto* own =
        rank_ == root ? static_cast<uint8_t*>(out) + static_cast<size_t>(rank_) * bytes : nullptr;
    if (size_ == 1) {
      if (in != own) std::memmove(own, in, bytes);
      return;
    }
    // Gloo's gather always memcpys the root's input into place: give it a copy when they alias.
    std::vector<uint8_t> copy;
    const void* src = in;
    if (in == own) {
      copy.assign(own, own + bytes);
      src = copy.data();
    }
    guarded("gather", [&] {
      gloo::GatherOptions opts(context_);
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(src)), bytes);
      if (rank_ == root) opts.setOutput(static_cast<uint8_t*>(out), bytes * size_);
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::gather(opts);
    });
    add(wire_, gloo_wire::gather(bytes, size_, rank_, root));
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    check_root("broadcast", root);
    if (bytes == 0 || size_ == 1) return;
    TG_CHECK(buf != nullptr, "gloo broadcast: null buffer");
    guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(buf), bytes);  // in place on the root too
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
    add(wire_, gloo_wire::broadcast(bytes, size_, rank_, root));
  }

  void barrier() override {
    if (size_ == 1) return;
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  bool abort(const std::string& why) noexcept override {
    return context_ && context_->abort(why);  // one rank (no context): nothing to wait for
  }

 private:
  template <typename T>
  void allreduce_typed(T* buf, int64_t n, ReduceOp op) {
    if (n == 0 || size_ == 1) return;
    guarded("allreduce", [&] {
      gloo::AllreduceOptions opts(context_);
      // The ring, named rather than left to Gloo's default: its allgather phase copies each
      // reduced chunk verbatim, which makes float results bit-identical on every rank.
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setOutput(buf, static_cast<size_t>(n));
      opts.setReduceFunction(op == ReduceOp::sum ? &reduce_sum<T> : &reduce_max<T>);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
    add(wire_, gloo_wire::allreduce(static_cast<uint64_t>(n) * sizeof(T), sizeof(T), size_, rank_));
  }

  // Every rank publishes its world size before Gloo connects: a rank that never starts is named
  // here, and ranks that disagree on the world size fail with that instead of a garbled mesh.
  void check_world_size(Store& store, const std::string& prefix, const std::string& where) {
    const std::string key_prefix = prefix + "/gloo/size/";
    const std::string mine = std::to_string(size_);
    store.set(key_prefix + std::to_string(rank_), std::vector<char>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(key_prefix + std::to_string(r));
    std::string wait_error;
    try {
      store.wait(keys, timeout_);
    } catch (const Error& e) {
      wait_error = e.what();
    }
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      std::vector<char> value;
      try {
        store.wait({keys[r]}, std::chrono::milliseconds(1));
        value = store.get(keys[r]);
      } catch (const Error&) {
        missing.push_back(r);
        continue;
      }
      const std::string theirs(value.begin(), value.end());
      TG_CHECK(theirs == mine, "gloo rendezvous", where, ": rank ", r, " was started with world ",
               "size ", theirs, ", this rank with ", mine,
               " (every rank must be given the same world size)");
    }
    if (!missing.empty()) {
      TG_THROW("gloo rendezvous", where, ": rank(s) ", join_ranks(missing),
               " did not arrive within ", timeout_.count(),
               " ms (not started, crashed, given another rendezvous URL or ",
               "prefix, or a smaller world size?): ", wait_error);
    }
  }

  void check_root(const char* what, int root) const {
    TG_CHECK(root >= 0 && root < size_, "gloo ", what, ": root ", root,
             " is out of range (expected 0 <= root < ", size_, ")");
  }

  // All ranks call collectives in the same order, so a per-communicator counter gives matching
  // tags (Gloo slots) on every rank and keeps consecutive collectives' messages apart.
  uint32_t next_tag() { return tag_++; }

  // One message of a direct exchange: `bytes` at `offset` of `buf`, to or from `peer`.
  struct Leg {
    int peer;
    gloo::transport::UnboundBuffer* buf;
    size_t offset, bytes;
  };

  // Direct exchange, all transfers in flight at once and every receive posted before any send:
  // each send leg's bytes go to its peer, each receive leg's bytes arrive from its peer. (Gloo's
  // own allgather ring and alltoall loop post each send before its receive, one peer at a time,
  // and left one direction of a shaped full-duplex link idle: up to 2 times slower at P = 2.)
  // Legs are posted in ring order from this rank (receives from r - 1, r - 2, ..., sends to
  // r + 1, r + 2, ...), so P ranks do not all start on the same peer.
  void exchange_legs(uint8_t prefix, std::vector<Leg> sends, std::vector<Leg> recvs) {
    const uint64_t seq = next_tag();
    const uint64_t slot = gloo::Slot::build(prefix, static_cast<uint32_t>(seq));
    const bool faulty = !fault_.kind.empty() && calls_++ == fault_.call;
    const auto after = [&](int peer) { return (peer - rank_ + size_) % size_; };
    std::sort(sends.begin(), sends.end(),
              [&](const Leg& a, const Leg& b) { return after(a.peer) < after(b.peer); });
    std::sort(recvs.begin(), recvs.end(),
              [&](const Leg& a, const Leg& b) { return after(a.peer) > after(b.peer); });
    // Headers first, on the same slot (a pair delivers one slot's messages in order): each peer's
    // is checked before its payload's receive is posted. One slot of kSlotBytes per peer: the
    // header, then the payload itself when it is at most kInlineBytes (inline: one message and
    // one round instead of two; both sides decide by the leg's length, which they agree on or
    // the header check names the peer). An inline payload's `tail` is the FNV-1a of its bytes,
    // so one cut short (the rest of the slot is zero) is caught as a payload's tail is.
    std::vector<uint8_t> theirs(static_cast<size_t>(size_) * kSlotBytes),
        mine(static_cast<size_t>(size_) * kSlotBytes);
    const auto slot_of = [](std::vector<uint8_t>& v, int peer) {
      return v.data() + static_cast<size_t>(peer) * kSlotBytes;
    };
    const auto header_of = [&](int peer) {
      WireHeader h;
      std::memcpy(&h, slot_of(theirs, peer), sizeof h);
      return h;
    };
    std::vector<size_t> out_bytes(static_cast<size_t>(size_), 0);  // each header message's size
    std::vector<char> sent_inline(static_cast<size_t>(size_), 0);
    for (const Leg& l : sends) {
      const auto* data = static_cast<const uint8_t*>(l.buf->ptr) + l.offset;
      const size_t send_bytes = faulty ? fault_send_bytes(l.bytes) : l.bytes;
      const bool in_line = inline_payload(l.bytes) && send_bytes <= kInlineBytes;
      uint8_t* slot_out = slot_of(mine, l.peer);
      WireHeader h = {kWireMagic,    static_cast<uint32_t>(rank_),
                      job_,          seq,
                      l.bytes,       in_line ? inline_check(data, l.bytes) : tail_of(data, l.bytes),
                      call_context_, {}};
      if (faulty) apply_fault(h, send_bytes);
      sign(h);
      if (faulty && fault_.kind == "mac") h.mac[0] ^= 1;
      std::memcpy(slot_out, &h, sizeof h);
      // A faulty length's extra bytes are the slot's zeros (the leg has only l.bytes).
      if (in_line && send_bytes > 0)
        std::memcpy(slot_out + sizeof h, data, std::min(send_bytes, l.bytes));
      out_bytes[static_cast<size_t>(l.peer)] = sizeof h + (in_line ? send_bytes : 0);
      sent_inline[static_cast<size_t>(l.peer)] = in_line;
    }
    auto header_in = context_->createUnboundBuffer(theirs.data(), theirs.size());
    auto header_out = context_->createUnboundBuffer(mine.data(), mine.size());
    for (const Leg& l : recvs)
      header_in->recv(l.peer, slot, static_cast<size_t>(l.peer) * kSlotBytes, kSlotBytes);
    for (const Leg& l : sends)
      header_out->send(l.peer, slot, static_cast<size_t>(l.peer) * kSlotBytes,
                       out_bytes[static_cast<size_t>(l.peer)]);
    for (size_t k = 0; k < recvs.size(); ++k)
      GLOO_ENFORCE(header_in->waitRecv(timeout_), "receive timed out");
    for (size_t k = 0; k < sends.size(); ++k)
      GLOO_ENFORCE(header_out->waitSend(timeout_), "send timed out");
    closing_on_error([&] {
      for (const Leg& l : recvs) {
        const WireHeader h = header_of(l.peer);
        check_header(h, l.peer, seq, l.bytes);
        if (!inline_payload(l.bytes)) continue;
        const uint8_t* payload = slot_of(theirs, l.peer) + sizeof(WireHeader);
        TG_CHECK(inline_check(payload, l.bytes) == h.tail, "rank ", l.peer,
                 " sent a truncated message: fewer than the ", l.bytes,
                 " bytes its header announced (a misbehaving peer)");
        if (l.bytes > 0)
          std::memcpy(static_cast<uint8_t*>(l.buf->ptr) + l.offset, payload, l.bytes);
      }
    });

    // A faulty payload longer than its leg goes from a scratch copy of the right size.
    std::vector<std::vector<uint8_t>> scratch;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> scratch_bufs;
    for (const Leg& l : recvs) {
      if (inline_payload(l.bytes)) continue;
      const size_t k_tail = std::min<size_t>(l.bytes, 8);
      const uint64_t flipped = ~header_of(l.peer).tail;
      std::memcpy(static_cast<uint8_t*>(l.buf->ptr) + l.offset + l.bytes - k_tail, &flipped,
                  k_tail);
      l.buf->recv(l.peer, slot, l.offset, l.bytes);
    }
    std::vector<gloo::transport::UnboundBuffer*> posted;  // the buffer each send went from
    for (const Leg& l : sends) {
      const size_t send_bytes = faulty ? fault_send_bytes(l.bytes) : l.bytes;
      if (sent_inline[static_cast<size_t>(l.peer)] || l.bytes == 0) continue;
      gloo::transport::UnboundBuffer* out = l.buf;
      size_t offset = l.offset;
      if (send_bytes > l.bytes) {
        scratch.emplace_back(send_bytes, 0);
        scratch_bufs.push_back(
            context_->createUnboundBuffer(scratch.back().data(), scratch.back().size()));
        out = scratch_bufs.back().get();
        offset = 0;
      }
      out->send(l.peer, slot, offset, send_bytes);
      posted.push_back(out);
    }
    for (const Leg& l : recvs)
      if (!inline_payload(l.bytes)) GLOO_ENFORCE(l.buf->waitRecv(timeout_), "receive timed out");
    for (gloo::transport::UnboundBuffer* out : posted)
      GLOO_ENFORCE(out->waitSend(timeout_), "send timed out");
    closing_on_error([&] {
      for (const Leg& l : recvs) {
        if (inline_payload(l.bytes)) continue;
        const uint64_t got = tail_of(static_cast<const uint8_t*>(l.buf->ptr) + l.offset, l.bytes);
        TG_CHECK(got == header_of(l.peer).tail, "rank ", l.peer,
                 " sent a truncated message: fewer than the ", l.bytes,
                 " bytes its header announced (a misbehaving peer)");
      }
    });
  }

  // Whether a leg of `bytes` travels inside its header's message (empty legs too: no payload).
  static bool inline_payload(size_t bytes) { return bytes <= kInlineBytes; }

  // The `tail` of an inline payload: FNV-1a of its bytes.
  static uint64_t inline_check(const uint8_t* p, size_t bytes) {
    return fnv1a64(std::string_view(reinterpret_cast<const char*>(p), bytes));
  }

  // Runs a check of ours; when it throws, closes every connection first (nothing is posted on
  // any buffer at these points), so the peers waiting on this rank see it fail at once.
  template <typename F>
  void closing_on_error(F&& check) {
    try {
      check();
    } catch (...) {
      context_->close_all();
      throw;
    }
  }

  // What a faulty rank puts on the wire for a leg of `bytes` (fault_.kind length / truncate).
  size_t fault_send_bytes(size_t bytes) const {
    if (fault_.kind == "length") return bytes + 8;
    if (fault_.kind == "truncate") return bytes / 2;
    return bytes;
  }

  // h.mac: the MAC of the fields before it under the job key; zero without one.
  void sign(WireHeader& h) const {
    std::memset(h.mac, 0, sizeof h.mac);
    if (!mac_) return;
    const Mac256 m = mac_->mac(&h, offsetof(WireHeader, mac));
    std::memcpy(h.mac, m.data(), sizeof h.mac);
  }

  // Throws naming `from` when its header does not describe the message this rank expects. The
  // MAC first: nothing else a stranger wrote is looked at.
  void check_header(const WireHeader& h, int from, uint64_t seq, size_t bytes) const {
    if (mac_) {
      WireHeader want = h;
      sign(want);
      TG_CHECK(equal_constant_time(want.mac, h.mac, sizeof h.mac), "rank ", from,
               " sent a message header that is not authenticated with this job's secret (a "
               "stranger on its connection, or a rank given another comm.secret_file); refused "
               "before its payload");
    } else {
      const uint8_t zero[sizeof h.mac] = {};
      TG_CHECK(std::memcmp(h.mac, zero, sizeof zero) == 0 || h.magic != kWireMagic, "rank ", from,
               " authenticates its messages with a job secret and this rank has none (give "
               "every rank the same comm.secret_file or TG_SECRET_FILE)");
    }
    TG_CHECK(h.magic == kWireMagic, "rank ", from,
             " sent a malformed message header (not a terngrad peer, or garbage on the wire)");
    TG_CHECK(h.rank == static_cast<uint32_t>(from), "rank ", from,
             " sent a header claiming to be rank ", h.rank);
    TG_CHECK(h.job == job_, "rank ", from,
             " belongs to another job (its header carries another job id than this rank's)");
    TG_CHECK(h.seq == seq, "rank ", from, " is at collective #", h.seq, ", this rank at #", seq,
             " (the ranks disagree on the step, bucket or layout)");
    TG_CHECK(h.call == call_context_, "rank ", from,
             " is aggregating another step, bucket or layout than this rank (its call context ",
             h.call, ", this rank's ", call_context_, ")");
    TG_CHECK(h.bytes == bytes, "rank ", from, "'s message announces ", h.bytes,
             " bytes, this rank expects ", bytes,
             " (the ranks disagree on the layout or the length field is wrong)");
  }

  // The header of a faulty message (the payload's length is set by the caller).
  void apply_fault(WireHeader& h, size_t send_bytes) const {
    if (fault_.kind == "length") {
      h.bytes = send_bytes;
    } else if (fault_.kind == "job") {
      h.job = fnv1a64("tg/another-job");
    } else if (fault_.kind == "seq") {
      h.seq += 1;
    } else if (fault_.kind == "context") {
      h.call ^= 1;
    } else if (fault_.kind == "magic") {
      std::memset(&h, 0xA5, sizeof h);
    }
  }

  template <typename F>
  void guarded(const char* what, F&& run) {
    TG_CHECK(!broken_, "gloo ", what, " on rank ", rank_,
             ": this communicator failed earlier "
             "and cannot be used again (",
             broken_reason_, ")");
    try {
      run();
    } catch (const gloo::IoException& e) {
      fail(what, e.what(), /*io=*/true);
    } catch (const std::exception& e) {
      fail(what, e.what(), /*io=*/false);
    }
  }

  // A collective threw: the communicator is broken. After abort() the first error may be Gloo's
  // own, seen as pairs closed under the collective (an IoException, or an enforce on a closed
  // pair): the report is then the abort's reason.
  [[noreturn]] void fail(const char* what, const std::string& error, bool io) {
    broken_ = true;
    broken_reason_ = error;
    if (const std::optional<std::string> why = context_ ? context_->abort_reason() : std::nullopt) {
      broken_reason_ = "stopped: " + *why;
      TG_THROW("gloo ", what, " on rank ", rank_, " of ", size_, " stopped: ", *why);
    }
    if (io)
      TG_THROW("gloo ", what, " failed on rank ", rank_, " of ", size_, ": ", error,
               " (a peer died, closed its connection, or did not take part within ",
               timeout_.count(), " ms)");
    TG_THROW("gloo ", what, " failed on rank ", rank_, " of ", size_, ": ", error);
  }

  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  const uint64_t job_;  // fnv1a of the key prefix: the job this communicator serves
  const std::optional<HmacSha256> mac_;  // HMAC under the job key, with a secret
  const WireFault fault_;
  int64_t calls_ = 0;  // exchange_legs calls so far (for fault_.call)
  std::shared_ptr<FailFastContext> context_;
  uint32_t tag_ = 0;
  bool broken_ = false;  // a collective threw: Gloo's pairs are in an unknown state
  std::string broken_reason_;
};

}  // namespace

std::vector<std::string> wire_fault_kinds() {
  return {"length", "truncate", "job", "seq", "context", "magic", "mac"};
}

void inject_wire_fault(const WireFault& fault) {
  const std::vector<std::string> kinds = wire_fault_kinds();
  if (!fault.kind.empty() && std::find(kinds.begin(), kinds.end(), fault.kind) == kinds.end()) {
    std::string known;
    for (const std::string& k : kinds) known += (known.empty() ? "" : ", ") + k;
    TG_THROW("unknown wire fault '", fault.kind, "' (known: ", known, ")");
  }
  std::lock_guard<std::mutex> lock(g_fault_mu);
  g_fault = fault;
}

std::unique_ptr<Communicator> make_gloo_communicator(const CommOptions& options, Store& store,
                                                     const std::string& prefix) {
  return std::make_unique<GlooCommunicator>(options, store, prefix);
}

}  // namespace tg::comm
