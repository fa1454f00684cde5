// One training iteration on already-loaded batches (digest §1.10), shared by `terngrad train`
// and bench_train so the benchmark times exactly what training runs:
//   for each emulated worker w: forward + backward on its slice (the mean loss of its own
//   samples), grad_w += weight_decay * w for every decayed tensor (the loss term
//   wd * ||w||^2 / 2, so compression sees it), grad_w kept aside;
//   aggregate the workers' gradients through the compressor (terngrad/compressor.h: shared
//   scalers, encode, exact accumulate, average) into the arena's gradient buffer;
//   optimizer step on the flat arena; EMA update.
// One worker without compression skips the copy and the compressor (the same numbers).
// Distributed (StepComm): this process hosts workers first .. first + W - 1 of N in all; their
// gradients are aggregated with every other rank's through comm/aggregate.h, which is
// bit-identical to the one-process aggregation of all N, so every rank applies the same update.
// Batch norm: each worker's forward normalizes with its own slice's batch statistics; the moving
// averages are updated by the workers in order 0..N-1 (one shared copy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "comm/aggregate.h"
#include "nn/core/tensor.h"
#include "nn/nets/net.h"
#include "nn/optim/ema.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"

namespace tg::train {

// One worker's slice of a global batch, on the host: images [B, C, H, W] f32, labels [B] i32.
struct HostBatch {
  Tensor x, y;
};

// Wall-clock seconds per phase of one step (device synchronized between phases). compress_s is
// the compressor's own work (scalers, encode, decode, averaging); comm_s the collectives of a
// distributed step (0 in one process); comm_exposed_s the part of comm_s the step waited for
// (what overlapping with backward did not hide; not part of total(), which counts comm_s).
struct StepTimes {
  double transfer_s = 0, forward_s = 0, backward_s = 0, compress_s = 0, comm_s = 0, update_s = 0;
  double comm_exposed_s = 0;
  double total() const {
    return transfer_s + forward_s + backward_s + compress_s + comm_s + update_s;
  }
};

// The data-parallel group a step runs in (absent: all workers are emulated in this process).
struct StepComm {
  comm::Communicator* comm = nullptr;
  int first_worker = 0;   // global index of this process's first worker
  int total_workers = 1;  // N, over all processes
  comm::AggregateOptions options;
};

class TrainStep {
 public:
  // compressor: null for one worker without compression.
  // group: null for one process; else the compressor must be set.
  TrainStep(Net& net, Optimizer& optimizer, Ema* ema, double weight_decay, uint64_t seed,
            tern::Compressor* compressor = nullptr, const StepComm* group = nullptr);

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
  void set_gradient_hook(GradientHook hook) { hook_ = std::move(hook); }

  // The last distributed step's aggregation (wire bytes, routes); empty in one process.
  const comm::AggregateStats& last_aggregate() const { return last_aggregate_; }

 private:
  Net& net_;
  Optimizer& optimizer_;
  Ema* ema_;
  double weight_decay_;
  uint64_t seed_;
  tern::Compressor* compressor_;
  void aggregate_across(int64_t step);

  std::optional<StepComm> group_;
  GradientHook hook_;
  std::vector<Tensor> worker_grads_;  // one flat gradient per worker (compressed path)
  comm::AggregateStats last_aggregate_;
};

}  // namespace tg::train
