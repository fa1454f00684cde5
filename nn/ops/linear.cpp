#include "nn/ops/linear.h"

#include "nn/autograd/tape.h"
#include "nn/core/blas.h"
#include "nn/ops/dispatch.h"
#include "nn/ops/linear_kernels.h"

namespace tg {

namespace {

// c[m, n] = op(a) * op(b) + beta * c on `dev`, dense row-major operands. Skips the empty
// cases BLAS rejects: with k == 0 the product is zero, so c must come from product_out().
void product(const Device& dev, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, const float* a,
             const float* b, float beta, float* c) {
  if (m == 0 || n == 0 || k == 0) return;
  gemm(dev, dense_gemm(ta, tb, m, n, k, 1.0f, a, b, beta, c));
}

// The output of a product with inner dimension k: zero-filled only when k == 0.
Tensor product_out(int64_t m, int64_t n, int64_t k, const Device& dev) {
  return k == 0 ? Tensor::zeros({m, n}, DType::f32, dev) : Tensor::empty({m, n}, DType::f32, dev);
}

void check_2d(const Tensor& t, const char* op, const char* what, const char* layout) {
  TG_CHECK(t.ndim() == 2, op, ": ", what, " must be 2-D ", layout, ", got ", shape_str(t.shape()));
}

// Gradients of y = a * b (+ bias): da = dy * b^T, db = a^T * dy, dbias = column sums of dy.
// Input indices: 0 = a, 1 = b, 2 = bias.
void product_backward(BackwardContext& ctx, const Tensor& a, const Tensor& b, int64_t M, int64_t K,
                      int64_t N) {
  if (!ctx.grad_output(0).defined()) return;  // no gradient reached y: all zero
  const Tensor dy = ctx.grad_output(0).contiguous();
  const Device d = dy.device();
  if (ctx.needs_input_grad(0)) {
    Tensor da = product_out(M, K, N, d);
    product(d, Trans::N, Trans::T, M, K, N, dy.data<float>(), b.data<float>(), 0.0f,
            da.data<float>());
    ctx.accumulate(0, da);
  }
  if (ctx.needs_input_grad(1)) {
    // The weight's gradient, written straight into its grad when it can be (tape.h).
    Tensor db = M == 0 ? product_out(K, N, M, d) : ctx.grad_buffer(1, {K, N}, d);
    product(d, Trans::T, Trans::N, K, N, M, a.data<float>(), dy.data<float>(), 0.0f,
            db.data<float>());
    ctx.accumulate(1, db);
  }
  if (ctx.needs_input_grad(2)) {
    Tensor dbias = Tensor::empty({N}, DType::f32, d);
    TG_DISPATCH(d, "linear backward bias",
                linear_bias_grad_cpu(M, N, dy.data<float>(), dbias.data<float>()),
                linear_bias_grad_cuda(M, N, dy.data<float>(), dbias.data<float>()));
    ctx.accumulate(2, dbias);
  }
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  TG_CHECK(a_in.defined() && b_in.defined(), "matmul: undefined operand");
  const Device dev = a_in.device();
  check_tensor(a_in, "matmul a", DType::f32, dev);
  check_tensor(b_in, "matmul b", DType::f32, dev);
  check_2d(a_in, "matmul", "a", "[M, K]");
  check_2d(b_in, "matmul", "b", "[K, N]");
  const int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
  TG_CHECK(b_in.size(0) == K, "matmul: a is ", shape_str(a_in.shape()), " and b is ",
           shape_str(b_in.shape()), ": inner dimensions ", K, " and ", b_in.size(0), " differ");
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor y = product_out(M, N, K, dev);
  product(dev, Trans::N, Trans::N, M, N, K, a.data<float>(), b.data<float>(), 0.0f,
          y.data<float>());
  if (any_requires_grad({&a_in, &b_in})) {
    // da reads b, db reads a: save only what a requested gradient needs.
    const Tensor a_saved = b_in.requires_grad() ? a : Tensor();
    const Tensor b_saved = a_in.requires_grad() ? b : Tensor();
    record({&a_in, &b_in}, {&y}, [a_saved, b_saved, M, K, N](BackwardContext& ctx) {
      product_backward(ctx, a_saved, b_saved, M, K, N);
    });
  }
  return y;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in) {
  TG_CHECK(x_in.defined() && w_in.defined(), "linear: undefined x or weight");
  const Device dev = x_in.device();
  check_tensor(x_in, "linear x", DType::f32, dev);
  check_tensor(w_in, "linear weight", DType::f32, dev);
  check_2d(x_in, "linear", "x", "[N, in]");
  check_2d(w_in, "linear", "weight", "[in, out]");
  const int64_t M = x_in.size(0), K = x_in.size(1), N = w_in.size(1);
  TG_CHECK(w_in.size(0) == K, "linear: weight is [in, out] = ", shape_str(w_in.shape()), " but x ",
           shape_str(x_in.shape()), " has ", K, " features");
  const bool has_bias = bias_in.defined();
  if (has_bias) {
    check_tensor(bias_in, "linear bias", DType::f32, dev);
    TG_CHECK(bias_in.shape() == Shape{N}, "linear: bias must be [", N, "] (one per output), got ",
             shape_str(bias_in.shape()));
  }
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor y = product_out(M, N, K, dev);
  float beta = 0.0f;
  if (has_bias) {
    const Tensor bias = bias_in.contiguous();
    TG_DISPATCH(dev, "linear bias", linear_fill_bias_cpu(M, N, bias.data<float>(), y.data<float>()),
                linear_fill_bias_cuda(M, N, bias.data<float>(), y.data<float>()));
    beta = 1.0f;
  }
  product(dev, Trans::N, Trans::N, M, N, K, x.data<float>(), w.data<float>(), beta,
          y.data<float>());
  if (any_requires_grad({&x_in, &w_in, &bias_in})) {
    const Tensor x_saved = w_in.requires_grad() ? x : Tensor();
    const Tensor w_saved = x_in.requires_grad() ? w : Tensor();
    record({&x_in, &w_in, &bias_in}, {&y}, [x_saved, w_saved, M, K, N](BackwardContext& ctx) {
      product_backward(ctx, x_saved, w_saved, M, K, N);
    });
  }
  return y;
}

}  // namespace tg
