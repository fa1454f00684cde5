// The gradient reducer of data-parallel training: the slots of the layout grouped into buckets
// (comm/buckets.h), each bucket handed to a communication hook as soon as its last gradient is
// final, so that communication overlaps the rest of the backward pass (the design of PyTorch
// DDP's Reducer and Horovod's tensor fusion). The reducer moves no bytes itself and knows
// nothing of what a gradient is compressed to: the hook (CommHook below;
// terngrad/exchange/comm_hook.h for the compressors) reduces a bucket over the communicator, as
// PyTorch's comm hooks are handed a GradBucket.
//
// One step: begin(step, local gradients, out); mark_ready(t) for every slot t of the LAST local
// worker's gradient once backward has finished it (earlier local workers' gradients must be
// complete at begin); finish(). Bucket b goes to the hook when its slots are all ready and every
// bucket before it has gone: the hook runs the buckets in bucket order on every rank, whatever
// order backward finishes the slots in. With ReducerOptions::overlap the hook runs on the
// reducer's communication thread while backward goes on; otherwise finish() runs it for every
// bucket in order. finish() marks the slots still pending ready (parameters backward never
// reached keep a zero gradient), waits for every bucket, and rethrows the first error of any
// hook call (the communicator is then broken and the run must stop).
//
// Threads: only the communication thread touches the communicator between begin() and finish();
// the hook reads the slots of its bucket only (disjoint from what backward writes); its OpenMP
// thread count is the creating thread's.
//
// GPU (a communicator on a CUDA device, NCCL): the communication thread works on the device's
// side stream (cuda::SideStreamScope), so that the hook's kernels and collectives run beside the
// backward kernels on the main stream, and the communicator waits for NCCL by polling
// (comm/nccl_comm.h), never blocking the main thread. Streams are ordered by events only:
// launching bucket b records an event on the main stream after the kernels that produced its
// gradients (and everything before them, such as the last step's optimizer reading `out`), and
// the side stream waits for it; after each bucket the side stream records an event that
// finish() makes the main stream wait for, so the optimizer and the next step's zeroing of the
// gradients come after every exchange. The caching allocator keeps the side stream's blocks
// apart from the main stream's (nn/core/allocator.h); the buffers both streams touch
// (local_grads, out) are the caller's and stay alive past finish().
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

#include "comm/buckets.h"
#include "comm/communicator.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"

namespace tg::comm {

// The config's comm.bucket_mb and comm.overlap.
struct ReducerOptions {
  double bucket_mb = 25.0;  // f32 MB per bucket (PyTorch DDP's bucket_cap_mb and default)
  bool overlap = true;      // hand buckets to the hook while backward runs
  // DDP's first bucket (not a config key): the first exchange starts early.
  int64_t first_bucket_bytes = int64_t{1} << 20;
  bool operator==(const ReducerOptions&) const = default;

  int64_t bucket_bytes() const;  // bucket_mb in bytes, at least 1
};

// What a hook is handed: one bucket of one step.
struct GradBucket {
  int64_t step = 0;
  size_t index = 0;  // in launch order, 0 .. count - 1
  size_t count = 0;  // buckets of the step
  SlotRange slots;   // the bucket's slots of the layout
  // This rank's W local workers' flat f32 gradients (the whole layout) and the f32 [total]
  // buffer that receives the average, both on the communicator's device.
  std::span<const Tensor> local_grads;
  Tensor out;
};

// Reduces one bucket over a communicator (PyTorch's DDP communication hook): afterwards `out` at
// the bucket's slots holds the average over all workers of all ranks, the same bits on every
// rank. Called for every bucket of every step, in bucket order, on every rank, one call at a
// time (on the reducer's communication thread when it overlaps). It must read only the bucket's
// slots of the gradients and write only the bucket's slots of `out`; whatever it records of a
// call (bytes, routes, times) it keeps itself, for its owner to read after Reducer::finish().
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual void run(Communicator& comm, const GradBucket& bucket) = 0;
};

// What one step's reduction took.
struct ReduceStats {
  int64_t buckets = 0;
  double busy_s = 0;  // seconds the hook ran (on the communication thread, when overlapped)
  double wait_s = 0;  // seconds finish() waited: the part of the reduction backward did not hide
};

class Reducer {
 public:
  // The buckets of `layout` by `options`; comm and hook are not owned and must outlive the
  // reducer.
  Reducer(const std::vector<GradSlot>& layout, Communicator& comm, CommHook& hook,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  const std::vector<SlotRange>& buckets() const { return buckets_; }
  bool overlapped() const { return thread_.joinable(); }

  // Starts a step: local_grads are this rank's W flat f32 [total] gradients (the last one may
  // still be filled by backward, slot by slot); out (f32 [total]) receives the average. Both on
  // the communicator's device, alive until finish().
  void begin(int64_t step, std::span<const Tensor> local_grads, Tensor out);
  // Slot t of the last local worker's gradient is final.
  void mark_ready(size_t slot);
  // Waits for every bucket of the step (see above).
  ReduceStats finish();

 private:
  void launch_ready_buckets();   // with mu_ held: queues the launchable buckets in order
  void exchange(size_t bucket);  // one bucket through the hook
  void thread_main(int omp_threads);

  Communicator& comm_;
  CommHook& hook_;
  size_t slots_ = 0;
  std::vector<SlotRange> buckets_;
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
  double busy_s_ = 0;
  std::exception_ptr error_;

  std::mutex mu_;
  std::condition_variable cv_;  // work queued, or a bucket done
  std::deque<size_t> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tg::comm
