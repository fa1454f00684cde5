// Raw kernels of conv2d.h: 2-D convolution (cross-correlation, as in TensorFlow and cuDNN) as
// im2col + GEMM on a chunk of images at a time, CPU (OpenBLAS) and CUDA (cuBLAS).
//
// Letters: N batch, C input channels, H W input size, K output channels (filters), R S filter
// size, P Q output size, G groups (Cg = C/G input and Kg = K/G output channels per group).
// Layouts (all dense, row-major):  x [N, C, H, W]   w [K, Cg, R, S]   bias [K]   y [N, K, P, Q]
//
//   y[n,k,p,q] = bias[k] + sum_{c<Cg, r<R, s<S} w[k,c,r,s] * x[n, g*Cg + c, p*sh - pt + r, q*sw -
//   pl + s] with g = k / Kg and x read as 0 outside [0,H) x [0,W) (the padding).
//
// Chunking: nb = conv2d_chunk_images(s) images at a time. The workspace holds
//   col   [Cg*R*S, nb*P*Q]  the im2col matrix of one group of the chunk
//   stage [K,      nb*P*Q]  the chunk's output (or output gradient) in GEMM order
// so each GEMM has nb*P*Q columns (large even for small images).
#pragma once

#include <cstdint>

namespace tg {

struct Conv2dShape {
  int64_t N, C, H, W, K, R, S, P, Q, stride_h, stride_w, pad_top, pad_left, groups;
};

// Images per chunk: as many as fit ~8 MB of col + stage (cache-sized), raised so a GEMM has at
// least 4096 columns, capped at 64 MB; always in [1, N]. Both backends use the same chunks.
int64_t conv2d_chunk_images(const Conv2dShape& s);
// Floats of scratch the kernels need (col + stage of one chunk); callers allocate it on the
// kernel's device. Both backends use the same amount.
int64_t conv2d_workspace_floats(const Conv2dShape& s);
// Test hook: caps the workspace budget (in floats) so that small shapes run in several chunks;
// 0 restores the default. Not thread-safe with concurrent convolutions; tests only.
void conv2d_set_workspace_budget_for_testing(int64_t floats);

// y = conv(x, w) + bias (bias nullable). Overwrites y.
void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                        float* y, float* workspace);
// dx = d(sum y*dy)/dx. Overwrites dx.
void conv2d_backward_data_cpu(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                              float* workspace);
// dw = d(sum y*dy)/dw, dbias[k] = sum_{n,p,q} dy[n,k,p,q]. Overwrites both; either may be null
// (not computed: a null dw skips the im2col and GEMMs).
void conv2d_backward_weight_cpu(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                float* dbias, float* workspace);

// The same on CUDA: device pointers, on tg::cuda::current_stream() (asynchronous).
void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                         float* y, float* workspace);
void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx,
                               float* workspace);
void conv2d_backward_weight_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 float* dbias, float* workspace);

}  // namespace tg
