#include "nn/ops/relu.h"

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/relu_kernels.h"

namespace tg {

namespace {

Tensor relu_backward(const Tensor& y, const Tensor& dy_in) {
  const Tensor dy = dy_in.contiguous();
  Tensor dx = Tensor::empty(y.shape(), DType::f32, y.device());
  if (dx.numel() == 0) return dx;
  TG_DISPATCH(y.device(), "relu backward",
              relu_backward_cpu(y.numel(), y.data<float>(), dy.data<float>(), dx.data<float>()),
              relu_backward_cuda(y.numel(), y.data<float>(), dy.data<float>(), dx.data<float>()));
  return dx;
}

}  // namespace

Tensor relu(const Tensor& x_in) {
  TG_CHECK(x_in.defined(), "relu: undefined input");
  check_tensor(x_in, "relu input", DType::f32, x_in.device());
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  if (y.numel() > 0) {
    TG_DISPATCH(x.device(), "relu", relu_forward_cpu(x.numel(), x.data<float>(), y.data<float>()),
                relu_forward_cuda(x.numel(), x.data<float>(), y.data<float>()));
  }
  if (any_requires_grad({&x_in})) {
    record({&x_in}, {&y},
           [y](BackwardContext& ctx) { ctx.accumulate(0, relu_backward(y, ctx.grad_output(0))); });
  }
  return y;
}

}  // namespace tg
