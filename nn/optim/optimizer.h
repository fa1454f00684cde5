// Optimizers with TensorFlow semantics (the reference code's), working on the flat parameter and
// gradient buffers of a ParamArena (one fused kernel per step, CPU and CUDA):
//   sgd:      w <- w - lr * g
//   momentum: a <- m * a + g;  w <- w - lr * a          (TF MomentumOptimizer, not Nesterov)
//   adam:     t <- t + 1; m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) g^2;
//             lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t);  w <- w - lr_t * m / (sqrt(v) + eps)
// Weight decay is not the optimizer's business: the trainer adds wd * w to the gradient of the
// decayed tensors before the step (as the reference code's loss term wd * ||w||^2 / 2 does), so
// that what TernGrad later ternarizes and clips includes it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/core/tensor.h"

namespace tg {

struct OptimizerOptions {
  std::string name = "momentum";                      // "sgd", "momentum", "adam"
  double momentum = 0.9;                              // momentum only
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;  // adam only (TF defaults)
  bool operator==(const OptimizerOptions&) const = default;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // params, grads: contiguous flat f32 on the same device, same numel (the arena's buffers).
  // Slots are created lazily on the first step, on the params' device.
  virtual void step(Tensor& params, const Tensor& grads, double lr) = 0;
  // Named state for checkpoints, a snapshot (copies on the slots' device):
  //   sgd:      nothing
  //   momentum: "momentum/accum" [n] f32
  //   adam:     "adam/m" [n] f32, "adam/v" [n] f32, "adam/step" [1] i64 on the host (steps taken)
  // Before the first step there are no slots and the state is empty.
  // load_state: an empty list resets to a fresh optimizer; otherwise exactly those names, each
  // once, with those dtypes and shapes (and the live slots' size if any), else it throws naming
  // the entry and changes nothing. Restored slots keep their device until the next step()
  // moves them to the parameters' device (once); step() throws if their size is not the
  // parameters'.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  virtual void load_state(const std::vector<std::pair<std::string, Tensor>>& state) = 0;
  virtual std::string name() const = 0;
};

// Throws on an unknown name (listing the known ones) or out-of-range hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options);
// The names make_optimizer knows (the config's train.optimizer).
std::vector<std::string> optimizer_names();

}  // namespace tg
