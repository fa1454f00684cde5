// Raw fused update kernels of the optimizers (optimizer.h) and the parameter EMA (ema.h).
// Every buffer is contiguous f32 of n elements; element i is updated independently, so a
// kernel may split the range among threads in any way. Scalars arrive already rounded to f32
// (the frontends compute them in double on the host).
//
// The CPU and CUDA versions evaluate the same f32 operations with the same explicit fused
// multiply-adds (fmaf), correctly rounded division and square root, so their results are
// bit-identical: no compiler FMA contraction can make them drift.
#pragma once

#include <cstdint>

namespace tg {

// w <- w - lr * g                                          (TF GradientDescent)
void sgd_update_cpu(int64_t n, float lr, const float* g, float* w);
void sgd_update_cuda(int64_t n, float lr, const float* g, float* w);

// a <- a * momentum + g;  w <- w - lr * a                   (TF Momentum, use_nesterov=False)
void momentum_update_cpu(int64_t n, float lr, float momentum, const float* g, float* a, float* w);
void momentum_update_cuda(int64_t n, float lr, float momentum, const float* g, float* a, float* w);

// The per-step scalars of Adam; lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t).
struct AdamScalars {
  float lr_t = 0.0f;
  float one_minus_beta1 = 0.1f;
  float one_minus_beta2 = 0.001f;
  float epsilon = 1e-8f;
};

// TF ApplyAdam (use_nesterov=False), in TF's own form:
//   m <- m + (g - m) * (1 - beta1);  v <- v + (g^2 - v) * (1 - beta2);
//   w <- w - (m * lr_t) / (sqrt(v) + epsilon)
void adam_update_cpu(int64_t n, const AdamScalars& s, const float* g, float* m, float* v, float* w);
void adam_update_cuda(int64_t n, const AdamScalars& s, const float* g, float* m, float* v,
                      float* w);

// TF assign_moving_average: shadow <- shadow - (shadow - params) * (1 - decay),
// evaluated as shadow + (params - shadow) * (1 - decay) in one fma (the same value).
void ema_update_cpu(int64_t n, float one_minus_decay, const float* params, float* shadow);
void ema_update_cuda(int64_t n, float one_minus_decay, const float* params, float* shadow);

}  // namespace tg
