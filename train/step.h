// One training iteration on already-loaded batches, shared by `terngrad train` and bench_train
// so the benchmark times exactly what training runs:
//   for each local worker w: forward + backward on its slice (the mean loss of its own samples),
//   grad_w += weight_decay * w for every decayed tensor (the loss term wd * ||w||^2 / 2, so
//   compression sees it);
//   the workers' gradients reduced by comm/reducer.h's Reducer: buckets of slots, each handed to
//   the compressor's hook (terngrad/exchange/comm_hook.h, terngrad/exchange/aggregate.h: shared
//   scalers, encode, exact accumulate, average) over the communicator, into a buffer of averaged
//   gradients; optimizer step on the flat arena; EMA update.
// One worker without compression skips the compressor (the same numbers). The last local
// worker's gradient is the arena's own buffer, the earlier workers' their own buffers: backward
// writes each in place (ParamArena::bind_grads, zero_grad_lazily), with no memset or copy.
// One process: the workers are emulated and reduced over the group of one
// (comm::make_self_communicator), bucket by bucket after the last backward pass. Distributed
// (StepComm): this process hosts workers first .. first + W - 1 of N in all; each bucket is
// aggregated with every other rank's by the same code, bit-identical to the one-process
// aggregation of all N, so every rank applies the same update. With comm.overlap and a
// communicator on the net's device (gloo or local on the CPU, nccl on the GPU), a bucket's
// exchange starts, on the reducer's thread (on the GPU: its side stream), as soon as the last
// worker's backward pass has finished its slots (autograd's leaf-ready callback), so the
// exchange of the last layers overlaps the backward pass of the first ones.
// Batch norm: each worker's forward normalizes with its own slice's batch statistics; the moving
// averages are updated by the workers in order 0..N-1 (one shared copy).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "comm/reducer.h"
#include "datasets/pipeline.h"
#include "nn/autograd/tape.h"
#include "nn/core/tensor.h"
#include "nn/nets/net.h"
#include "nn/optim/ema.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"
#include "terngrad/exchange/comm_hook.h"

namespace tg::train {

// One worker's slice of a global batch, on the host: images [B, C, H, W] f32, labels [B] i32.
using data::HostBatch;  // datasets/pipeline.h

// Wall-clock seconds of one step (device synchronized between phases). The phases on the step's
// own thread: transfer, forward, backward, reduce_wait (after backward, waiting for the gradient
// reduction: all of it in one process, what the overlap did not hide in a group), update. The
// reduction's work, wherever it ran: compress_s (the compressor's scalers, encode, decode,
// averaging) and comm_s (the collectives; 0 in one process).
struct StepTimes {
  double transfer_s = 0, forward_s = 0, backward_s = 0, reduce_wait_s = 0, update_s = 0;
  double compress_s = 0, comm_s = 0;
  double total() const { return transfer_s + forward_s + backward_s + reduce_wait_s + update_s; }
};

// The data-parallel group a step runs in (absent: all workers are emulated in this process).
struct StepComm {
  comm::Communicator* comm = nullptr;
  int first_worker = 0;   // global index of this process's first worker
  int total_workers = 1;  // N, over all processes
};

class PhaseTimer;

class TrainStep {
 public:
  // compressor: null for one worker without compression.
  // group: null for one process; else the compressor must be set.
  // reducer, exchange: buckets and overlap (comm.bucket_mb, comm.overlap; one process never
  // overlaps) and how buckets travel (comm.algorithm).
  TrainStep(Net& net, Optimizer& optimizer, Ema* ema, double weight_decay, uint64_t seed,
            tern::Compressor* compressor = nullptr, const StepComm* group = nullptr,
            const comm::ReducerOptions& reducer = {}, const tern::AggregateOptions& exchange = {});
  ~TrainStep();

  // Runs iteration `step` with learning rate `lr` on one batch per local worker; adds each local
  // worker's loss / N to `loss_sum` (a scalar f32 on the net's device; no host sync), so the
  // sum over processes is the mean loss over all N workers. With `times`, synchronizes the
  // device between phases and records their durations.
  void run(const std::vector<HostBatch>& batches, int64_t step, double lr, Tensor& loss_sum,
           StepTimes* times = nullptr);

  // Called for each local worker after its backward pass (weight decay included), before any
  // compression: (step, global worker index, its flat f32 gradient on the net's device). For
  // measurements (measure-bounds, convergence-check); the gradient must not be modified.
  using GradientHook = std::function<void(int64_t step, int worker, const Tensor& grad)>;
  void set_gradient_hook(GradientHook hook) { gradient_hook_ = std::move(hook); }

  // The last step's reduction: the reducer's times, and what each bucket did (routes, wire
  // bytes, times; terngrad/exchange/comm_hook.h puts them in words). Empty without a compressor.
  const comm::ReduceStats& last_reduce() const { return last_reduce_; }
  std::span<const tern::AggregateStats> last_buckets() const;
  // The reducer's buckets (empty without a compressor) and whether they overlap backward.
  std::vector<tern::SlotRange> buckets() const;
  bool overlapped() const { return overlap_backward_; }

 private:
  std::vector<Tensor> local_gradients(int workers);
  void forward_backward(const HostBatch& batch, int64_t step, int w,
                        const std::vector<Tensor>& local, Tensor& loss_sum, PhaseTimer& timer);
  void backward_overlapped(const Tensor& loss, int64_t step, const std::vector<Tensor>& local);
  void decay(size_t entry);
  void reduce(int64_t step, const std::vector<Tensor>& local, PhaseTimer& timer);

  Net& net_;
  Optimizer& optimizer_;
  Ema* ema_;
  double weight_decay_;
  uint64_t seed_;
  tern::Compressor* compressor_;

  std::optional<StepComm> group_;
  GradientHook gradient_hook_;
  std::unique_ptr<comm::Communicator> self_;  // one process: the group of one
  std::unique_ptr<tern::CompressionHook> comm_hook_;
  std::unique_ptr<comm::Reducer> reducer_;
  bool staged_ = false;            // gloo with a GPU net: gradients staged through the host
  bool overlap_backward_ = false;  // buckets exchanged while the last worker's backward runs
  std::unordered_map<const AutogradMeta*, size_t> slot_of_leaf_;  // arena entry of a param
  std::vector<Tensor> worker_grads_;  // the local workers' gradients but the last (arena) one
  Tensor reduced_;                    // the averaged gradient the optimizer applies
  comm::ReduceStats last_reduce_;
};

}  // namespace tg::train
