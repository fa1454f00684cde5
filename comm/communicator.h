// Communicators: the collectives data-parallel training needs, behind one interface, with the
// bytes each rank puts on and takes off the wire counted exactly.
//
//   local  ranks are threads of one process sharing memory (make_local_group): the in-process
//          reference the algorithms are tested on; and the group of one (make_self_communicator)
//          that workers emulated in one process aggregate through, on any device;
//   gloo   CPU buffers over TCP (Gloo), rendezvous through a Store (comm/store.h);
//   nccl   CUDA buffers, one GPU per rank; the NCCL unique id is handed out through the Store.
//
// All collectives are blocking and must be called by every rank of the group in the same order
// (as with MPI). Buffers live on device() (host memory for local groups and gloo, the group of
// one's device, device memory of this rank's GPU for nccl). Byte counts are per call on this rank;
// n counts elements.
//
// Wire accounting (`wire()`): the payload bytes this rank sent and received through the
// transport, by the algorithm the backend runs for that collective (documented per backend:
// e.g. a ring allreduce of B bytes over P ranks sends and receives 2 (P - 1) / P * B). The local
// backend counts what a message-passing implementation of the same algorithm would move, so
// emulated and real runs report the same figures. Rendezvous and control traffic are excluded.
//
// Failures (a peer that died or timed out, a mismatched call) throw tg::Error naming the backend,
// the collective and, where known, the peer rank; a communicator that has thrown is broken and
// must not be used again.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nn/core/device.h"
#include "nn/core/dtype.h"
#include "nn/core/enum_names.h"

namespace tg::comm {

class Store;

enum class ReduceOp : uint8_t { sum, max };
const char* name(ReduceOp op);

struct WireBytes {
  uint64_t sent = 0, received = 0;
};

// One message of a grouped exchange (Communicator::exchange): `bytes` bytes to or from `peer`.
struct SendSpec {
  int peer = 0;
  const void* data = nullptr;
  size_t bytes = 0;
};
struct RecvSpec {
  int peer = 0;
  void* data = nullptr;
  size_t bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "local", "gloo", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;  // where collective buffers live

  // buf[0 .. n) = op over all ranks of their buf[0 .. n), in place, for dtype f32, i32, i64 or
  // u64 (sum of integers wraps modulo 2^bits: the packed-field algorithms rely on exact integer
  // addition). Every rank gets bit-identical results.
  virtual void allreduce(void* buf, int64_t n, DType dtype, ReduceOp op) = 0;
  // out[r * bytes .. (r + 1) * bytes) = rank r's in[0 .. bytes), on every rank.
  virtual void allgather(const void* in, void* out, size_t bytes) = 0;
  // Personalised exchange: `in` holds size() blocks of `bytes`, block q meant for rank q; after
  // the call out[r * bytes .. (r + 1) * bytes) = rank r's block for this rank (its in[rank() *
  // bytes ..)). The reduce-scatter half of an exact fp32 reduction (terngrad/exchange/aggregate.h)
  // is one. in and out must not overlap.
  virtual void alltoall(const void* in, void* out, size_t bytes) = 0;
  // Grouped point-to-point, all in flight at once (NCCL's grouped ncclSend/ncclRecv, MPI's
  // alltoallv): this rank sends every entry of `sends` and receives every entry of `recvs`. It is
  // a collective like the others: every rank calls it, in the same order, each with its own lists
  // (either may be empty; a rank with nothing to move still calls it). A peer appears at most
  // once in each list and is never this rank; zero-byte entries are allowed and move nothing.
  // Rank a's send to b must meet b's receive from a of the same length: a mismatch throws on the
  // receiver, naming the peer (local, gloo), or hangs until the timeout where the transport
  // cannot tell (nccl). wire() adds exactly the listed bytes. The exact ternary routes
  // (terngrad/exchange/) are built on it: what each rank sends to whom is their plan's.
  virtual void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) = 0;
  // On root: out[r * bytes ..) = rank r's in (out may be null elsewhere).
  virtual void gather(const void* in, void* out, size_t bytes, int root) = 0;
  // root's buf[0 .. bytes) to every rank's buf.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Stops this rank's collectives, from any thread: the one in flight (on another thread) and
  // every later one throw naming `why`, and the connections to the peers close, so the peers
  // blocked on this rank fail at once too. The process group calls it when another rank reports
  // a failure (comm/process_group.h). Returns false where the backend cannot (nothing happens).
  virtual bool abort(const std::string& why) noexcept {
    (void)why;
    return false;
  }

