#include "nn/layers/dense.h"
#include "nn/core/profile.h"

#include "nn/ops/linear.h"
#include "nn/ops/relu.h"

namespace tg {

DenseLayer::DenseLayer(ParamBuilder& b, const std::string& name, int64_t in_features,
                       const DenseConfig& cfg)
    : arena_(&b.arena()), name_(name), cfg_(cfg), in_(in_features) {
  TG_CHECK(in_features > 0 && cfg.units > 0, "dense layer '", name, "': in_features ", in_features,
           " and units ", cfg.units, " must be positive");
  w_ = b.add_param(name + "/w", {in_features, cfg.units}, cfg.init, cfg.decay, in_features,
                   cfg.units);
  if (cfg.bias)
    b_ = b.add_param(name + "/b", {cfg.units}, WeightInit::constant(cfg.bias_init), false);
}

Tensor DenseLayer::forward(const Tensor& x) const {
  profile::LayerScope scope(name_.c_str());
  TG_CHECK(arena_ != nullptr, "dense layer used before construction");
  Tensor y = linear(x, arena_->param(w_), cfg_.bias ? arena_->param(b_) : Tensor());
  if (cfg_.relu) y = relu(y);
  return y;
}

}  // namespace tg
