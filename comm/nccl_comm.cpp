// The NCCL communicator: one GPU per rank, CUDA buffers, every collective on the calling thread's
// stream of the device (tg::cuda::stream: the main stream every kernel of the library runs on,
// or the side stream on the data-parallel reducer's communication thread), so collectives are
// ordered after the kernels of that thread that produced their inputs; each call returns when
// its stream work is done, polling without blocking in CUDA (below). Calls from two threads
// must not overlap (one communicator, one order of collectives on every rank).
//
// Start-up, through the rendezvous store (keys under `prefix`/nccl/, so use a fresh prefix per
// group on a persistent store):
//   1. every rank publishes its GPU's identity (UUID, PCI bus id, host name) under dev/<rank> and
//      reads all P of them: two ranks on the same GPU is an error naming both ranks and the GPU;
//   2. rank 0 creates the NCCL unique id (ncclGetUniqueId) and publishes it under id;
//   3. ncclCommInitRankConfig in non-blocking mode (config.blocking = 0), polled with
//      ncclCommGetAsyncError until done or options.timeout.
//
// Dead peers: NCCL kernels waiting on a peer that died spin forever, so nothing here blocks in
// NCCL or CUDA. Every call enqueues its work (non-blocking communicator: a call may return
// ncclInProgress; we poll ncclCommGetAsyncError until the enqueue completes), then polls
// cudaStreamQuery and ncclCommGetAsyncError until the stream is idle, an error appears, or
// options.timeout passes; on an error or a timeout the communicator is aborted (ncclCommAbort,
// which also stops its kernels), marked broken and the call throws naming the collective.
//
// Collectives: allreduce = ncclAllReduce (f32 ncclFloat32, i32 ncclInt32, i64 ncclInt64, u64
// ncclUint64; sum ncclSum, max ncclMax; integer sums wrap modulo 2^bits as two's complement adds
// do); allgather = ncclAllGather on bytes; exchange = one group of ncclSend/ncclRecv; gather = one
// group of ncclSend (each non-root to root) and ncclRecv (root from each rank) plus a device copy
// of the root's own block; broadcast = ncclBroadcast; barrier = an allreduce of one int32 on the
// device. Every rank ends with the same bits (NCCL's ring and tree both distribute one reduced
// copy); the f32 summation order is NCCL's, not the local backend's rank order.
//
// Wire accounting: the model of comm/wire_model.h (ring allreduce/allgather, flat
// gather/broadcast); NCCL exposes no byte counters, so these are the algorithm's figures, not a
// measurement.
#include "comm/nccl_comm.h"

#include "comm/store.h"
#include "nn/core/error.h"

#if TG_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/nccl_lib.h"
#include "comm/wire_model.h"
#include "nn/core/clock.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/hash.h"
#endif

namespace tg::comm {

#if TG_CUDA

namespace {

// One rank's GPU, as exchanged through the store (fixed-size, so it travels as raw bytes).
struct GpuIdentity {
  char uuid[16];
  char bus_id[32];
  char host[64];
};

// 8-4-4-4-12 hex digits, as nvidia-smi prints a GPU's UUID.
std::string uuid_hex(const char* u) {
  return to_hex(u, 4) + "-" + to_hex(u + 4, 2) + "-" + to_hex(u + 6, 2) + "-" + to_hex(u + 8, 2) +
         "-" + to_hex(u + 10, 6);
}

std::string describe(const GpuIdentity& g) {
  return detail::concat("GPU-", uuid_hex(g.uuid), " (PCI ", g.bus_id, ") on host ", g.host);
}

// Polls with a short sleep: cheap next to a collective, and never holds a core for long.
void pause_briefly(int round) {
  if (round < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u64:
      return ncclUint64;
    default:
      break;
  }
  TG_THROW("nccl allreduce: dtype ", dtype_name(t),
           " is not supported (expected f32, i32, i64 or u64)");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const CommOptions& options, Store& store, const std::string& prefix)
      : rank_(options.rank),
        size_(options.size),
        device_(options.device),
        timeout_(options.timeout) {
    cuda::DeviceGuard guard(device_.index);
    const std::string base = prefix + "/nccl/";

    // 1. One GPU per rank: exchange identities and refuse duplicates.
    GpuIdentity me{};
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device_.index), "cudaGetDeviceProperties");
    std::memcpy(me.uuid, prop.uuid.bytes, sizeof(me.uuid));
    check_cuda(cudaDeviceGetPCIBusId(me.bus_id, sizeof(me.bus_id), device_.index),
               "cudaDeviceGetPCIBusId");
    gethostname(me.host, sizeof(me.host) - 1);
    std::vector<char> mine(sizeof(GpuIdentity));
    std::memcpy(mine.data(), &me, sizeof(me));
    store.set(base + "dev/" + std::to_string(rank_), mine);
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(base + "dev/" + std::to_string(r));
    store.wait(keys);
    std::vector<GpuIdentity> all(size_);
    for (int r = 0; r < size_; ++r) {
      const std::vector<char> v = store.get(keys[r]);
      TG_CHECK(v.size() == sizeof(GpuIdentity), "nccl: rank ", r, "'s GPU record under '", keys[r],
               "' has ", v.size(), " bytes (expected ", sizeof(GpuIdentity),
               "): a different terngrad build, or a stale key from another job (use a fresh "
               "prefix or store)");
      std::memcpy(&all[r], v.data(), sizeof(GpuIdentity));
      all[r].bus_id[sizeof(all[r].bus_id) - 1] = 0;
      all[r].host[sizeof(all[r].host) - 1] = 0;
    }
    for (int a = 0; a < size_; ++a) {
      for (int b = a + 1; b < size_; ++b) {
        TG_CHECK(std::memcmp(all[a].uuid, all[b].uuid, sizeof(all[a].uuid)) != 0, "nccl: ranks ", a,
                 " and ", b, " both use ", describe(all[a]),
                 "; NCCL needs one GPU per rank (give each local rank its own device, e.g. "
                 "cuda:<local rank>, or use the gloo backend)");
      }
    }

