// Bias kernels of linear on the CPU (the products are OpenBLAS GEMMs in linear.cpp).
// fill_bias copies the bias row into every row; bias_grad walks dy row by row, adding each row
// into per-column double accumulators (a contiguous, vectorizable inner loop; the row order
// fixes the summation order).
#include <cstring>
#include <vector>

#include "nn/ops/linear_kernels.h"

namespace tg {

void linear_fill_bias_cpu(int64_t rows, int64_t cols, const float* bias, float* y) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t n = 0; n < rows; ++n) std::memcpy(y + n * cols, bias, sizeof(float) * cols);
}

void linear_bias_grad_cpu(int64_t rows, int64_t cols, const float* dy, float* dbias) {
  std::vector<double> acc(cols, 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    const float* row = dy + n * cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] += row[j];
  }
  for (int64_t j = 0; j < cols; ++j) dbias[j] = static_cast<float>(acc[j]);
}

}  // namespace tg