  WireBytes wire() const { return wire_; }

  // A digest of what the next collectives are about, the same on every rank that is in step
  // (tern::aggregate sets one of the step, slot range, wire layout and compressor, and 0
  // when it is done). A backend that frames its messages (gloo) sends it with each and names a
  // peer whose digest differs; the others ignore it.
  void set_call_context(uint64_t digest) { call_context_ = digest; }

 protected:
  WireBytes wire_;
  uint64_t call_context_ = 0;
};

// Throws naming `backend`, this rank and the entry when an exchange's lists break its contract
// (a peer out of range, this rank itself, a peer twice in one list, a null buffer with bytes).
void check_exchange(const char* backend, int rank, int size, std::span<const SendSpec> sends,
                    std::span<const RecvSpec> recvs);

// The transport between processes (the config's comm.backend; kBackends names them). `automatic`
// is the process group's choice (comm/process_group.h: nccl for CUDA training with a GPU per rank,
// else gloo); a communicator is made for gloo or nccl.
enum class Backend { automatic, gloo, nccl };
inline constexpr EnumTable<Backend, 3> kBackends = {
    {{Backend::automatic, "auto"}, {Backend::gloo, "gloo"}, {Backend::nccl, "nccl"}}};

// How the processes of a run meet and talk: the config's [comm] backend, timeout and interface.
struct GroupOptions {
  Backend backend = Backend::automatic;
  double timeout = 45.0;  // seconds any single collective or the rendezvous waits for a peer
  std::string interface;  // gloo: network interface to bind, e.g. eth0 ("" = by host name)
  // Ranks per node, for the node layout (comm/topology.h): 0 = learn it at the rendezvous (Slurm's
  // node index, else the host name); G > 0: rank r is on node r / G (tests, netns labs, hosts
  // that share a name).
  int ranks_per_node = 0;
  // The job secret's file (comm/secret.h): "" = TG_SECRET_FILE from the environment, else none.
  std::string secret_file;
  // gloo: run the rank's threads under Linux's SCHED_BATCH (nn/core/cpu_env.h,
  // use_batch_scheduling: why Gloo's event loop spins without it when cores are oversubscribed).
  bool sched_batch = true;
  bool operator==(const GroupOptions&) const = default;
  std::chrono::milliseconds timeout_ms() const {
    return std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000.0 + 0.5));
  }
};

// One communicator of a group (make_communicator): GroupOptions resolved for this rank.
struct CommOptions {
  Backend backend = Backend::gloo;  // gloo or nccl (local groups: make_local_group)
  int rank = 0, size = 1;
  Device device = Device::cpu();                                    // nccl: this rank's GPU
  std::chrono::milliseconds timeout = GroupOptions{}.timeout_ms();  // per collective or wait
  std::string interface;  // gloo: network interface ("" = resolve hostname)
  std::string hostname;   // gloo: address to bind ("" = this host's name; never a wildcard such
                          // as 0.0.0.0)
  // gloo: the job key (comm/secret.h) every message header is authenticated with; none: headers
  // carry no MAC (and one that carries one is refused: the peer has a secret this rank lacks).
  std::optional<std::array<uint8_t, 32>> mac_key;
};

// A gloo or nccl communicator of options.size ranks meeting through `store` under a key prefix
// (groups may share a store); in tg_comm only, tg_comm_core has no backends. Throws saying why
// when the backend cannot work here (nccl without CUDA/NCCL, a CPU device, two ranks on one GPU).
std::unique_ptr<Communicator> make_communicator(const CommOptions& options, Store& store,
                                                const std::string& prefix = "tg");

// `size` communicators of the local backend sharing one in-process group: rank r is element r,
// meant to be driven by one thread per rank. Host buffers.
std::vector<std::unique_ptr<Communicator>> make_local_group(
    int size, std::chrono::milliseconds timeout = GroupOptions{}.timeout_ms());

// The local backend's group of one rank, with buffers on `device` (host or a GPU): what workers
// emulated in one process aggregate through. Every collective returns this rank's own data
// (copied where in and out differ); nothing goes on a wire, so wire() stays zero.
std::unique_ptr<Communicator> make_self_communicator(const Device& device);

// "0, 2, 5": ranks listed in an error message.
std::string join_ranks(const std::vector<int>& ranks);

}  // namespace tg::comm
