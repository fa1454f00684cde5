// Raw kernel of dropout.h over n contiguous f32 elements. Forward and backward are the same
// operation (the backward applies the regenerated mask to dy).
#pragma once

#include <cstdint>

namespace tg {

struct DropoutParams {
  float drop_ratio = 0.0f;  // element i is kept iff uniform01(philox_word(seed, stream, i)) >= this
  float scale = 1.0f;       // 1 / (1 - drop_ratio), computed once by the frontend
  uint64_t seed = 0;
  uint64_t stream = 0;
};

// y[i] = kept(i) ? x[i] * scale : 0
void dropout_cpu(const DropoutParams& d, int64_t n, const float* x, float* y);
void dropout_cuda(const DropoutParams& d, int64_t n, const float* x, float* y);

}  // namespace tg
