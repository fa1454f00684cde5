// The gradient reducer of data-parallel training: the slots of the layout grouped into buckets,
// each bucket aggregated (comm/aggregate.h, or tern::aggregate_emulated when the workers are
// emulated in one process) as soon as its last gradient is final, so that communication overlaps
// the rest of the backward pass (the design of PyTorch DDP's Reducer and Horovod's tensor
// fusion).
//
// Buckets: slots in REVERSE layout order (backward produces the last layers' gradients first),
// each bucket a contiguous slot range whose gradients add up to at most `bucket_bytes` (f32
// bytes), the first bucket at most `first_bucket_bytes` so that the first exchange starts early;
// a slot larger than the cap is a bucket of its own, and a bucket also closes after any slot of
// at least `first_bucket_bytes`, so that a large layer's exchange never waits for the backward
// pass of the layers below it (with PyTorch DDP's rule, LeNet's 4.9 MB fc3 waits in one bucket
// with both convolutions, and nothing overlaps). The buckets depend on the layout and the
// caps only, never on the number of processes; and since every slot is compressed on its own
// (terngrad/compressor.h: SlotRange), the result is the same bits for any bucketing.
//
// One step: begin(step, local gradients, out); mark_ready(t) for every slot t of the LAST local
// worker's gradient once backward has finished it (earlier local workers' gradients must be
// complete at begin); finish(). Bucket b's exchange is launched when its slots are all ready and
// every bucket before it has been launched: the collectives start in bucket order on every rank,
// whatever order backward finishes the slots in. With `overlap` and a communicator, the
// exchanges run on the reducer's communication thread while backward goes on; otherwise
// (emulated workers, overlap off) finish() runs them in order. finish() marks the slots still
// pending ready (parameters backward never reached keep a zero gradient), waits for every
// bucket, and rethrows the first error of any exchange (the communicator is then broken and the
// run must stop).
//
// Threads: only the communication thread touches the communicator between begin() and finish();
// it runs the compressor on the slots of its bucket only (disjoint from what backward writes);
// its OpenMP thread count is the creating thread's.
//
// GPU (an NCCL communicator): the communication thread works on the device's side stream
// (cuda::SideStreamScope), so that the buckets' compression kernels and collectives run beside
// the backward kernels on the main stream, and it waits for NCCL by polling (comm/nccl_comm.h),
// never blocking the main thread. Streams are ordered by events only: launching bucket b records
// an event on the main stream after the kernels that produced its gradients (and everything
// before them, such as the last step's optimizer reading `out`), and the side stream waits for
// it; after each bucket the side stream records an event that finish() makes the main stream
// wait for, so the optimizer and the next step's zeroing of the gradients come after every
// exchange. The caching allocator keeps the side stream's blocks apart from the main stream's
// (nn/core/allocator.h); the buffers both streams touch (local_grads, out) are the caller's and
// stay alive past finish().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "comm/aggregate.h"
#include "comm/communicator.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"
#include "terngrad/compressor.h"

namespace tg::comm {

struct ReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;       // comm.bucket_mb (PyTorch DDP's default)
  int64_t first_bucket_bytes = int64_t{1} << 20;  // DDP's first bucket: the exchange starts early
  bool overlap = true;                            // exchange while backward runs
  AggregateOptions aggregate;                     // how each bucket travels
};

// The buckets of `layout` (see above): slot ranges in launch order, the last slots first.
std::vector<tern::SlotRange> make_buckets(const std::vector<tern::GradSlot>& layout,
                                          int64_t bucket_bytes, int64_t first_bucket_bytes);

// What one step's reduction did: every bucket's AggregateStats merged (routes per slot of the
// layout), and where the time went.
struct ReduceStats {
  AggregateStats merged;  // wire, routes (per slot), paths taken, encode/comm/reduce s
  int64_t buckets = 0;
  int64_t ternary_buckets = 0;      // buckets that took the ternary path
  int64_t elementwise_buckets = 0;  // ... the elementwise (reduce-scatter or ring) path
  double busy_s = 0;  // seconds the exchanges ran (on the communication thread, when overlapped)
  double wait_s = 0;  // seconds finish() waited: the part of the reduction backward did not hide
};

class Reducer {
 public:
  // comm: null for workers emulated in one process (total_workers = the local workers).
  // first_worker: the global index of this rank's first local worker.
  Reducer(tern::Compressor& compressor, Communicator* comm, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  const std::vector<tern::SlotRange>& buckets() const { return buckets_; }
  bool overlapped() const { return thread_.joinable(); }

  // Starts a step: local_grads are this rank's W flat f32 [total] gradients (the last one may
  // still be filled by backward, slot by slot); out (f32 [total]) receives the average. Both on
  // the communicator's device (or the gradients' device when emulated), alive until finish().
  void begin(int64_t step, std::span<const Tensor> local_grads, Tensor out);
  // Slot t of the last local worker's gradient is final.
  void mark_ready(size_t slot);
  // Waits for every bucket of the step (see above) and returns what they did.
  ReduceStats finish();

 private:
  void launch_ready_buckets();   // with mu_ held: queues the launchable buckets in order
  void exchange(size_t bucket);  // one bucket's aggregation; records stats
  void thread_main(int omp_threads);

  tern::Compressor& c_;
  Communicator* comm_;
  ReducerOptions o_;
  std::vector<tern::SlotRange> buckets_;
  std::vector<size_t> bucket_of_slot_;

  // GPU overlap (see above): the device, and its events.
  int gpu_ = -1;                            // the communicator's CUDA device, or -1
  std::vector<cuda::Event> launch_events_;  // per bucket, on the main stream
  std::optional<cuda::Event> done_event_;   // on the side stream, after each bucket

  // The step in flight.
  int64_t step_ = 0;
  std::vector<Tensor> grads_;
  Tensor out_;
  std::vector<int> pending_;  // per bucket: slots not ready yet
  std::vector<bool> ready_;   // per slot
  size_t launched_ = 0;       // buckets launched (in order)
  size_t done_ = 0;           // buckets finished
  std::vector<AggregateStats> stats_;
  double busy_s_ = 0;
  std::exception_ptr error_;

  std::mutex mu_;
  std::condition_variable cv_;  // work queued, or a bucket done
  std::deque<size_t> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tg::comm
