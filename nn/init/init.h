// Initializers on top of Philox. They fill host (CPU) f32 tensors: ParamArena runs them on the
// host and copies the arena to the device once, so a model starts bit-identical on CPU and CUDA.
// Element i of a tensor depends only on (seed, stream, i), never on thread count or order.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"

namespace tg::init {

// Uniform on [lo, hi).
void uniform_(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream);
// Normal(mean, std) (Box-Muller in double precision).
void normal_(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream);
// TensorFlow's truncated normal: Normal(mean, std) re-drawn until |x - mean| <= 2 std.
void truncated_normal_(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream);
void constant_(Tensor& t, float value);

}  // namespace tg::init
