// Inverted dropout with TensorFlow keep_prob semantics, differentiable, CPU and CUDA.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"

namespace tg {

// x: f32 of any shape on any device. In training, element i (row-major) is kept iff
//   uniform01(philox_word(seed, stream, i)) >= drop_ratio
// and kept values are scaled by 1 / (1 - drop_ratio); the others become 0. The mask depends only
// on (seed, stream, i), so CPU and CUDA produce the same mask bit for bit; pick `stream` with
// rng_stream(RngPurpose::dropout, layer, worker, step). Backward regenerates the same mask:
// dx = mask * dy / (1 - drop_ratio).
// Returns x itself (same handle) when !training or drop_ratio == 0.
// Throws unless 0 <= drop_ratio < 1, or on an undefined/non-f32 input.
Tensor dropout(const Tensor& x, float drop_ratio, bool training, uint64_t seed, uint64_t stream);

}  // namespace tg
