#include "nn/layers/dropout.h"

#include "nn/core/philox.h"
#include "nn/ops/dropout.h"

namespace tg {

DropoutLayer::DropoutLayer(uint64_t layer_id, float ratio) : layer_id_(layer_id), ratio_(ratio) {
  TG_CHECK(ratio >= 0.0f && ratio < 1.0f,
           "dropout ratio (fraction dropped) must be in [0, 1), got ", ratio);
}

Tensor DropoutLayer::forward(const Tensor& x, bool training, uint64_t seed, uint32_t worker,
                             uint64_t step) const {
  if (!training || ratio_ == 0.0f) return x;
  return dropout(x, ratio_, true, seed, rng_stream(RngPurpose::dropout, layer_id_, worker, step));
}

}  // namespace tg
