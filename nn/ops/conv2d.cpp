#include "nn/ops/conv2d.h"

#include <atomic>
#include <mutex>

#include "nn/autograd/tape.h"
#include "nn/ops/dispatch.h"

namespace tg {

namespace {

std::atomic<bool> g_recording{false};
std::mutex g_recorded_mu;
std::vector<Conv2dShape> g_recorded;

bool same_shape(const Conv2dShape& a, const Conv2dShape& b) {
  return a.N == b.N && a.C == b.C && a.H == b.H && a.W == b.W && a.K == b.K && a.R == b.R &&
         a.S == b.S && a.P == b.P && a.Q == b.Q && a.stride_h == b.stride_h &&
         a.stride_w == b.stride_w && a.pad_top == b.pad_top && a.pad_left == b.pad_left &&
         a.groups == b.groups;
}

Tensor workspace_for(const Conv2dShape& s, const Device& device) {
  if (g_recording.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_recorded_mu);
    bool seen = false;
    for (const Conv2dShape& r : g_recorded) seen = seen || same_shape(r, s);
    if (!seen) g_recorded.push_back(s);
  }
  // The CPU's task path runs on its threads' own scratch: nothing to allocate for it.
  const bool none = device.is_cpu() && !conv2d_cpu_uses_workspace(s);
  return Tensor::empty({none ? 0 : conv2d_workspace_floats(s)}, DType::f32, device);
}

// The SAME/VALID/explicit rule for one dimension, with conv2d's own message for a window that
// does not fit ("h" / "w" names the dimension).
Padded1d conv_dim(int64_t in, int64_t k, int64_t stride, int64_t pad, Padding p, const char* dim) {
  TG_CHECK(stride > 0, "conv2d: stride_", dim, " must be positive, got ", stride);
  if (p == Padding::valid) {
    TG_CHECK(in >= k, "conv2d: VALID padding needs the window to fit: filter ", dim, " = ", k,
             " but x has ", dim, " = ", in);
  } else if (p == Padding::explicit_pad) {
    TG_CHECK(pad >= 0, "conv2d: pad_", dim, " must be >= 0, got ", pad);
    TG_CHECK(in + 2 * pad >= k, "conv2d: filter ", dim, " = ", k,
             " is larger than the padded input ", in, " + 2*", pad);
  }
  return padded_dim(in, k, stride, p, pad);
}

}  // namespace

void conv2d_record_shapes(bool on) {
  std::lock_guard<std::mutex> lock(g_recorded_mu);
  if (on) g_recorded.clear();
  g_recording.store(on, std::memory_order_relaxed);
}

std::vector<Conv2dShape> conv2d_recorded_shapes() {
  std::lock_guard<std::mutex> lock(g_recorded_mu);
  return g_recorded;
}

