// Square pooling windows as the nets use them (TF-slim max_pool2d / avg_pool2d with one kernel
// size and one stride for both spatial dimensions), plus the output-size rule the nets need to
// size their classifiers. Layout NCHW; see nn/ops/pool2d.h for the exact semantics.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"
#include "nn/ops/padding.h"

namespace tg {

struct PoolSpec {
  int64_t kernel = 0;
  int64_t stride = 0;
  Padding padding = Padding::valid;

  // Output size along one spatial dimension of size `in`. Throws if the window does not fit
  // (VALID) or kernel / stride are not positive.
  int64_t out_size(int64_t in) const;
};

// x [N, C, H, W] f32 -> [N, C, P, Q]. Differentiable; throws as max_pool2d / avg_pool2d do.
Tensor max_pool(const Tensor& x, const PoolSpec& p);
Tensor avg_pool(const Tensor& x, const PoolSpec& p);

}  // namespace tg
