// DenseLayer: fully connected y = x * w + b with an optional ReLU. Weights in TensorFlow layout
// [in, out]. Parameters registered through a ParamBuilder:
//   "<name>/w"  [in, out]   init per DenseConfig::init, decayed per DenseConfig::decay
//   "<name>/b"  [out]       constant bias_init, never decayed (omitted when bias is false)
#pragma once

#include <cstdint>
#include <string>

#include "nn/core/tensor.h"
#include "nn/layers/param_builder.h"

namespace tg {

struct DenseConfig {
  int64_t units = 0;  // out
  WeightInit init = WeightInit::truncated_normal(0.01f);
  bool decay = true;
  bool bias = true;
  float bias_init = 0.0f;
  bool relu = true;
};

class DenseLayer {
 public:
  DenseLayer() = default;
  // Throws on non-positive sizes.
  DenseLayer(ParamBuilder& b, const std::string& name, int64_t in_features, const DenseConfig& cfg);

  // x [N, in] f32 on the arena's device -> [N, out]. Records on the tape.
  Tensor forward(const Tensor& x) const;

  int64_t in_features() const { return in_; }
  int64_t units() const { return cfg_.units; }
  const std::string& name() const { return name_; }

 private:
  const ParamArena* arena_ = nullptr;
  std::string name_;
  DenseConfig cfg_;
  int64_t in_ = 0;
  size_t w_ = 0, b_ = 0;
};

}  // namespace tg
