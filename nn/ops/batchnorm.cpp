#include "nn/ops/batchnorm.h"

#include "nn/autograd/tape.h"
#include "nn/ops/batchnorm_kernels.h"
#include "nn/ops/dispatch.h"

namespace tg {

namespace {

const float* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<float>() : nullptr;
}

// Throws unless `t` is an f32 [C] tensor on `device`; `what` names the argument.
void check_per_channel(const Tensor& t, const char* what, int64_t C, const Device& device) {
  check_tensor(t, what, DType::f32, device);
  TG_CHECK(t.ndim() == 1 && t.size(0) == C, "batch_norm: ", what, " must have shape [", C,
           "] (one value per channel of x), got ", shape_str(t.shape()));
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                  Tensor& moving_mean, Tensor& moving_var, bool training,
                  const BatchNormOptions& o) {
  check_tensor(x_in, "batch_norm input x", DType::f32, x_in.device());
  TG_CHECK(x_in.ndim() == 4 || x_in.ndim() == 2,
           "batch_norm: input x must be [N, C, H, W] or [N, C], got shape ",
           shape_str(x_in.shape()));
  const Device dev = x_in.device();
  const int64_t C = x_in.size(1);
  if (gamma_in.defined()) check_per_channel(gamma_in, "gamma", C, dev);
  if (beta_in.defined()) check_per_channel(beta_in, "beta", C, dev);
  check_per_channel(moving_mean, "moving_mean", C, dev);
  check_per_channel(moving_var, "moving_var", C, dev);
  TG_CHECK(moving_mean.is_contiguous() && moving_var.is_contiguous(),
           "batch_norm: moving_mean and moving_var are updated in place and must be contiguous");
  TG_CHECK(o.decay >= 0.0f && o.decay <= 1.0f, "batch_norm: decay must be in [0, 1], got ",
           o.decay);
  TG_CHECK(o.eps >= 0.0f, "batch_norm: eps must be >= 0, got ", o.eps);

  const Tensor x = x_in.contiguous();
  const Tensor gamma = gamma_in.defined() ? gamma_in.contiguous() : Tensor();
  const Tensor beta = beta_in.defined() ? beta_in.contiguous() : Tensor();
  BatchNormShape s;
  s.n = x.size(0);
  s.c = C;
  s.hw = x.ndim() == 4 ? x.size(2) * x.size(3) : 1;
  TG_CHECK(!training || s.n * s.hw > 0, "batch_norm: training needs at least one element per ",
           "channel, x has shape ", shape_str(x.shape()));

  // The statistics y is normalized with, saved for backward. In inference they are copies, so a
  // later in-place update of the moving statistics cannot change this node's gradient.
  Tensor mean, var;
  if (training) {
    mean = Tensor::empty({C}, DType::f32, dev);
    var = Tensor::empty({C}, DType::f32, dev);
    if (C > 0) {
      TG_DISPATCH(
          dev, "batch_norm",
          batch_norm_stats_cpu(s, x.data<float>(), mean.data<float>(), var.data<float>());
          batch_norm_update_moving_cpu(C, o.decay, mean.data<float>(), var.data<float>(),
                                       moving_mean.data<float>(), moving_var.data<float>()),
          batch_norm_stats_cuda(s, x.data<float>(), mean.data<float>(), var.data<float>());
          batch_norm_update_moving_cuda(C, o.decay, mean.data<float>(), var.data<float>(),
                                        moving_mean.data<float>(), moving_var.data<float>()));
    }
  } else {
    mean = moving_mean.clone();
    var = moving_var.clone();
  }

  Tensor y = Tensor::empty(x.shape(), DType::f32, dev);
  if (x.numel() > 0) {
    TG_DISPATCH(
        dev, "batch_norm",
        batch_norm_apply_cpu(s, x.data<float>(), mean.data<float>(), var.data<float>(),
                             data_or_null(gamma), data_or_null(beta), o.eps, y.data<float>()),
        batch_norm_apply_cuda(s, x.data<float>(), mean.data<float>(), var.data<float>(),
                              data_or_null(gamma), data_or_null(beta), o.eps, y.data<float>()));
  }

  if (any_requires_grad({&x_in, &gamma_in, &beta_in})) {
    record({&x_in, &gamma_in, &beta_in}, {&y},
           [s, training, eps = o.eps, x, gamma, mean, var](BackwardContext& ctx) {
             const Device d = x.device();
             const bool need_dx = ctx.needs_input_grad(0);
             const bool need_sums =
                 (training && need_dx) || ctx.needs_input_grad(1) || ctx.needs_input_grad(2);
             const Tensor dy = ctx.grad_output(0).contiguous();
             Tensor dgamma = Tensor::zeros({s.c}, DType::f32, d);
             Tensor dbeta = Tensor::zeros({s.c}, DType::f32, d);
             if (need_sums && x.numel() > 0) {
               TG_DISPATCH(d, "batch_norm backward",
                           batch_norm_backward_reduce_cpu(
                               s, x.data<float>(), dy.data<float>(), mean.data<float>(),
                               var.data<float>(), eps, dgamma.data<float>(), dbeta.data<float>()),
                           batch_norm_backward_reduce_cuda(
                               s, x.data<float>(), dy.data<float>(), mean.data<float>(),
                               var.data<float>(), eps, dgamma.data<float>(), dbeta.data<float>()));
             }
             if (need_dx) {
               Tensor dx = Tensor::empty(x.shape(), DType::f32, d);
               if (x.numel() > 0) {
                 TG_DISPATCH(d, "batch_norm backward",
                             batch_norm_backward_dx_cpu(
                                 s, training, x.data<float>(), dy.data<float>(), mean.data<float>(),
                                 var.data<float>(), data_or_null(gamma), eps, dgamma.data<float>(),
                                 dbeta.data<float>(), dx.data<float>()),
                             batch_norm_backward_dx_cuda(
                                 s, training, x.data<float>(), dy.data<float>(), mean.data<float>(),
                                 var.data<float>(), data_or_null(gamma), eps, dgamma.data<float>(),
                                 dbeta.data<float>(), dx.data<float>()));
               }
               ctx.accumulate(0, dx);
             }
             ctx.accumulate(1, dgamma);
             ctx.accumulate(2, dbeta);
           });
  }
  return y;
}

}  // namespace tg
