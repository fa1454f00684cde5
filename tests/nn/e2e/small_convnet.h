// A small conv net that touches most ops of the engine, used by the end-to-end tests:
//   x [8,3,12,12] -> {conv3x3 (3->6), conv1x1 (3->2)} -> concat (8 ch) -> batch_norm (offset only)
//   -> relu -> lrn -> max_pool 2x2/2 SAME -> flatten (288) -> dropout 0.1 -> linear 288->4
//   -> softmax cross-entropy + 5e-4 * sum of squared weights / 2
// Parameters live in one ParamArena; one SGD step is a single axpy over the flat buffers.
#pragma once

#include "nn/autograd/arena.h"
#include "nn/autograd/tape.h"
#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "nn/ops/batchnorm.h"
#include "nn/ops/concat.h"
#include "nn/ops/conv2d.h"
#include "nn/ops/dropout.h"
#include "nn/ops/elementwise.h"
#include "nn/ops/linear.h"
#include "nn/ops/lrn.h"
#include "nn/ops/pool2d.h"
#include "nn/ops/reduce.h"
#include "nn/ops/relu.h"
#include "nn/ops/reshape.h"
#include "nn/ops/softmax_xent.h"

namespace tg::testing {

class SmallConvNet {
 public:
  static constexpr int64_t kBatch = 8, kClasses = 4;

  explicit SmallConvNet(const Device& device, uint64_t seed = 123) : seed_(seed) {
    auto tn = [seed](float std, uint64_t id) {
      return [=](Tensor& t) {
        init::truncated_normal_(t, 0.f, std, seed, rng_stream(RngPurpose::init, id));
      };
    };
    auto zero = [](Tensor& t) { init::constant_(t, 0.f); };
    arena_.add("conv_a/w", {6, 3, 3, 3}, tn(0.2f, 1));
    arena_.add("conv_a/b", {6}, zero);
    arena_.add("conv_b/w", {2, 3, 1, 1}, tn(0.3f, 2));
    arena_.add("bn/beta", {8}, zero);
    arena_.add("fc/w", {288, kClasses}, tn(0.05f, 3));
    arena_.add("fc/b", {kClasses}, zero);
    arena_.allocate(device);
    moving_mean_ = Tensor::zeros({8}, DType::f32, device);
    moving_var_ = Tensor::full({8}, 1.0, DType::f32, device);
  }

  // Mean loss of the batch (scalar tensor); records on the tape.
  Tensor loss(const Tensor& x, const Tensor& labels, uint64_t step) {
    Conv2dOptions same;  // stride 1, SAME
    Tensor a = conv2d(x, p("conv_a/w"), p("conv_a/b"), same);
    Tensor b = conv2d(x, p("conv_b/w"), Tensor(), same);
    Tensor h = concat({a, b}, 1);
    h = batch_norm(h, Tensor(), p("bn/beta"), moving_mean_, moving_var_, /*training=*/true);
    h = relu(h);
    h = lrn(h, LrnOptions{2, 2.0f, 1e-4f, 0.75f});
    Pool2dOptions pool;
    pool.kh = pool.kw = pool.sh = pool.sw = 2;
    pool.padding = Padding::same;
    h = max_pool2d(h, pool);
    h = flatten(h);
    h = dropout(h, 0.1f, /*training=*/true, seed_, rng_stream(RngPurpose::dropout, 0, 0, step));
    Tensor logits = linear(h, p("fc/w"), p("fc/b"));
    Tensor wd =
        add(sum_squares(p("conv_a/w")), add(sum_squares(p("conv_b/w")), sum_squares(p("fc/w"))));
    return add(softmax_cross_entropy(logits, labels), mul_scalar(wd, 5e-4f / 2));
  }

  // One SGD step on the flat arena: params -= lr * grads.
  float sgd_step(const Tensor& x, const Tensor& labels, uint64_t step, float lr) {
    arena_.zero_grad();
    Tensor l = loss(x, labels, step);
    backward(l);
    Tensor params = arena_.params();
    add_(params, arena_.grads(), -lr);
    return l.item<float>();
  }

  const ParamArena& arena() const { return arena_; }

 private:
  const Tensor& p(const char* name) const { return arena_.param(name); }

  uint64_t seed_;
  ParamArena arena_;
  Tensor moving_mean_, moving_var_;
};

// The fixed synthetic batch: inputs uniform in [-1, 1), labels 0..3 cycling.
inline std::pair<Tensor, Tensor> synthetic_batch() {
  Tensor x = Tensor::empty({SmallConvNet::kBatch, 3, 12, 12});
  init::uniform_(x, -1.f, 1.f, 7, rng_stream(RngPurpose::data, 0));
  std::vector<int32_t> labels(SmallConvNet::kBatch);
  for (int64_t i = 0; i < SmallConvNet::kBatch; ++i)
    labels[i] = static_cast<int32_t>(i % SmallConvNet::kClasses);
  return {x, Tensor::from_vector(labels, {SmallConvNet::kBatch})};
}

}  // namespace tg::testing
