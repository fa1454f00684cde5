#include "nn/ops/softmax_xent.h"

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/softmax_xent_kernels.h"

namespace tg {

namespace {

Tensor xent_backward(const SoftmaxShape& s, const Tensor& logits, const Tensor& labels,
                     const Tensor& dloss_in) {
  check_tensor(dloss_in, "softmax_cross_entropy backward: loss gradient", DType::f32,
               logits.device());
  TG_CHECK(dloss_in.numel() == 1,
           "softmax_cross_entropy backward: loss gradient must be a scalar, got ", dloss_in.str());
  const Tensor dloss = dloss_in.contiguous();
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, logits.device());
  TG_DISPATCH(logits.device(), "softmax_cross_entropy backward",
              softmax_xent_backward_cpu(s, logits.data<float>(), labels.data<int32_t>(),
                                        dloss.data<float>(), dlogits.data<float>()),
              softmax_xent_backward_cuda(s, logits.data<float>(), labels.data<int32_t>(),
                                         dloss.data<float>(), dlogits.data<float>()));
  return dlogits;
}

SoftmaxShape rows_of(const Tensor& x) {
  SoftmaxShape s;
  s.k = x.size(-1);
  s.n = s.k == 0 ? 0 : x.numel() / s.k;
  return s;
}

}  // namespace

Tensor softmax_cross_entropy(const Tensor& logits_in, const Tensor& labels_in) {
  check_tensor(logits_in, "softmax_cross_entropy logits", DType::f32, logits_in.device());
  const Device dev = logits_in.device();
  TG_CHECK(logits_in.ndim() == 2, "softmax_cross_entropy: logits must be [N, K], got shape ",
           shape_str(logits_in.shape()));
  const SoftmaxShape s{logits_in.size(0), logits_in.size(1)};
  TG_CHECK(s.n >= 1 && s.k >= 1, "softmax_cross_entropy: logits ", shape_str(logits_in.shape()),
           " must have at least one row and one class");
  check_tensor(labels_in, "softmax_cross_entropy labels", DType::i32, dev);
  TG_CHECK(labels_in.shape() == Shape{s.n}, "softmax_cross_entropy: labels must be [N] = [", s.n,
           "] to match logits ", shape_str(logits_in.shape()), ", got ",
           shape_str(labels_in.shape()));
  const Tensor logits = logits_in.contiguous(), labels = labels_in.contiguous();

  Tensor loss = Tensor::empty({}, DType::f32, dev);
  Tensor row_loss = Tensor::empty({s.n}, DType::f32, dev);
  Tensor bad = Tensor::empty({1}, DType::i64, dev);  // first row with a bad label, or N
  TG_DISPATCH(
      dev, "softmax_cross_entropy",
      softmax_xent_forward_cpu(s, logits.data<float>(), labels.data<int32_t>(),
                               row_loss.data<float>(), loss.data<float>(), bad.data<int64_t>()),
      softmax_xent_forward_cuda(s, logits.data<float>(), labels.data<int32_t>(),
                                row_loss.data<float>(), loss.data<float>(), bad.data<int64_t>()));
  const int64_t bad_row = bad.item<int64_t>();  // on CUDA: one 8-byte copy, synchronizing
  if (bad_row != s.n) {
    const int32_t value = labels.slice(0, bad_row, bad_row + 1).item<int32_t>();
    TG_THROW("softmax_cross_entropy: label ", value, " at row ", bad_row, " is out of range for ",
             s.k, " classes (expected 0 <= label < ", s.k, ")");
  }

  if (any_requires_grad({&logits_in})) {
    record({&logits_in}, {&loss}, [s, logits, labels](BackwardContext& ctx) {
      ctx.accumulate(0, xent_backward(s, logits, labels, ctx.grad_output(0)));
    });
  }
  return loss;
}

Tensor softmax(const Tensor& logits_in) {
  check_tensor(logits_in, "softmax input", DType::f32, logits_in.device());
  TG_CHECK(logits_in.ndim() >= 1, "softmax: input must have at least one dimension (classes), got ",
           logits_in.str());
  const Tensor logits = logits_in.contiguous();
  const SoftmaxShape s = rows_of(logits);
  Tensor probs = Tensor::empty(logits.shape(), DType::f32, logits.device());
  if (probs.numel() == 0) return probs;
  TG_DISPATCH(logits.device(), "softmax",
              softmax_forward_cpu(s, logits.data<float>(), probs.data<float>()),
              softmax_forward_cuda(s, logits.data<float>(), probs.data<float>()));
  if (any_requires_grad({&logits_in})) {
    record({&logits_in}, {&probs}, [s, probs](BackwardContext& ctx) {
      const Tensor dy = ctx.grad_output(0).contiguous();
      check_tensor(dy, "softmax backward: output gradient", DType::f32, probs.device());
      check_same_shape(dy, probs, "softmax backward: output gradient", "softmax output");
      Tensor dx = Tensor::empty(probs.shape(), DType::f32, probs.device());
      TG_DISPATCH(
          probs.device(), "softmax backward",
          softmax_backward_cpu(s, probs.data<float>(), dy.data<float>(), dx.data<float>()),
          softmax_backward_cuda(s, probs.data<float>(), dy.data<float>(), dx.data<float>()));
      ctx.accumulate(0, dx);
    });
  }
  return probs;
}

}  // namespace tg
