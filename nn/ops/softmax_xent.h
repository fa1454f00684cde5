// Softmax cross-entropy with integer labels (the training loss) and the row softmax
// (evaluation), differentiable, CPU and CUDA. N = rows (batch), K = classes.
#pragma once

#include "nn/core/tensor.h"

namespace tg {

// Mean over the N rows of -log softmax(logits[i])[labels[i]], computed stably (row max
// subtracted, log-sum-exp). logits: [N, K] f32, N >= 1, K >= 1; labels: [N] i32 on the same
// device. Returns a scalar (shape {}) on that device. Backward (logits only):
// dlogits = (softmax(logits) - onehot(labels)) * dloss / N.
// Throws on wrong dtypes, shapes or devices, and on a label < 0 or >= K (naming the first such
// row, its label and K; on CUDA this costs one small device-to-host copy per call).
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels);

// Softmax over the last dimension: logits [..., K] f32 (ndim >= 1) -> probabilities of the same
// shape, each row summing to 1. Differentiable.
Tensor softmax(const Tensor& logits);

}  // namespace tg
