// The process group of a multi-process run: joining it (store, start-up checks, communicator)
// and the few collectives a solver needs besides gradient reduction (c10d's init_process_group
// and ProcessGroup; the launcher that starts the ranks is comm/launch.h).
//
// Joining, in order:
//   1. open the rendezvous store (comm/store.h) named by RankEnv::rendezvous;
//   2. publish this rank's start-up record under "tg/<job>/hello/<rank>": world size, backend,
//      the run's fingerprint (RunIdentity: text every rank must share, the solver's config), the
//      iteration it starts from, and its host and CPU set (for the thread policy,
//      local_sharing()); wait up to GroupOptions::timeout for every other rank's record and
//      compare: a rank that never arrives, a different world size, a different fingerprint (the
//      differences explained by RunIdentity::explain) or another start iteration (a resume that
//      read another checkpoint) is an error naming the rank;
//   3. the node layout (comm/topology.h): GroupOptions::ranks_per_node when set, else each rank's
//      node key from its record: Slurm's node index (SLURM_NODEID) where Slurm started it, else
//      its host name; where Open MPI says how many ranks share this node
//      (OMPI_COMM_WORLD_LOCAL_SIZE), the layout must agree, or the error says to set
//      comm.ranks_per_node (hosts that share a name, containers);
//   4. make the communicator (GroupOptions::backend; `auto` = nccl for CUDA training with one GPU
//      per rank, gloo otherwise: when the records show two ranks on one host using the same GPU,
//      gloo). Gloo listens on GroupOptions::interface's address, else (ranks of the --nproc
//      launcher, all on this host) on 127.0.0.1, else on the address this host's name resolves
//      to; never on all.
// Keys are written once per job (comm/store.h), so a store reused by a later job needs a fresh
// directory or another job id (--job-id).
//
// Failures: when anything throws on a rank during training, post_mortem() publishes that rank's
// error under "tg/<job>/failed/<rank>" and waits a short window for the other ranks' reports.
// The ranks that report nothing are the lost ones (killed, crashed, hung or cut off); the
// message every surviving rank exits with names them first, then the errors the others reported.
// A survivor may be blocked in a collective that has not noticed the failure (waiting on a
// healthy peer that has itself stopped to report): it would report only at its own timeout,
// after the window, and be named lost. So the first failing rank also sets "tg/<job>/abort",
// and every Gloo rank runs a watcher thread that looks for that key every
// kFailureWatchInterval and then aborts its communicator (Communicator::abort): whatever it was
// waiting for throws at once, and it reports within the window. (PyTorch's process groups leave
// this to each rank's timeout; NCCL ranks, which have no abort from another thread here, still
// do.)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "nn/core/enum_names.h"
#include "nn/core/tensor.h"