Conv2dShape conv2d_shape(const Shape& x, const Shape& w, const Conv2dOptions& o) {
  TG_CHECK(x.size() == 4, "conv2d: x must be 4-D [N, C, H, W], got ", shape_str(x));
  TG_CHECK(w.size() == 4, "conv2d: weight must be 4-D [K, C/groups, R, S], got ", shape_str(w));
  const int64_t G = o.groups;
  TG_CHECK(G > 0, "conv2d: groups must be positive, got ", G);
  TG_CHECK(x[0] >= 0 && x[1] > 0 && x[2] > 0 && x[3] > 0,
           "conv2d: x has an empty dimension: ", shape_str(x));
  TG_CHECK(w[0] > 0 && w[1] > 0 && w[2] > 0 && w[3] > 0,
           "conv2d: weight has an empty dimension: ", shape_str(w));
  TG_CHECK(x[1] % G == 0, "conv2d: groups=", G, " does not divide x's ", x[1], " channels");
  TG_CHECK(w[0] % G == 0, "conv2d: groups=", G, " does not divide the weight's ", w[0],
           " output channels");
  TG_CHECK(w[1] == x[1] / G, "conv2d: weight has ", w[1], " input channels per group but x has ",
           x[1], " channels (groups=", G, ")");
  const Padded1d ph = conv_dim(x[2], w[2], o.stride_h, o.pad_h, o.padding, "h");
  const Padded1d pw = conv_dim(x[3], w[3], o.stride_w, o.pad_w, o.padding, "w");
  Conv2dShape s;
  s.N = x[0];
  s.C = x[1];
  s.H = x[2];
  s.W = x[3];
  s.K = w[0];
  s.R = w[2];
  s.S = w[3];
  s.P = ph.out;
  s.Q = pw.out;
  s.stride_h = o.stride_h;
  s.stride_w = o.stride_w;
  s.pad_top = ph.pad_before;
  s.pad_left = pw.pad_before;
  s.groups = G;
  return s;
}

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
              const Conv2dOptions& o) {
  TG_CHECK(x_in.defined(), "conv2d: x is undefined");
  const Device dev = x_in.device();
  check_tensor(x_in, "conv2d x", DType::f32, dev);
  check_tensor(w_in, "conv2d weight", DType::f32, dev);
  const Conv2dShape s = conv2d_shape(x_in.shape(), w_in.shape(), o);
  const bool has_bias = bias_in.defined();
  if (has_bias) {
    check_tensor(bias_in, "conv2d bias", DType::f32, dev);
    TG_CHECK(bias_in.shape() == Shape{s.K}, "conv2d: bias must be [", s.K,
             "] (one per filter), got ", shape_str(bias_in.shape()));
  }
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const Tensor bias = has_bias ? bias_in.contiguous() : Tensor();
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, DType::f32, dev);
  if (s.N > 0) {
    Tensor ws = workspace_for(s, dev);
    const float* b = has_bias ? bias.data<float>() : nullptr;
    TG_DISPATCH(dev, "conv2d",
                conv2d_forward_cpu(s, x.data<float>(), w.data<float>(), b, y.data<float>(),
                                   ws.data<float>()),
                conv2d_forward_cuda(s, x.data<float>(), w.data<float>(), b, y.data<float>(),
                                    ws.data<float>()));
  }
  if (any_requires_grad({&x_in, &w_in, &bias_in})) {
    // Save only what the requested gradients read: dx needs w, dw needs x.
    const Tensor x_saved = w_in.requires_grad() ? x : Tensor();
    const Tensor w_saved = x_in.requires_grad() ? w : Tensor();
    record({&x_in, &w_in, &bias_in}, {&y}, [s, x_saved, w_saved](BackwardContext& ctx) {
      if (!ctx.grad_output(0).defined()) return;  // no gradient reached y: all zero
      const Tensor dy = ctx.grad_output(0).contiguous();
      const Device d = dy.device();
      const bool need_dx = ctx.needs_input_grad(0), need_dw = ctx.needs_input_grad(1),
                 need_db = ctx.needs_input_grad(2);
      Tensor ws;
      if (need_dx || need_dw) ws = workspace_for(s, d);
      if (need_dx) {
        Tensor dx = Tensor::empty({s.N, s.C, s.H, s.W}, DType::f32, d);
        if (s.N > 0) {
          TG_DISPATCH(d, "conv2d backward data",
                      conv2d_backward_data_cpu(s, dy.data<float>(), w_saved.data<float>(),
                                               dx.data<float>(), ws.data<float>()),
                      conv2d_backward_data_cuda(s, dy.data<float>(), w_saved.data<float>(),
                                                dx.data<float>(), ws.data<float>()));
        }
        ctx.accumulate(0, dx);
      }
      if (need_dw || need_db) {
        Tensor dw, db;
        // conv2d_backward_weight_* overwrite dw whole: the weight's own grad when it can be.
        if (need_dw) dw = ctx.grad_buffer(1, {s.K, s.C / s.groups, s.R, s.S}, d);
        if (need_db) db = Tensor::empty({s.K}, DType::f32, d);
        const float* xp = need_dw ? x_saved.data<float>() : nullptr;
        float* dwp = need_dw ? dw.data<float>() : nullptr;
        float* dbp = need_db ? db.data<float>() : nullptr;
        float* wsp = need_dw ? ws.data<float>() : nullptr;
        TG_DISPATCH(d, "conv2d backward weight",
                    conv2d_backward_weight_cpu(s, xp, dy.data<float>(), dwp, dbp, wsp),
                    conv2d_backward_weight_cuda(s, xp, dy.data<float>(), dwp, dbp, wsp));
        if (need_dw) ctx.accumulate(1, dw);
        if (need_db) ctx.accumulate(2, db);
      }
    });
  }
  return y;
}

}  // namespace tg
