// DropoutLayer: inverted dropout (nn/ops/dropout.h) with the nets' stream keying. The mask of
// layer `layer_id` at (run seed, worker, step) comes from Philox stream
// rng_stream(RngPurpose::dropout, layer_id, worker, step) under key `seed`: repeatable and
// resumable, independent across workers, layers and steps, identical on CPU and CUDA.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"

namespace tg {

class DropoutLayer {
 public:
  DropoutLayer() = default;
  // ratio = fraction dropped. Throws unless 0 <= ratio < 1.
  DropoutLayer(uint64_t layer_id, float ratio);

  // Identity (the same handle) when !training or ratio == 0.
  Tensor forward(const Tensor& x, bool training, uint64_t seed, uint32_t worker,
                 uint64_t step) const;

  float ratio() const { return ratio_; }

 private:
  uint64_t layer_id_ = 0;
  float ratio_ = 0.0f;
};

}  // namespace tg
