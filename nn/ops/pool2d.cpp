#include "nn/ops/pool2d.h"

#include <limits>

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/pool2d_kernels.h"

namespace tg {

namespace {

Pool2dShape pool_shape(const Tensor& x, const Pool2dOptions& o, const char* op) {
  TG_CHECK(x.defined(), op, ": undefined input");
  check_tensor(x, op, DType::f32, x.device());
  TG_CHECK(x.ndim() == 4, op, ": input must be 4-D [N, C, H, W], got ", shape_str(x.shape()));
  TG_CHECK(o.kh > 0 && o.kw > 0, op, ": window must be positive, got ", o.kh, "x", o.kw);
  TG_CHECK(o.sh > 0 && o.sw > 0, op, ": stride must be positive, got ", o.sh, "x", o.sw);
  if (o.padding == Padding::explicit_pad) {
    // A pad >= the window would create windows lying entirely in the padding.
    TG_CHECK(o.pad_h >= 0 && o.pad_h < o.kh && o.pad_w >= 0 && o.pad_w < o.kw, op,
             ": explicit pad must be in [0, window), got pad ", o.pad_h, "x", o.pad_w,
             " for window ", o.kh, "x", o.kw);
  }
  Pool2dShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.h = x.size(2);
  s.w = x.size(3);
  TG_CHECK(s.h > 0 && s.w > 0, op, ": empty spatial extent ", shape_str(x.shape()));
  TG_CHECK(s.h * s.w <= std::numeric_limits<int32_t>::max(), op, ": H*W = ", s.h * s.w,
           " does not fit the i32 argmax");
  const Padded1d ph = padded_dim(s.h, o.kh, o.sh, o.padding, o.pad_h);
  const Padded1d pw = padded_dim(s.w, o.kw, o.sw, o.padding, o.pad_w);
  s.p = ph.out;
  s.q = pw.out;
  s.kh = o.kh;
  s.kw = o.kw;
  s.sh = o.sh;
  s.sw = o.sw;
  s.pad_top = ph.pad_before;
  s.pad_left = pw.pad_before;
  return s;
}

// dx from dy for max pooling (not recorded: runs inside backward()).
Tensor max_pool2d_backward(const Pool2dShape& s, const Tensor& dy_in, const Tensor& argmax) {
  const Tensor dy = dy_in.contiguous();
  Tensor dx = Tensor::empty({s.n, s.c, s.h, s.w}, DType::f32, dy.device());
  if (dx.numel() == 0) return dx;
  TG_DISPATCH(
      dy.device(), "max_pool2d backward",
      max_pool2d_backward_cpu(s, dy.data<float>(), argmax.data<int32_t>(), dx.data<float>()),
      max_pool2d_backward_cuda(s, dy.data<float>(), argmax.data<int32_t>(), dx.data<float>()));
  return dx;
}

Tensor avg_pool2d_backward(const Pool2dShape& s, const Tensor& dy_in) {
  const Tensor dy = dy_in.contiguous();
  Tensor dx = Tensor::empty({s.n, s.c, s.h, s.w}, DType::f32, dy.device());
  if (dx.numel() == 0) return dx;
  TG_DISPATCH(dy.device(), "avg_pool2d backward",
              avg_pool2d_backward_cpu(s, dy.data<float>(), dx.data<float>()),
              avg_pool2d_backward_cuda(s, dy.data<float>(), dx.data<float>()));
  return dx;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dOptions& opt) {
  const Pool2dShape s = pool_shape(x_in, opt, "max_pool2d");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({s.n, s.c, s.p, s.q}, DType::f32, x.device());
  Tensor argmax = Tensor::empty({s.n, s.c, s.p, s.q}, DType::i32, x.device());
  if (y.numel() > 0) {
    TG_DISPATCH(
        x.device(), "max_pool2d",
        max_pool2d_forward_cpu(s, x.data<float>(), y.data<float>(), argmax.data<int32_t>()),
        max_pool2d_forward_cuda(s, x.data<float>(), y.data<float>(), argmax.data<int32_t>()));
  }
  if (any_requires_grad({&x_in})) {
    record({&x_in}, {&y}, [s, argmax](BackwardContext& ctx) {
      ctx.accumulate(0, max_pool2d_backward(s, ctx.grad_output(0), argmax));
    });
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dOptions& opt) {
  const Pool2dShape s = pool_shape(x_in, opt, "avg_pool2d");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({s.n, s.c, s.p, s.q}, DType::f32, x.device());
  if (y.numel() > 0) {
    TG_DISPATCH(x.device(), "avg_pool2d",
                avg_pool2d_forward_cpu(s, x.data<float>(), y.data<float>()),
                avg_pool2d_forward_cuda(s, x.data<float>(), y.data<float>()));
  }
  if (any_requires_grad({&x_in})) {
    record({&x_in}, {&y}, [s](BackwardContext& ctx) {
      ctx.accumulate(0, avg_pool2d_backward(s, ctx.grad_output(0)));
    });
  }
  return y;
}

}  // namespace tg
