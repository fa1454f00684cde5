// concat needs no kernels of its own: the output is built with Tensor::copy_from into slice views
// of it, and the backward takes slices of dy; the strided copy behind copy_from/contiguous already
// runs on the CPU and on CUDA.
#include "nn/ops/concat.h"

#include "nn/autograd/tape.h"

namespace tg {

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  TG_CHECK(!xs.empty(), "concat: no input tensors");
  const Tensor& first = xs[0];
  TG_CHECK(first.defined(), "concat: input 0 is undefined");
  const int64_t nd = first.ndim();
  TG_CHECK(nd > 0, "concat: input 0 is a scalar (0-D); need at least one dimension");
  const int64_t d = dim < 0 ? dim + nd : dim;
  TG_CHECK(d >= 0 && d < nd, "concat: dim ", dim, " out of range for ", nd, "-D inputs");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    TG_CHECK(x.defined(), "concat: input ", i, " is undefined");
    TG_CHECK(x.dtype() == first.dtype(), "concat: input ", i, " has dtype ", dtype_name(x.dtype()),
             ", expected ", dtype_name(first.dtype()), " like input 0");
    TG_CHECK(x.device() == first.device(), "concat: input ", i, " is on ", x.device().str(),
             ", expected ", first.device().str(), " like input 0");
    TG_CHECK(x.ndim() == nd, "concat: input ", i, " has shape ", shape_str(x.shape()),
             ", expected ", nd, " dimensions like input 0 ", shape_str(first.shape()));
    for (int64_t k = 0; k < nd; ++k) {
      TG_CHECK(k == d || x.shape()[k] == first.shape()[k], "concat: input ", i, " has shape ",
               shape_str(x.shape()), ", expected size ", first.shape()[k], " in dimension ", k,
               " like input 0 ", shape_str(first.shape()), " (only dimension ", d, " may differ)");
    }
    out_shape[d] += x.shape()[d];
  }

  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t off = 0;
  for (const Tensor& x : xs) {
    const int64_t len = x.shape()[d];
    if (len > 0 && x.numel() > 0) out.slice(d, off, off + len).copy_from(x);
    off += len;
  }

  std::vector<const Tensor*> inputs;
  for (const Tensor& x : xs) inputs.push_back(&x);
  if (any_requires_grad(inputs)) {
    std::vector<int64_t> starts;
    off = 0;
    for (const Tensor& x : xs) {
      starts.push_back(off);
      off += x.shape()[d];
    }
    starts.push_back(off);
    record(inputs, {&out}, [starts = std::move(starts), d](BackwardContext& ctx) {
      const Tensor& dy = ctx.grad_output(0);
      for (size_t i = 0; i + 1 < starts.size(); ++i) {
        if (ctx.needs_input_grad(i))
          ctx.accumulate(i, dy.slice(d, starts[i], starts[i + 1]).contiguous());
      }
    });
  }
  return out;
}

}  // namespace tg
