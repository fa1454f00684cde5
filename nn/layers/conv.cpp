#include "nn/layers/conv.h"
#include "nn/core/profile.h"

#include "nn/ops/padding.h"
#include "nn/ops/relu.h"

namespace tg {

ConvLayer::ConvLayer(ParamBuilder& b, const std::string& name, int64_t in_channels,
                     const ConvConfig& cfg)
    : arena_(&b.arena()), name_(name), cfg_(cfg) {
  TG_CHECK(in_channels > 0 && cfg.filters > 0 && cfg.kernel_h > 0 && cfg.kernel_w > 0 &&
               cfg.stride > 0 && cfg.groups > 0,
           "conv layer '", name, "': in_channels ", in_channels, ", filters ", cfg.filters,
           ", kernel ", cfg.kernel_h, "x", cfg.kernel_w, ", stride ", cfg.stride, ", groups ",
           cfg.groups, " must all be positive");
  TG_CHECK(in_channels % cfg.groups == 0 && cfg.filters % cfg.groups == 0, "conv layer '", name,
           "': groups ", cfg.groups, " must divide in_channels ", in_channels, " and filters ",
           cfg.filters);
  opt_.stride_h = opt_.stride_w = cfg.stride;
  opt_.padding = cfg.padding;
  opt_.groups = cfg.groups;
  const int64_t cg = in_channels / cfg.groups, rs = cfg.kernel_h * cfg.kernel_w;
  w_ = b.add_param(name + "/w", {cfg.filters, cg, cfg.kernel_h, cfg.kernel_w}, cfg.init, cfg.decay,
                   cg * rs, cfg.filters * rs);
  if (cfg.batch_norm) {
    beta_ = b.add_param(name + "/beta", {cfg.filters}, WeightInit::constant(0.0f), false);
    moving_mean_ = b.add_buffer(name + "/moving_mean", cfg.filters, 0.0f);
    moving_var_ = b.add_buffer(name + "/moving_variance", cfg.filters, 1.0f);
  } else if (cfg.bias) {
    b_ = b.add_param(name + "/b", {cfg.filters}, WeightInit::constant(cfg.bias_init), false);
  }
}

int64_t ConvLayer::out_size(int64_t in) const {
  return padded_dim(in, cfg_.kernel_h, cfg_.stride, cfg_.padding).out;
}

Tensor ConvLayer::forward(const Tensor& x, bool training) const {
  profile::LayerScope scope(name_.c_str());
  TG_CHECK(arena_ != nullptr, "conv layer used before construction");
  const bool bn = cfg_.batch_norm;
  const Tensor bias = (!bn && cfg_.bias) ? arena_->param(b_) : Tensor();
  Tensor y = conv2d(x, arena_->param(w_), bias, opt_);
  if (bn) {
    // The moving statistics are handles on the net's buffers: updated in place when training.
    Tensor mean = moving_mean_, var = moving_var_;
    y = batch_norm(y, Tensor(), arena_->param(beta_), mean, var, training, cfg_.bn);
  }
  if (cfg_.relu) y = relu(y);
  return y;
}

}  // namespace tg
