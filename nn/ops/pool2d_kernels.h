// Raw kernels of pool2d.h. x is contiguous [N, C, H, W], y/argmax/dy contiguous [N, C, P, Q].
// Output cell (p, q) covers input rows [p*sh - pad_top, p*sh - pad_top + kh) and columns
// [q*sw - pad_left, q*sw - pad_left + kw), clipped to the image.
#pragma once

#include <cstdint>

namespace tg {

struct Pool2dShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input N, C, H, W
  int64_t p = 0, q = 0;                // output P, Q
  int64_t kh = 0, kw = 0, sh = 0, sw = 0;
  int64_t pad_top = 0, pad_left = 0;
};

// y = max over the window; argmax = index (ih * W + iw) of the first maximum in row-major window
// order inside the H x W plane (-1, y = 0 for a window with no cell inside the image).
void max_pool2d_forward_cpu(const Pool2dShape& s, const float* x, float* y, int32_t* argmax);
void max_pool2d_forward_cuda(const Pool2dShape& s, const float* x, float* y, int32_t* argmax);

// dx (all N*C*H*W elements written) = sum of dy over the outputs whose argmax is that cell,
// added in row-major output order starting from 0 (CPU and CUDA give identical bits).
void max_pool2d_backward_cpu(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                             float* dx);
void max_pool2d_backward_cuda(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                              float* dx);

// y = (sum of the window cells inside the image) / (their count).
void avg_pool2d_forward_cpu(const Pool2dShape& s, const float* x, float* y);
void avg_pool2d_forward_cuda(const Pool2dShape& s, const float* x, float* y);

// dx[cell] = sum over the outputs covering the cell of dy / count, in row-major output order.
void avg_pool2d_backward_cpu(const Pool2dShape& s, const float* dy, float* dx);
void avg_pool2d_backward_cuda(const Pool2dShape& s, const float* dy, float* dx);

}  // namespace tg
