// Raw kernels of lrn.h. All buffers are contiguous [N, C, HW] (HW = H*W), f32.
#pragma once

#include <cstdint>

namespace tg {

// Shape and parameters of one LRN call (see lrn.h for the formulas).
struct LrnShape {
  int64_t n = 0, c = 0, hw = 0;
  int64_t radius = 0;  // depth_radius r: the window is [c - r, c + r] clipped to [0, C)
  float bias = 1.0f, alpha = 1.0f, beta = 0.5f;
};

// y = x * norm^(-beta); also writes norm (saved for backward).
void lrn_forward_cpu(const LrnShape& s, const float* x, float* y, float* norm);
void lrn_forward_cuda(const LrnShape& s, const float* x, float* y, float* norm);

// dx from dy and the saved forward tensors x, y, norm (y / norm = x * norm^(-beta-1)).
void lrn_backward_cpu(const LrnShape& s, const float* x, const float* y, const float* norm,
                      const float* dy, float* dx);
void lrn_backward_cuda(const LrnShape& s, const float* x, const float* y, const float* norm,
                       const float* dy, float* dx);

}  // namespace tg
