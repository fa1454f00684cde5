#include "nn/ops/lrn.h"

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/lrn_kernels.h"

namespace tg {

Tensor lrn(const Tensor& x_in, const LrnOptions& o) {
  check_tensor(x_in, "lrn input x", DType::f32, x_in.device());
  TG_CHECK(x_in.ndim() == 4, "lrn: input x must be 4-D [N, C, H, W], got shape ",
           shape_str(x_in.shape()));
  TG_CHECK(o.depth_radius >= 0, "lrn: depth_radius must be >= 0, got ", o.depth_radius);
  const Tensor x = x_in.contiguous();
  LrnShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.hw = x.size(2) * x.size(3);
  s.radius = o.depth_radius;
  s.bias = o.bias;
  s.alpha = o.alpha;
  s.beta = o.beta;
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  Tensor norm = Tensor::empty(x.shape(), DType::f32, x.device());
  if (x.numel() == 0) return y;
  TG_DISPATCH(x.device(), "lrn",
              lrn_forward_cpu(s, x.data<float>(), y.data<float>(), norm.data<float>()),
              lrn_forward_cuda(s, x.data<float>(), y.data<float>(), norm.data<float>()));
  if (any_requires_grad({&x_in})) {
    // y is saved by value before record() gives it autograd meta: the copy holds no meta.
    record({&x_in}, {&y}, [s, x, y, norm](BackwardContext& ctx) {
      const Tensor dy = ctx.grad_output(0).contiguous();
      Tensor dx = Tensor::empty(x.shape(), DType::f32, x.device());
      TG_DISPATCH(x.device(), "lrn backward",
                  lrn_backward_cpu(s, x.data<float>(), y.data<float>(), norm.data<float>(),
                                   dy.data<float>(), dx.data<float>()),
                  lrn_backward_cuda(s, x.data<float>(), y.data<float>(), norm.data<float>(),
                                    dy.data<float>(), dx.data<float>()));
      ctx.accumulate(0, dx);
    });
  }
  return y;
}

}  // namespace tg
