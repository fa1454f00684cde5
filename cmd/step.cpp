#include "cmd/step.h"

#include <chrono>

#include "nn/autograd/tape.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/profile.h"
#include "nn/ops/elementwise.h"
#include "nn/ops/softmax_xent.h"

namespace tg::cli {

TrainStep::TrainStep(Net& net, Optimizer& optimizer, Ema* ema, double weight_decay, uint64_t seed)
    : net_(net), optimizer_(optimizer), ema_(ema), weight_decay_(weight_decay), seed_(seed) {}

void TrainStep::run(const std::vector<HostBatch>& batches, int64_t step, double lr,
                    Tensor& loss_sum, StepTimes* times) {
  const Device dev = net_.device();
  auto clock = [&] {
    if (times && dev.is_cuda()) cuda::synchronize(dev.index);
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const int workers = static_cast<int>(batches.size());
  const float inv_workers = 1.0f / static_cast<float>(workers);
  net_.arena().zero_grad();
  double t = times ? clock() : 0.0;
  auto lap = [&](double StepTimes::*field) {
    if (!times) return;
    const double now = clock();
    times->*field += now - t;
    t = now;
  };
  for (int w = 0; w < workers; ++w) {
    Tensor x = batches[w].x.to(dev), y = batches[w].y.to(dev);
    lap(&StepTimes::transfer_s);
    ForwardContext ctx;
    ctx.training = true;
    ctx.seed = seed_;
    ctx.step = static_cast<uint64_t>(step);
    ctx.worker = static_cast<uint32_t>(w);
    Tensor logits = net_.forward(x, ctx);
    Tensor loss;
    {
      profile::LayerScope scope("loss");
      loss = softmax_cross_entropy(logits, y);
      if (workers > 1) loss = mul_scalar(loss, inv_workers);
    }
    add_(loss_sum, loss, 1.0f);
    lap(&StepTimes::forward_s);
    backward(loss);
    lap(&StepTimes::backward_s);
  }
  if (weight_decay_ > 0) {
    const auto& entries = net_.arena().entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      if (!net_.decayed()[i]) continue;
      Tensor g = entries[i].param.grad();
      add_(g, entries[i].param, static_cast<float>(weight_decay_));
    }
  }
  Tensor params = net_.arena().params();
  optimizer_.step(params, net_.arena().grads(), lr);
  if (ema_) ema_->update(params, step);
  lap(&StepTimes::update_s);
}

}  // namespace tg::cli