namespace tg::comm {

// What every rank of a run must agree on, compared at the rendezvous.
struct RunIdentity {
  std::string fingerprint;  // the same text on every rank (the solver's: its config as TOML)
  int64_t start_step = 0;   // the iteration this rank starts from
  // How two fingerprints differ, for the error (each line labelled); null: not explained.
  std::function<std::string(const std::string& mine, const std::string& theirs,
                            const std::string& my_label, const std::string& their_label)>
      explain;
};

// The backend `backend` asks for when training on `device`: gloo or nccl (`auto` on CUDA says
// nccl here; the group falls back to gloo when ranks share a GPU). Throws naming the key
// comm.backend when nccl is asked for a CPU device.
Backend resolve_backend(Backend backend, const Device& device);

// The device a rank trains on: `device`, except that a bare "cuda" in a world of several ranks
// means cuda:(rank % the number of GPUs), one GPU per local rank.
Device rank_device(const std::string& device, int rank, int world_size);

// The start-up record each rank writes to the rendezvous store, as another rank reads it:
// the peer's bytes, checked (a JSON object of at most kMaxHelloBytes, integers integral and in
// range, the CPU list a comma-separated list of CPU numbers). Throws naming `rank` and the key.
struct RendezvousHello {
  int world_size = 0;
  std::string backend;
  int64_t start_step = 0;
  std::string gpu, config;
  std::string host;       // empty when the peer did not say
  std::string node;       // its node key (step 3); empty when the peer did not say
  std::vector<int> cpus;  // the CPUs its threads may use
};
inline constexpr size_t kMaxHelloBytes = size_t{1} << 20;
RendezvousHello parse_rendezvous_hello(std::string_view bytes, int rank);

// How often a Gloo rank looks for another rank's failure in the store (one existence check).
inline constexpr std::chrono::milliseconds kFailureWatchInterval{200};

class ProcessGroup {
 public:
  // Joins as described above. `job_id` keys the store (prefix "tg/<job_id>"); `device` is the
  // rank's training device (rank_device).
  ProcessGroup(const RankEnv& env, const std::string& job_id, const GroupOptions& options,
               const Device& device, const RunIdentity& run);
  ~ProcessGroup();

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  // Ranks (this one included) on this host whose CPU sets overlap this rank's: they share its
  // cores, so the thread policy gives each 1/local_sharing() of them.
  int local_sharing() const { return local_sharing_; }
  Communicator& comm() { return *comm_; }
  // Which node each rank runs on (step 3), and where that came from ("comm.ranks_per_node",
  // "Slurm's node index", "host names").
  const NodeLayout& nodes() const { return nodes_; }
  const std::string& nodes_from() const { return nodes_from_; }
  std::string describe() const;  // "rank 1 of 4, gloo over file:///tmp/..."
  // Where the job secret came from ("comm.secret_file /path", "TG_SECRET_FILE /path"); "" = the
  // run is not authenticated (comm/secret.h).
  const std::string& secret_source() const { return secret_source_; }

  // True on every rank when `flag` is true on any rank (a max-allreduce of one int).
  bool any(bool flag);
  // Elementwise maximum over ranks of `values` (the same length on every rank): several flags
  // agreed in one collective.
  std::vector<int32_t> max(const std::vector<int32_t>& values);
  // Elementwise sum over ranks of `values` (the same length on every rank), added in rank order
  // (the same bits on every rank).
  std::vector<double> sum(const std::vector<double>& values);
  // root's tensor (any device, contiguous) into every rank's `t`, staged through the
  // communicator's device when they differ.
  void broadcast(Tensor& t, int root);
  // On root: every rank's `bytes` bytes in rank order (empty elsewhere).
  std::vector<char> gather_bytes(const std::vector<char>& mine, int root);

  // Publishes `error` as this rank's failure, waits up to `window` for the other ranks' reports,
  // and returns the message to exit with: the ranks that reported nothing (lost) first, then this
  // rank's error, then the errors the others reported. Never throws.
  std::string post_mortem(const std::string& error, std::chrono::milliseconds window);

 private:
  std::string key(const std::string& what, int rank) const;
  void watch_for_failures();  // the watcher thread's loop (see the top of this file)
  void stop_watching();
  std::vector<char> through_device(
      const void* in, size_t in_bytes, size_t out_bytes,
      const std::function<void(const void* in, void* out)>& collective);
  RankEnv env_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Communicator> comm_;
  int local_sharing_ = 1;
  NodeLayout nodes_;
  std::string nodes_from_;
  std::string secret_source_;  // where the job secret came from; "" = none
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
};

// This rank's node key (step 3 above): "slurm-node:<SLURM_NODEID>" when Slurm started it
// (SLURM_NODEID and SLURM_JOB_ID set), else "host:<host>".
std::string node_key(const EnvMap& env, const std::string& host);
// The layout of a group from its ranks' node keys, or blocks of ranks_per_node > 0; `from` says
// which. Throws when local_size (Open MPI's count of ranks on this rank's node; 0 = unknown)
// disagrees with the layout's count for `rank`.
NodeLayout node_layout(const std::vector<std::string>& keys, int ranks_per_node, int rank,
                       int local_size, std::string* from);

}  // namespace tg::comm
