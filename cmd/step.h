// One training iteration on already-loaded batches (digest §1.10), shared by `terngrad train`
// and bench_train so the benchmark times exactly what training runs:
//   for each emulated worker w: forward + backward on its slice (the mean loss of its own
//   samples), grad_w += weight_decay * w for every decayed tensor (the loss term
//   wd * ||w||^2 / 2, so compression sees it), grad_w kept aside;
//   aggregate the workers' gradients through the compressor (terngrad/compressor.h: shared
//   scalers, encode, exact accumulate, average) into the arena's gradient buffer;
//   optimizer step on the flat arena; EMA update.
// One worker without compression skips the copy and the compressor (the same numbers).
// Batch norm: each worker's forward normalizes with its own slice's batch statistics; the moving
// averages are updated by the workers in order 0..N-1 (one shared copy).
#pragma once

#include <cstdint>
#include <vector>

#include "nn/core/tensor.h"
#include "nn/nets/net.h"
#include "nn/optim/ema.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"

namespace tg::cli {

// One worker's slice of a global batch, on the host: images [B, C, H, W] f32, labels [B] i32.
struct HostBatch {
  Tensor x, y;
};

// Wall-clock seconds per phase of one step (device synchronized between phases).
struct StepTimes {
  double transfer_s = 0, forward_s = 0, backward_s = 0, compress_s = 0, update_s = 0;
  double total() const { return transfer_s + forward_s + backward_s + compress_s + update_s; }
};

class TrainStep {
 public:
  // compressor: null for one worker without compression.
  TrainStep(Net& net, Optimizer& optimizer, Ema* ema, double weight_decay, uint64_t seed,
            tern::Compressor* compressor = nullptr);

  // Runs iteration `step` with learning rate `lr` on one batch per worker; adds the mean loss
  // over workers to `loss_sum` (a scalar f32 on the net's device; no host sync). With `times`,
  // synchronizes the device between phases and records their durations.
  void run(const std::vector<HostBatch>& batches, int64_t step, double lr, Tensor& loss_sum,
           StepTimes* times = nullptr);

 private:
  Net& net_;
  Optimizer& optimizer_;
  Ema* ema_;
  double weight_decay_;
  uint64_t seed_;
  tern::Compressor* compressor_;
  std::vector<Tensor> worker_grads_;  // one flat gradient per worker (compressed path)
};

}  // namespace tg::cli
