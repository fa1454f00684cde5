#include "nn/ops/reshape.h"

#include "nn/autograd/tape.h"

namespace tg {

Tensor reshape(const Tensor& x, Shape shape) {
  TG_CHECK(x.defined(), "reshape: undefined input");
  // view() resets the autograd metadata, so the result is a fresh handle even when it aliases x.
  Tensor out = x.contiguous().view(std::move(shape));
  if (any_requires_grad({&x})) {
    record({&x}, {&out}, [xs = x.shape()](BackwardContext& ctx) {
      ctx.accumulate(0, ctx.grad_output(0).contiguous().view(xs));
    });
  }
  return out;
}

Tensor flatten(const Tensor& x) {
  TG_CHECK(x.defined(), "flatten: undefined input");
  TG_CHECK(x.ndim() >= 1, "flatten: input must have a batch dimension, got a 0-D tensor");
  int64_t rest = 1;
  for (int64_t k = 1; k < x.ndim(); ++k) rest *= x.shape()[k];
  return reshape(x, {x.shape()[0], rest});
}

}  // namespace tg
