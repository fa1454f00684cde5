#include "nn/ops/elementwise.h"

#include "nn/autograd/tape.h"
#include "nn/core/blas.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/elementwise_kernels.h"

namespace tg {

namespace {

// Strides of `t` (contiguous) aligned to an output of `out` dims, 0 where t is broadcast.
void aligned_strides(const Tensor& t, const Shape& out, int64_t* strides) {
  const size_t n = out.size(), off = n - t.shape().size();
  for (size_t d = 0; d < n; ++d) {
    if (d < off || t.shape()[d - off] == 1) {
      strides[d] = 0;
    } else {
      strides[d] = t.strides()[d - off];
    }
  }
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
  }
  return "?";
}

Tensor binary_forward(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  TG_CHECK(a_in.defined() && b_in.defined(), op_name(op), ": undefined operand");
  check_tensor(a_in, op_name(op), DType::f32, a_in.device());
  check_tensor(b_in, op_name(op), DType::f32, a_in.device());
  const Shape out_shape = broadcast_shapes(a_in.shape(), b_in.shape());
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  BroadcastShape s;
  s.ndim = static_cast<int>(out_shape.size());
  for (int d = 0; d < s.ndim; ++d) s.sizes[d] = out_shape[d];
  aligned_strides(a, out_shape, s.a_strides);
  aligned_strides(b, out_shape, s.b_strides);
  Tensor out = Tensor::empty(out_shape, DType::f32, a.device());
  if (out.numel() == 0) return out;
  TG_DISPATCH(a.device(), op_name(op),
              binary_cpu(op, s, a.data<float>(), b.data<float>(), out.data<float>()),
              binary_cuda(op, s, a.data<float>(), b.data<float>(), out.data<float>()));
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& g_in, const Shape& shape) {
  if (g_in.shape() == shape) return g_in;
  const Shape& gs = g_in.shape();
  TG_CHECK(broadcast_shapes(shape, gs) == gs, "sum_to: ", shape_str(gs), " is not a broadcast of ",
           shape_str(shape));
  const Tensor g = g_in.contiguous();
  Tensor out = Tensor::empty(shape, DType::f32, g.device());
  BroadcastShape s;
  s.ndim = static_cast<int>(gs.size());
  for (int d = 0; d < s.ndim; ++d) s.sizes[d] = gs[d];
  aligned_strides(out, gs, s.a_strides);
  TG_DISPATCH(g.device(), "sum_to", sum_to_cpu(s, g.data<float>(), out.data<float>(), out.numel()),
              sum_to_cuda(s, g.data<float>(), out.data<float>(), out.numel()));
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::add, a, b);
  if (any_requires_grad({&a, &b})) {
    record({&a, &b}, {&out}, [sa = a.shape(), sb = b.shape()](BackwardContext& ctx) {
      const Tensor& g = ctx.grad_output(0);
      if (ctx.needs_input_grad(0)) ctx.accumulate(0, sum_to(g, sa));
      if (ctx.needs_input_grad(1)) ctx.accumulate(1, sum_to(g, sb));
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::sub, a, b);
  if (any_requires_grad({&a, &b})) {
    record({&a, &b}, {&out}, [sa = a.shape(), sb = b.shape()](BackwardContext& ctx) {
      const Tensor& g = ctx.grad_output(0);
      if (ctx.needs_input_grad(0)) ctx.accumulate(0, sum_to(g, sa));
      if (ctx.needs_input_grad(1)) ctx.accumulate(1, sum_to(affine(g, -1.0f, 0.0f), sb));
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::mul, a, b);
  if (any_requires_grad({&a, &b})) {
    record({&a, &b}, {&out}, [a, b](BackwardContext& ctx) {
      const Tensor& g = ctx.grad_output(0);
      if (ctx.needs_input_grad(0))
        ctx.accumulate(0, sum_to(binary_forward(BinaryOp::mul, g, b), a.shape()));
      if (ctx.needs_input_grad(1))
        ctx.accumulate(1, sum_to(binary_forward(BinaryOp::mul, g, a), b.shape()));
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::div, a, b);
  if (any_requires_grad({&a, &b})) {
    record({&a, &b}, {&out}, [a, b, out](BackwardContext& ctx) {
      const Tensor& g = ctx.grad_output(0);
      const Tensor g_over_b = binary_forward(BinaryOp::div, g, b);
      if (ctx.needs_input_grad(0)) ctx.accumulate(0, sum_to(g_over_b, a.shape()));
      if (ctx.needs_input_grad(1)) {
        // d(a/b)/db = -(a/b)/b: -g/b * out
        const Tensor gb = binary_forward(BinaryOp::mul, g_over_b, out);
        ctx.accumulate(1, sum_to(affine(gb, -1.0f, 0.0f), b.shape()));
      }
    });
  }
  return out;
}

Tensor affine(const Tensor& x_in, float scale, float shift) {
  check_tensor(x_in, "affine input", DType::f32, x_in.device());
  const Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32, x.device());
  TG_DISPATCH(x.device(), "affine",
              affine_cpu(x.numel(), x.data<float>(), scale, shift, out.data<float>()),
              affine_cuda(x.numel(), x.data<float>(), scale, shift, out.data<float>()));
  if (any_requires_grad({&x_in})) {
    record({&x_in}, {&out}, [scale](BackwardContext& ctx) {
      ctx.accumulate(0, affine(ctx.grad_output(0), scale, 0.0f));
    });
  }
  return out;
}

void add_(Tensor& y, const Tensor& x, float alpha) {
  check_tensor(y, "add_ destination", DType::f32, y.device());
  check_tensor(x, "add_ source", DType::f32, y.device());
  check_same_shape(y, x, "add_ destination", "add_ source");
  TG_CHECK(y.is_contiguous(), "add_: destination must be contiguous");
  const Tensor xc = x.contiguous();
  axpy(y.device(), y.numel(), alpha, xc.data<float>(), y.data<float>());
}

void scale_(Tensor& y, float s) {
  check_tensor(y, "scale_ destination", DType::f32, y.device());
  TG_CHECK(y.is_contiguous(), "scale_: destination must be contiguous");
  scal(y.device(), y.numel(), s, y.data<float>());
}

}  // namespace tg
