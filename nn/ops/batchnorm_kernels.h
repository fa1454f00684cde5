// Raw kernels of batchnorm.h. x, y, dy, dx are contiguous [N, C, HW] f32 (HW = H*W, 1 for a
// [N, C] input); per-channel vectors are contiguous [C] f32. A null gamma means scale 1, a null
// beta offset 0. inv_std[c] = 1 / sqrt(var[c] + eps), computed in f32 the same way everywhere.
#pragma once

#include <cstdint>

namespace tg {

struct BatchNormShape {
  int64_t n = 0, c = 0, hw = 0;
};

// Batch statistics: mean[c] and population var[c] over the N*HW elements of channel c
// (two passes, accumulated in double).
void batch_norm_stats_cpu(const BatchNormShape& s, const float* x, float* mean, float* var);
void batch_norm_stats_cuda(const BatchNormShape& s, const float* x, float* mean, float* var);

// In place: moving -= (1 - decay) * (moving - batch), for mean and var, c elements each.
void batch_norm_update_moving_cpu(int64_t c, float decay, const float* mean, const float* var,
                                  float* moving_mean, float* moving_var);
void batch_norm_update_moving_cuda(int64_t c, float decay, const float* mean, const float* var,
                                   float* moving_mean, float* moving_var);

// y = gamma * (x - mean) * inv_std + beta.
void batch_norm_apply_cpu(const BatchNormShape& s, const float* x, const float* mean,
                          const float* var, const float* gamma, const float* beta, float eps,
                          float* y);
void batch_norm_apply_cuda(const BatchNormShape& s, const float* x, const float* mean,
                           const float* var, const float* gamma, const float* beta, float eps,
                           float* y);

// Per-channel sums of the backward: dbeta[c] = sum(dy), dgamma[c] = sum(dy * x_hat) with
// x_hat = (x - mean) * inv_std (accumulated in double).
void batch_norm_backward_reduce_cpu(const BatchNormShape& s, const float* x, const float* dy,
                                    const float* mean, const float* var, float eps, float* dgamma,
                                    float* dbeta);
void batch_norm_backward_reduce_cuda(const BatchNormShape& s, const float* x, const float* dy,
                                     const float* mean, const float* var, float eps, float* dgamma,
                                     float* dbeta);

// dx. training: gamma * inv_std * (dy - dbeta / M - x_hat * dgamma / M), with the sums of
// batch_norm_backward_reduce (M = N*HW); inference: gamma * inv_std * dy (sums unused, may be
// null).
void batch_norm_backward_dx_cpu(const BatchNormShape& s, bool training, const float* x,
                                const float* dy, const float* mean, const float* var,
                                const float* gamma, float eps, const float* dgamma,
                                const float* dbeta, float* dx);
void batch_norm_backward_dx_cuda(const BatchNormShape& s, bool training, const float* x,
                                 const float* dy, const float* mean, const float* var,
                                 const float* gamma, float eps, const float* dgamma,
                                 const float* dbeta, float* dx);

}  // namespace tg
