// ConvLayer: conv2d -> (bias | offset-only batch norm) -> optional ReLU, the convolution block of
// every net in nn/nets. Layout NCHW (N batch, C input channels, H W input size, K filters, R S
// filter size, P Q output size). Parameters registered through a ParamBuilder:
//   "<name>/w"     [K, C/groups, R, S]   init per ConvConfig::init, decayed per ConvConfig::decay
//   "<name>/b"     [K]                   only without BN: constant bias_init, never decayed
//   "<name>/beta"  [K]                   only with BN: the BN offset, init 0, never decayed
// and, with BN, the buffers "<name>/moving_mean" (init 0) and "<name>/moving_variance" (init 1).
// With BN the conv has no bias (as in TF-slim: the BN offset plays its role).
#pragma once

#include <cstdint>
#include <string>

#include "nn/core/tensor.h"
#include "nn/layers/param_builder.h"
#include "nn/ops/batchnorm.h"
#include "nn/ops/conv2d.h"

namespace tg {

struct ConvConfig {
  int64_t filters = 0;  // K
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride = 1;
  Padding padding = Padding::same;
  int64_t groups = 1;
  WeightInit init = WeightInit::truncated_normal(0.01f);
  bool decay = true;  // L2 weight decay applies to the kernel
  bool bias = true;   // ignored (no bias) when batch_norm is set
  float bias_init = 0.0f;
  bool batch_norm = false;  // offset-only BN (scale fixed at 1), moving stats buffers
  BatchNormOptions bn;      // decay 0.9997, eps 0.001 by default (TF-slim)
  bool relu = true;

  // This config with `filters` k x k filters at `stride` (the rest unchanged).
  ConvConfig shaped(int64_t k_filters, int64_t k, int64_t s = 1) const {
    ConvConfig c = *this;
    c.filters = k_filters;
    c.kernel_h = c.kernel_w = k;
    c.stride = s;
    return c;
  }
};

class ConvLayer {
 public:
  ConvLayer() = default;
  // Registers the layer's parameters and buffers. Throws on non-positive sizes or if groups does
  // not divide both in_channels and filters.
  ConvLayer(ParamBuilder& b, const std::string& name, int64_t in_channels, const ConvConfig& cfg);

  // x [N, C, H, W] f32 on the arena's device -> [N, K, P, Q]. `training` selects BN batch
  // statistics (and updates the moving ones) versus the moving statistics. Records on the tape.
  Tensor forward(const Tensor& x, bool training) const;

  // Output spatial size for an input of size `in` along one dimension.
  int64_t out_size(int64_t in) const;
  int64_t out_channels() const { return cfg_.filters; }
  const std::string& name() const { return name_; }

 private:
  const ParamArena* arena_ = nullptr;
  std::string name_;
  ConvConfig cfg_;
  Conv2dOptions opt_;
  size_t w_ = 0, b_ = 0, beta_ = 0;  // arena indices (b_ / beta_ only when present)
  Tensor moving_mean_, moving_var_;
};

}  // namespace tg
