// Row softmax and softmax cross-entropy on the CPU: rows spread over OpenMP threads, each row
// walked sequentially (max, then the double sum of exp(x - m)). The mean over rows is a
// sequential double sum in row order, so the loss does not depend on the thread count.
#include <cmath>

#include "nn/ops/softmax_xent_kernels.h"

namespace tg {

namespace {

// Rows of this many elements or more are worth a thread each.
constexpr int64_t kParallelMin = 1 << 15;

struct RowStats {
  float m;     // max_j x_j
  double sum;  // sum_j exp(x_j - m)
};

inline RowStats row_stats(const float* x, int64_t k) {
  float m = -INFINITY;
  for (int64_t j = 0; j < k; ++j) m = std::fmax(m, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < k; ++j) s += double(std::exp(x[j] - m));
  return {m, s};
}

inline bool label_ok(int32_t label, int64_t k) {
  return label >= 0 && label < k;
}

}  // namespace

void softmax_xent_forward_cpu(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                              float* row_loss, float* loss, int64_t* bad_row) {
#pragma omp parallel for schedule(static) if (s.n * s.k >= kParallelMin)
  for (int64_t i = 0; i < s.n; ++i) {
    const float* x = logits + i * s.k;
    const int32_t label = labels[i];
    if (!label_ok(label, s.k)) {
      row_loss[i] = NAN;
      continue;
    }
    const RowStats st = row_stats(x, s.k);
    row_loss[i] = static_cast<float>(std::log(st.sum) - double(x[label] - st.m));
  }
  double acc = 0.0;
  int64_t bad = s.n;
  for (int64_t i = 0; i < s.n; ++i) {
    acc += double(row_loss[i]);
    if (bad == s.n && !label_ok(labels[i], s.k)) bad = i;
  }
  *loss = static_cast<float>(acc / double(s.n));
  *bad_row = bad;
}

void softmax_xent_backward_cpu(const SoftmaxShape& s, const float* logits, const int32_t* labels,
                               const float* dloss, float* dlogits) {
  const float scale = dloss[0] / static_cast<float>(s.n);
#pragma omp parallel for schedule(static) if (s.n * s.k >= kParallelMin)
  for (int64_t i = 0; i < s.n; ++i) {
    const float* x = logits + i * s.k;
    float* dx = dlogits + i * s.k;
    const RowStats st = row_stats(x, s.k);
    const float inv = static_cast<float>(1.0 / st.sum);
    const int64_t label = labels[i];  // validated by the forward
    for (int64_t j = 0; j < s.k; ++j) {
      const float p = std::exp(x[j] - st.m) * inv;
      dx[j] = (p - (j == label ? 1.f : 0.f)) * scale;
    }
  }
}

void softmax_forward_cpu(const SoftmaxShape& s, const float* logits, float* probs) {
#pragma omp parallel for schedule(static) if (s.n * s.k >= kParallelMin)
  for (int64_t i = 0; i < s.n; ++i) {
    const float* x = logits + i * s.k;
    float* p = probs + i * s.k;
    const RowStats st = row_stats(x, s.k);
    const float inv = static_cast<float>(1.0 / st.sum);
    for (int64_t j = 0; j < s.k; ++j) p[j] = std::exp(x[j] - st.m) * inv;
  }
}

void softmax_backward_cpu(const SoftmaxShape& s, const float* probs, const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (s.n * s.k >= kParallelMin)
  for (int64_t i = 0; i < s.n; ++i) {
    const float* p = probs + i * s.k;
    const float* g = dy + i * s.k;
    float* d = dx + i * s.k;
    double dot = 0.0;
    for (int64_t j = 0; j < s.k; ++j) dot += double(g[j]) * double(p[j]);
    const float dotf = static_cast<float>(dot);
    for (int64_t j = 0; j < s.k; ++j) d[j] = p[j] * (g[j] - dotf);
  }
}

}  // namespace tg
