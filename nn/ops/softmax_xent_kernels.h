// Raw kernels of softmax_xent.h. N rows (batch) of K class scores, row-major contiguous
// (logits[i * K + j]); labels[i] in [0, K) (i32). Per row, numerically stable: with
// m = max_j x_j and s = sum_j exp(x_j - m) (accumulated in double),
//   softmax:  p_j = exp(x_j - m) / s
//   loss_i  = log(s) - (x_label - m)                       (= logsumexp(x) - x_label)
// Nothing is saved between forward and backward: the backward recomputes m and s from the
// logits (one extra read of a [N, K] tile, no [N, K] buffer kept alive).
#pragma once

#include <cstdint>

namespace tg {

struct SoftmaxShape {
  int64_t n = 0;  // rows (N)
  int64_t k = 0;  // classes per row (K)
};

// row_loss[i] = loss_i (NaN for a row whose label is out of range), *loss = mean_i loss_i
// (accumulated in double, in row order on the CPU, in a fixed tree order on CUDA),
// *bad_row = the first row whose label is < 0 or >= K, or N if every label is valid.
// On CUDA `row_loss`, `loss` and `bad_row` are device memory and nothing is synchronized.
void softmax_xent_forward_cpu(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                              float* row_loss, float* loss, int64_t* bad_row);
void softmax_xent_forward_cuda(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                               float* row_loss, float* loss, int64_t* bad_row);

// dlogits[i, j] = (p_ij - [j == label_i]) * dloss[0] / N. dloss on the kernel's device.
void softmax_xent_backward_cpu(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                               const float* dloss, float* dlogits);
void softmax_xent_backward_cuda(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                                const float* dloss, float* dlogits);

// probs[i, j] = p_ij.
void softmax_forward_cpu(const SoftmaxShape& s, const float* logits, float* probs);
void softmax_forward_cuda(const SoftmaxShape& s, const float* logits, float* probs);

// dx[i, j] = p_ij * (dy_ij - sum_l dy_il p_il) (the row dot product accumulated in double).
void softmax_backward_cpu(const SoftmaxShape& s, const float* probs, const float* dy, float* dx);
void softmax_backward_cuda(const SoftmaxShape& s, const float* probs, const float* dy, float* dx);

}  // namespace tg