    // 2. The unique id, from rank 0.
    ncclUniqueId id{};
    const std::string id_key = base + "id";
    if (rank_ == 0) {
      check_nccl_plain(nccl_.get_unique_id(&id), "ncclGetUniqueId");
      std::vector<char> v(sizeof(id));
      std::memcpy(v.data(), &id, sizeof(id));
      store.set(id_key, v);
    } else {
      const std::vector<char> v = store.get(id_key);
      TG_CHECK(v.size() == sizeof(id), "nccl: the unique id under '", id_key, "' has ", v.size(),
               " bytes (expected ", sizeof(id), ")");
      std::memcpy(&id, v.data(), sizeof(id));
    }

    // 3. Non-blocking init, polled against the timeout.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = nccl_.comm_init_rank_config(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string why = last_error(r);
      if (comm_ != nullptr) nccl_.comm_abort(comm_);
      comm_ = nullptr;
      TG_THROW("nccl: ncclCommInitRankConfig failed on rank ", rank_, " (", device_.str(),
               "): ", why);
    }
    wait_enqueued("init (ncclCommInitRankConfig)");

    barrier_buf_ = cuda::malloc_raw(device_.index, sizeof(int32_t));
  }

  ~NcclCommunicator() override {
    try {
      release();
    } catch (...) {
      // A destructor must not throw; the process is on its way out of this communicator anyway.
    }
  }

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }

  void allreduce(void* buf, int64_t n, DType dtype, ReduceOp op) override {
    const char* what = "allreduce";
    begin(what);
    TG_CHECK(n >= 0, "nccl allreduce: n = ", n, " (expected >= 0)");
    const ncclDataType_t t = nccl_type(dtype);
    const ncclRedOp_t o = op == ReduceOp::max ? ncclMax : ncclSum;
    cuda::DeviceGuard guard(device_.index);
    check_nccl(nccl_.all_reduce(buf, buf, static_cast<size_t>(n), t, o, comm_, stream()), what);
    finish(what);
    wire_model::add(wire_,
                    wire_model::allreduce(static_cast<uint64_t>(n) * element_size(dtype), size_));
  }

  void allgather(const void* in, void* out, size_t bytes) override {
    const char* what = "allgather";
    begin(what);
    cuda::DeviceGuard guard(device_.index);
    check_nccl(nccl_.all_gather(in, out, bytes, ncclUint8, comm_, stream()), what);
    finish(what);
    wire_model::add(wire_, wire_model::allgather(bytes, size_));
  }

  void alltoall(const void* in, void* out, size_t bytes) override {
    const char* what = "alltoall";
    begin(what);
    TG_CHECK((in != nullptr && out != nullptr) || bytes == 0, "nccl alltoall: null buffer");
    cuda::DeviceGuard guard(device_.index);
    if (bytes > 0) {
      const char* i = static_cast<const char*>(in);
      char* o = static_cast<char*>(out);
      check_nccl(nccl_.group_start(), what);
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        check_nccl(
            nccl_.send(i + static_cast<size_t>(r) * bytes, bytes, ncclUint8, r, comm_, stream()),
            what);
        check_nccl(
            nccl_.recv(o + static_cast<size_t>(r) * bytes, bytes, ncclUint8, r, comm_, stream()),
            what);
      }
      check_nccl(nccl_.group_end(), what);
      wait_enqueued(what);
      const size_t own = static_cast<size_t>(rank_) * bytes;
      check_cuda(cudaMemcpyAsync(o + own, i + own, bytes, cudaMemcpyDeviceToDevice, stream()),
                 "alltoall: cudaMemcpyAsync of this rank's own block");
    }
    finish(what);
    wire_model::add(wire_, wire_model::alltoall(bytes, size_));
  }

  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) override {
    const char* what = "exchange";
    begin(what);
    check_exchange("nccl", rank_, size_, sends, recvs);
    cuda::DeviceGuard guard(device_.index);
    if (!sends.empty() || !recvs.empty()) {
      check_nccl(nccl_.group_start(), what);
      for (const SendSpec& e : sends)
        if (e.bytes > 0)
          check_nccl(nccl_.send(e.data, e.bytes, ncclUint8, e.peer, comm_, stream()), what);
      for (const RecvSpec& e : recvs)
        if (e.bytes > 0)
          check_nccl(nccl_.recv(e.data, e.bytes, ncclUint8, e.peer, comm_, stream()), what);
      check_nccl(nccl_.group_end(), what);
      wait_enqueued(what);
    }
    finish(what);
    wire_model::add(wire_, wire_model::exchange(sends, recvs));
  }

  void gather(const void* in, void* out, size_t bytes, int root) override {
    const char* what = "gather";
    begin(what);
    check_root(root, what);
    TG_CHECK(rank_ != root || out != nullptr || bytes == 0, "nccl gather: the root (rank ", root,
             ") passed a null output buffer");
    cuda::DeviceGuard guard(device_.index);
    if (bytes > 0) {
      check_nccl(nccl_.group_start(), what);
      if (rank_ == root) {
        char* o = static_cast<char*>(out);
        for (int r = 0; r < size_; ++r) {
          if (r == root) continue;
          check_nccl(
              nccl_.recv(o + static_cast<size_t>(r) * bytes, bytes, ncclUint8, r, comm_, stream()),
              what);
        }
      } else {
        check_nccl(nccl_.send(in, bytes, ncclUint8, root, comm_, stream()), what);
      }
      check_nccl(nccl_.group_end(), what);
      wait_enqueued(what);
      if (rank_ == root) {
        char* mine = static_cast<char*>(out) + static_cast<size_t>(root) * bytes;
        if (mine != in) {
          check_cuda(cudaMemcpyAsync(mine, in, bytes, cudaMemcpyDeviceToDevice, stream()),
                     "gather: cudaMemcpyAsync of the root's own block");
        }
      }
    }
    finish(what);
    wire_model::add(wire_, wire_model::gather(bytes, size_, rank_, root));
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    const char* what = "broadcast";
    begin(what);
    check_root(root, what);
    cuda::DeviceGuard guard(device_.index);
    check_nccl(nccl_.broadcast(buf, buf, bytes, ncclUint8, root, comm_, stream()), what);
    finish(what);
    wire_model::add(wire_, wire_model::broadcast(bytes, size_, rank_, root));
  }

  void barrier() override {
    const char* what = "barrier";
    begin(what);
    cuda::DeviceGuard guard(device_.index);
    check_nccl(nccl_.all_reduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, stream()),
               what);
    finish(what);
  }

 private:
  void release() {
    if (comm_ != nullptr) {
      cuda::DeviceGuard guard(device_.index);
      if (broken_) {
        nccl_.comm_abort(comm_);
      } else {
        // Finalize flushes outstanding work; a peer that vanished could stall it, so it is polled
        // against the timeout like everything else and aborted past it.
        bool done = nccl_.comm_finalize(comm_) == ncclSuccess;
        const auto deadline = Clock::now() + timeout_;
        for (int round = 0; !done; ++round) {
          ncclResult_t st = ncclSuccess;
          if (nccl_.comm_get_async_error(comm_, &st) != ncclSuccess || st != ncclInProgress ||
              Clock::now() > deadline) {
            done = st == ncclSuccess;
            break;
          }
          pause_briefly(round);
        }
        if (done) {
          nccl_.comm_destroy(comm_);
        } else {
          nccl_.comm_abort(comm_);
        }
      }
    }
    if (barrier_buf_ != nullptr) cuda::free_raw(device_.index, barrier_buf_);
  }

  void begin(const char* what) {
    TG_CHECK(!broken_, "nccl ", what, " on rank ", rank_,
             ": the communicator failed earlier and cannot be used again");
  }
  void check_root(int root, const char* what) {
    TG_CHECK(root >= 0 && root < size_, "nccl ", what, ": root ", root,
             " is not a rank (expected 0..", size_ - 1, ")");
  }

  std::string last_error(ncclResult_t r) const {
    std::string s = nccl_.get_error_string(r);
    const char* last = nccl_.get_last_error(comm_);
    if (last != nullptr && *last != 0) s += std::string(" (") + last + ")";
    return s;
  }

  // This thread's stream of the device (main, or side on the reducer's thread).
  cudaStream_t stream() const { return static_cast<cudaStream_t>(cuda::stream(device_.index)); }

  [[noreturn]] void fail(const std::string& msg) {
    broken_ = true;
    if (comm_ != nullptr) nccl_.comm_abort(comm_);
    comm_ = nullptr;
    throw Error(__FILE__, __LINE__, msg);
  }

  void check_nccl_plain(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) TG_THROW("nccl: ", what, " failed on rank ", rank_, ": ", last_error(r));
  }
  void check_nccl(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(detail::concat("nccl ", what, " failed on rank ", rank_, " of ", size_, " (",
                        device_.str(), "): ", last_error(r)));
  }
  void check_cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    const std::string msg =
        detail::concat("nccl communicator on rank ", rank_, ": ", what,
                       " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    if (comm_ != nullptr) fail(msg);
    throw Error(__FILE__, __LINE__, msg);
  }

  // Non-blocking communicator: wait until NCCL has finished enqueueing (or initialising).
  void wait_enqueued(const char* what) {
    const auto deadline = Clock::now() + timeout_;
    for (int round = 0;; ++round) {
      ncclResult_t st = ncclSuccess;
      const ncclResult_t r = nccl_.comm_get_async_error(comm_, &st);
      if (r != ncclSuccess) check_nccl(r, what);
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) check_nccl(st, what);
      if (Clock::now() > deadline) {
        fail(detail::concat("nccl ", what, " on rank ", rank_, " of ", size_, ": timed out after ",
                            timeout_.count(), " ms (a peer rank did not join or died)"));
      }
      pause_briefly(round);
    }
  }

  // The work is enqueued: wait for the stream, watching for NCCL errors and the deadline.
  void finish(const char* what) {
    wait_enqueued(what);
    const auto deadline = Clock::now() + timeout_;
    const cudaStream_t s = stream();
    for (int round = 0;; ++round) {
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, what);
      ncclResult_t st = ncclSuccess;
      const ncclResult_t r = nccl_.comm_get_async_error(comm_, &st);
      if (r != ncclSuccess) check_nccl(r, what);
      if (st != ncclSuccess && st != ncclInProgress) check_nccl(st, what);
      if (Clock::now() > deadline) {
        fail(detail::concat("nccl ", what, " on rank ", rank_, " of ", size_,
                            ": did not complete within ", timeout_.count(),
                            " ms (a peer rank died or stopped calling collectives); communicator "
                            "aborted"));
      }
      pause_briefly(round);
    }
  }

  const NcclApi& nccl_ = nccl_api();  // loads NCCL before anything else is done
  int rank_, size_;
  Device device_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  void* barrier_buf_ = nullptr;
  bool broken_ = false;
};

}  // namespace

#endif  // TG_CUDA

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options, Store& store,
                                                     const std::string& prefix) {
  TG_CHECK(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "nccl: rank ",
           options.rank, " of world size ", options.size, " (expected 0 <= rank < size)");
#if TG_CUDA
  TG_CHECK(options.device.is_cuda(), "comm.backend = nccl needs a CUDA device for rank ",
           options.rank, ", got ", options.device.str(),
           " (use the gloo backend for CPU training)");
  TG_CHECK(cuda::device_count() > 0, "comm.backend = nccl: no CUDA device is usable here (",
           cuda::unavailable_reason(), "); use the gloo backend");
  TG_CHECK(options.device.index >= 0 && options.device.index < cuda::device_count(),
           "comm.backend = nccl: rank ", options.rank, " asks for ", options.device.str(), " but ",
           cuda::device_count(), " CUDA device(s) are present");
  return std::make_unique<NcclCommunicator>(options, store, prefix);
#else
  (void)store;
  (void)prefix;
  TG_THROW(
      "comm.backend = nccl needs a build with CUDA and NCCL (this build has "
      "TG_ENABLE_CUDA=OFF); use the gloo backend");
#endif
}

}  // namespace tg::comm
