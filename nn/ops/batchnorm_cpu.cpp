// Batch normalization on the CPU; batchnorm_cuda.cu mirrors it.
//
// Layout: contiguous [N, C, HW]; channel c of image n is the run x[(n*C + c)*HW .. +HW).
// Per-channel reductions (stats, backward sums) are parallel over channels, each walking its N
// runs in order and accumulating in double (mean first, then the centred squares: two passes, no
// E[x^2] - E[x]^2 cancellation). Elementwise passes (apply, dx) are parallel over the N*C runs.
#include <cmath>

#include "nn/ops/batchnorm_kernels.h"

namespace tg {

namespace {

inline float inv_std_of(float var, float eps) {
  return 1.0f / std::sqrt(var + eps);
}

}  // namespace

void batch_norm_stats_cpu(const BatchNormShape& s, const float* x, float* mean, float* var) {
  const int64_t C = s.c, HW = s.hw;
  const double m = static_cast<double>(s.n * HW);
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0.0;
    for (int64_t b = 0; b < s.n; ++b) {
      const float* xc = x + (b * C + c) * HW;
      for (int64_t p = 0; p < HW; ++p) sum += xc[p];
    }
    const double mu = sum / m;
    double sq = 0.0;
    for (int64_t b = 0; b < s.n; ++b) {
      const float* xc = x + (b * C + c) * HW;
      for (int64_t p = 0; p < HW; ++p) {
        const double d = static_cast<double>(xc[p]) - mu;
        sq += d * d;
      }
    }
    mean[c] = static_cast<float>(mu);
    var[c] = static_cast<float>(sq / m);
  }
}

void batch_norm_update_moving_cpu(int64_t c, float decay, const float* mean, const float* var,
                                  float* moving_mean, float* moving_var) {
  const float k = 1.0f - decay;
  for (int64_t i = 0; i < c; ++i) {
    moving_mean[i] -= k * (moving_mean[i] - mean[i]);
    moving_var[i] -= k * (moving_var[i] - var[i]);
  }
}

void batch_norm_apply_cpu(const BatchNormShape& s, const float* x, const float* mean,
                          const float* var, const float* gamma, const float* beta, float eps,
                          float* y) {
  const int64_t C = s.c, HW = s.hw;
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t run = 0; run < s.n * C; ++run) {
    const int64_t c = run % C;
    // y = (x - mean) * scale + shift, scale = gamma * inv_std.
    const float scale = (gamma ? gamma[c] : 1.0f) * inv_std_of(var[c], eps);
    const float shift = beta ? beta[c] : 0.0f;
    const float mu = mean[c];
    const float* xr = x + run * HW;
    float* yr = y + run * HW;
    for (int64_t p = 0; p < HW; ++p) yr[p] = (xr[p] - mu) * scale + shift;
  }
}

void batch_norm_backward_reduce_cpu(const BatchNormShape& s, const float* x, const float* dy,
                                    const float* mean, const float* var, float eps, float* dgamma,
                                    float* dbeta) {
  const int64_t C = s.c, HW = s.hw;
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t c = 0; c < C; ++c) {
    const float mu = mean[c], is = inv_std_of(var[c], eps);
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t b = 0; b < s.n; ++b) {
      const float* xc = x + (b * C + c) * HW;
      const float* gc = dy + (b * C + c) * HW;
      for (int64_t p = 0; p < HW; ++p) {
        const float xhat = (xc[p] - mu) * is;
        sum_dy += gc[p];
        sum_dy_xhat += static_cast<double>(gc[p]) * xhat;
      }
    }
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy);
  }
}

void batch_norm_backward_dx_cpu(const BatchNormShape& s, bool training, const float* x,
                                const float* dy, const float* mean, const float* var,
                                const float* gamma, float eps, const float* dgamma,
                                const float* dbeta, float* dx) {
  const int64_t C = s.c, HW = s.hw;
  const float inv_m = 1.0f / static_cast<float>(s.n * HW);
#pragma omp parallel for schedule(static) if (s.n * C * HW > (1 << 16))
  for (int64_t run = 0; run < s.n * C; ++run) {
    const int64_t c = run % C;
    const float is = inv_std_of(var[c], eps);
    const float scale = (gamma ? gamma[c] : 1.0f) * is;
    const float* xr = x + run * HW;
    const float* gr = dy + run * HW;
    float* dr = dx + run * HW;
    if (training) {
      const float mu = mean[c];
      const float mean_dy = dbeta[c] * inv_m, mean_dy_xhat = dgamma[c] * inv_m;
      for (int64_t p = 0; p < HW; ++p) {
        const float xhat = (xr[p] - mu) * is;
        dr[p] = scale * (gr[p] - mean_dy - xhat * mean_dy_xhat);
      }
    } else {
      for (int64_t p = 0; p < HW; ++p) dr[p] = scale * gr[p];
    }
  }
}

}  // namespace tg
