// Net: one of the paper's networks (as its reference code builds them), its parameters in one
// ParamArena, its non-trainable state (batch-norm moving statistics) in named buffers, and a
// forward pass that records on the autograd tape.
//
// Shapes: images are NCHW f32 (N batch, C channels, H, W); logits [N, num_classes];
// labels i32 [N]. Nets are built by name through make_net() (nn/nets/registry.cpp holds the one
// name -> factory table).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/autograd/arena.h"
#include "nn/core/tensor.h"
#include "nn/layers/param_builder.h"

namespace tg {

// Options a config can change; every field has the paper's default for the chosen net when left
// at its "unset" value.
struct NetOptions {
  int64_t num_classes = 0;      // 0 = the net's default (10; 1001 for the ImageNet nets)
  double dropout_ratio = -1.0;  // fraction dropped; < 0 = the net's default (AlexNet 0.5, ...)
  uint64_t seed = 123;          // initial weights: Philox(seed, RngPurpose::init, tensor index)
  int64_t image_size = 0;       // input H = W; 0 = the net's default (28, 24, 224, ...)
  int64_t in_channels = 0;      // 0 = the net's default (1 for LeNet, 3 otherwise)
  // false: the parameters start at zero instead of their random initial values, for a caller
  // that overwrites every one of them (a checkpoint restore: --resume, eval); AlexNet's 61 M
  // truncated-normal draws are most of its start-up.
  bool initialize = true;
  bool operator==(const NetOptions&) const = default;
};

// Per-forward state: dropout masks are keyed by (seed, step, worker) so a run is repeatable and
// resumable; `training` selects batch statistics for BN and enables dropout.
struct ForwardContext {
  bool training = true;
  uint64_t seed = 123;
  uint64_t step = 0;
  uint32_t worker = 0;
};

struct NetInfo {
  std::string name;  // "lenet", ...
  int64_t in_channels = 0;
  int64_t image_size = 0;  // H = W
  int64_t num_classes = 0;
};

class Net {
 public:
  virtual ~Net() = default;
  const NetInfo& info() const { return info_; }

  // Trainable parameters. Entry names are "layer/w", "layer/b", "layer/beta" (BN offset), ...
  ParamArena& arena() { return arena_; }
  const ParamArena& arena() const { return arena_; }

  // For each arena entry (same order): true when the L2 weight decay of the recipe applies to
  // it (weights of the layers the reference code regularizes; never biases or BN offsets).
  const std::vector<bool>& decayed() const { return decayed_; }

  // Non-trainable state saved in checkpoints (BN moving mean / variance), name -> tensor on the
  // net's device. Empty for nets without BN.
  const std::vector<std::pair<std::string, Tensor>>& buffers() const { return buffers_; }

  // x [N, C, H, W] f32 on the net's device -> logits [N, num_classes]. Records on the tape
  // when grad mode is on. Throws if x's shape does not match info().
  virtual Tensor forward(const Tensor& x, const ForwardContext& ctx) = 0;

  Device device() const { return device_; }

 protected:
  // Throws unless x is a defined f32 [N, C, H, W] tensor (N >= 1) on device() whose C, H, W
  // match info(); the message names the net, the expected and the actual shape.
  void check_input(const Tensor& x) const;

  // Sets info_ and device_ and returns the builder that registers parameters (initial weights
  // keyed by `seed`) and buffers into this net.
  ParamBuilder start(const NetInfo& info, const Device& device, uint64_t seed) {
    info_ = info;
    device_ = device;
    return ParamBuilder(arena_, decayed_, buffers_, seed, device);
  }

  NetInfo info_;
  Device device_;
  ParamArena arena_;
  std::vector<bool> decayed_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
};

// Builds a net by name ("lenet", "cifarnet", "alexnet", "googlenet", "vgg_a") with parameters
// initialized and allocated on `device`. An unknown name throws, listing the known ones.
std::unique_ptr<Net> make_net(const std::string& name, const NetOptions& options,
                              const Device& device);
std::vector<std::string> net_names();

}  // namespace tg
