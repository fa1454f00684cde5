// Raw kernels of linear.h besides the GEMM (nn/core/blas.h does the products): the bias add
// and the bias gradient of y[N, out] = x[N, in] * w[in, out] + bias[out]. Row-major, dense.
#pragma once

#include <cstdint>

namespace tg {

// y[n, j] = bias[j] for n < rows, j < cols: y starts as the broadcast bias and the GEMM then
// adds x*w with beta = 1 (one pass over y instead of two).
void linear_fill_bias_cpu(int64_t rows, int64_t cols, const float* bias, float* y);
void linear_fill_bias_cuda(int64_t rows, int64_t cols, const float* bias, float* y);

// dbias[j] = sum_{n < rows} dy[n, j] (column sums). Overwrites dbias.
void linear_bias_grad_cpu(int64_t rows, int64_t cols, const float* dy, float* dbias);
void linear_bias_grad_cuda(int64_t rows, int64_t cols, const float* dy, float* dbias);

}  // namespace tg
