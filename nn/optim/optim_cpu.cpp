// Fused optimizer and EMA updates on the CPU (optim_kernels.h): one pass over n contiguous
// elements, OpenMP across cores for large n, a plain loop the compiler vectorizes (std::fma is
// one vfmadd with -mfma). Every multiply-add is an explicit std::fma and nothing else can be
// contracted, so the results match optim_cuda.cu bit for bit.
//
// Napkin math: Adam reads g, m, v, w and writes m, v, w: 28 bytes per element, so a 60M-element
// arena moves ~1.7 GB per step; the loops are memory-bound.
#include <cmath>

#include "nn/optim/optim_kernels.h"

namespace tg {

namespace {
// Below this many elements one thread is faster than waking the team.
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

void sgd_update_cpu(int64_t n, float lr, const float* g, float* w) {
  const float neg_lr = -lr;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) w[i] = std::fma(neg_lr, g[i], w[i]);
}

void momentum_update_cpu(int64_t n, float lr, float momentum, const float* g, float* a, float* w) {
  const float neg_lr = -lr;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float ai = std::fma(a[i], momentum, g[i]);
    a[i] = ai;
    w[i] = std::fma(neg_lr, ai, w[i]);
  }
}

void adam_update_cpu(int64_t n, const AdamScalars& s, const float* g, float* m, float* v,
                     float* w) {
  const float lr_t = s.lr_t, omb1 = s.one_minus_beta1, omb2 = s.one_minus_beta2, eps = s.epsilon;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = std::fma(gi - m[i], omb1, m[i]);
    const float vi = std::fma(std::fma(gi, gi, -v[i]), omb2, v[i]);
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] - (mi * lr_t) / (std::sqrt(vi) + eps);
  }
}

void ema_update_cpu(int64_t n, float one_minus_decay, const float* params, float* shadow) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    shadow[i] = std::fma(params[i] - shadow[i], one_minus_decay, shadow[i]);
  }
}

}  // namespace tg
