#include "nn/ops/dropout.h"

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/dropout_kernels.h"

namespace tg {

namespace {

Tensor apply_mask(const DropoutParams& d, const Tensor& in_raw, const char* what) {
  const Tensor in = in_raw.contiguous();
  Tensor out = Tensor::empty(in.shape(), DType::f32, in.device());
  if (out.numel() == 0) return out;
  TG_DISPATCH(in.device(), what, dropout_cpu(d, in.numel(), in.data<float>(), out.data<float>()),
              dropout_cuda(d, in.numel(), in.data<float>(), out.data<float>()));
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, float drop_ratio, bool training, uint64_t seed, uint64_t stream) {
  TG_CHECK(x.defined(), "dropout: undefined input");
  check_tensor(x, "dropout input", DType::f32, x.device());
  TG_CHECK(drop_ratio >= 0.0f && drop_ratio < 1.0f, "dropout: drop_ratio must be in [0, 1), got ",
           drop_ratio);
  if (!training || drop_ratio == 0.0f) return x;
  DropoutParams d;
  d.drop_ratio = drop_ratio;
  d.scale = 1.0f / (1.0f - drop_ratio);
  d.seed = seed;
  d.stream = stream;
  Tensor y = apply_mask(d, x, "dropout");
  if (any_requires_grad({&x})) {
    // The mask is regenerated from (seed, stream) instead of saved: no extra memory per layer.
    record({&x}, {&y}, [d](BackwardContext& ctx) {
      ctx.accumulate(0, apply_mask(d, ctx.grad_output(0), "dropout backward"));
    });
  }
  return y;
}

}  // namespace tg
