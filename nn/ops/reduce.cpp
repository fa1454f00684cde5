#include "nn/ops/reduce.h"

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/reduce_kernels.h"

namespace tg {

namespace {

#if TG_CUDA
Tensor cuda_workspace(int64_t n, const Device& device) {
  return Tensor::empty({reduce_cuda_workspace_floats(n)}, DType::f32, device);
}
#endif

// dx = d op(x)/dx * dy for a contiguous x; dy is a scalar on x's device.
Tensor reduce_backward(ReduceOp op, const Tensor& x, const Tensor& dy_in) {
  const char* name = reduce_op_name(op);
  check_tensor(dy_in, "reduce backward: output gradient", DType::f32, x.device());
  TG_CHECK(dy_in.numel() == 1, name, " backward: output gradient must be a scalar, got ",
           dy_in.str());
  const Tensor dy = dy_in.contiguous();
  const int64_t n = x.numel();
  Tensor dx = Tensor::empty(x.shape(), DType::f32, x.device());
  if (n == 0) return dx;
  // Where max_abs routes the gradient (read by the backward kernel only for max_abs).
  Tensor k = Tensor::full({1}, -1.0, DType::i64, x.device());
  // A CUDA workspace handed back to the caching allocator at the end of the full expression is
  // safe: the allocator reuses blocks in stream order (nn/core/cuda_runtime.h).
  if (op == ReduceOp::max_abs) {
    TG_DISPATCH(x.device(), name, argmax_abs_cpu(x.data<float>(), n, k.data<int64_t>()),
                argmax_abs_cuda(x.data<float>(), n, k.data<int64_t>(),
                                cuda_workspace(n, x.device()).data<float>()));
  }
  TG_DISPATCH(x.device(), name,
              reduce_backward_cpu(op, x.data<float>(), n, dy.data<float>(), k.data<int64_t>(),
                                  dx.data<float>()),
              reduce_backward_cuda(op, x.data<float>(), n, dy.data<float>(), k.data<int64_t>(),
                                   dx.data<float>()));
  return dx;
}

}  // namespace

Tensor reduce(const Tensor& x_in, ReduceOp op) {
  const char* name = reduce_op_name(op);
  TG_CHECK(x_in.defined(), name, ": input is undefined");
  TG_CHECK(x_in.dtype() == DType::f32, name, ": input must be f32, got ", x_in.str());
  TG_CHECK(op != ReduceOp::mean || x_in.numel() > 0, "mean: input ", x_in.str(),
           " is empty; the mean of no elements is undefined");
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  Tensor out = Tensor::empty({}, DType::f32, x.device());
  TG_DISPATCH(x.device(), name, reduce_cpu(op, x.data<float>(), n, out.data<float>()),
              reduce_cuda(op, x.data<float>(), n, out.data<float>(),
                          cuda_workspace(n, x.device()).data<float>()));
  if (any_requires_grad({&x_in})) {
    record({&x_in}, {&out}, [x, op](BackwardContext& ctx) {
      ctx.accumulate(0, reduce_backward(op, x, ctx.grad_output(0)));
    });
  }
  return out;
}

Tensor sum(const Tensor& x) {
  return reduce(x, ReduceOp::sum);
}
Tensor mean(const Tensor& x) {
  return reduce(x, ReduceOp::mean);
}
Tensor max_abs(const Tensor& x) {
  return reduce(x, ReduceOp::max_abs);
}
Tensor sum_squares(const Tensor& x) {
  return reduce(x, ReduceOp::sum_squares);
}
Tensor l1_norm(const Tensor& x) {
  return reduce(x, ReduceOp::l1);
}

}  // namespace tg
