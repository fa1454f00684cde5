// Dropout on the CPU: one Philox block per 4 consecutive elements (elements 4b..4b+3 use the
// words of block b), exactly the assignment of dropout_cuda.cu, so masks are bit-identical.
#include <algorithm>

#include "nn/core/philox.h"
#include "nn/ops/dropout_kernels.h"

namespace tg {

void dropout_cpu(const DropoutParams& d, int64_t n, const float* x, float* y) {
  const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    const Philox4 r = philox_block(d.seed, d.stream, static_cast<uint64_t>(b));
    const int64_t end = std::min(4 * b + 4, n);
    for (int64_t i = 4 * b; i < end; ++i)
      y[i] = uniform01(r.v[i - 4 * b]) >= d.drop_ratio ? x[i] * d.scale : 0.0f;
  }
}

}  // namespace tg
