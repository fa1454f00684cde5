#include "train/step.h"

#include <algorithm>
#include <chrono>

#include "nn/autograd/tape.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/profile.h"
#include "nn/ops/elementwise.h"
#include "nn/ops/softmax_xent.h"

namespace tg::train {

TrainStep::TrainStep(Net& net, Optimizer& optimizer, Ema* ema, double weight_decay, uint64_t seed,
                     tern::Compressor* compressor, const StepComm* group)
    : net_(net),
      optimizer_(optimizer),
      ema_(ema),
      weight_decay_(weight_decay),
      seed_(seed),
      compressor_(compressor) {
  if (group) {
    TG_CHECK(group->comm != nullptr && compressor != nullptr,
             "train step: a distributed step needs a communicator and a compressor");
    group_ = *group;
  }
}

void TrainStep::run(const std::vector<HostBatch>& batches, int64_t step, double lr,
                    Tensor& loss_sum, StepTimes* times) {
  const Device dev = net_.device();
  auto clock = [&] {
    if (times && dev.is_cuda()) cuda::synchronize(dev.index);
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const int workers = static_cast<int>(batches.size());
  TG_CHECK(workers >= 1, "train step: no batches");
  TG_CHECK(compressor_ != nullptr || workers == 1,
           "train step: ", workers, " workers need a compressor (method none averages in fp32)");
  const int first_worker = group_ ? group_->first_worker : 0;
  const int total_workers = group_ ? group_->total_workers : workers;
  const float inv_workers = 1.0f / static_cast<float>(total_workers);
  Tensor grads = net_.arena().grads();
  double t = times ? clock() : 0.0;
  auto lap = [&](double StepTimes::*field) {
    if (!times) return;
    const double now = clock();
    times->*field += now - t;
    t = now;
  };
  if (compressor_ && worker_grads_.size() != static_cast<size_t>(workers)) {
    worker_grads_.clear();
    for (int w = 0; w < workers; ++w)
      worker_grads_.push_back(Tensor::empty({grads.numel()}, DType::f32, dev));
  }
  for (int w = 0; w < workers; ++w) {
    net_.arena().zero_grad();
    Tensor x = batches[w].x.to(dev), y = batches[w].y.to(dev);
    lap(&StepTimes::transfer_s);
    ForwardContext ctx;
    ctx.training = true;
    ctx.seed = seed_;
    ctx.step = static_cast<uint64_t>(step);
    ctx.worker = static_cast<uint32_t>(first_worker + w);
    Tensor logits = net_.forward(x, ctx);
    Tensor loss;
    {
      profile::LayerScope scope("loss");
      loss = softmax_cross_entropy(logits, y);
    }
    add_(loss_sum, loss, inv_workers);
    lap(&StepTimes::forward_s);
    backward(loss);
    if (weight_decay_ > 0) {
      const auto& entries = net_.arena().entries();
      for (size_t i = 0; i < entries.size(); ++i) {
        if (!net_.decayed()[i]) continue;
        Tensor g = entries[i].param.grad();
        add_(g, entries[i].param, static_cast<float>(weight_decay_));
      }
    }
    if (hook_) hook_(step, first_worker + w, grads);
    if (compressor_) worker_grads_[w].copy_from(grads);
    lap(&StepTimes::backward_s);
  }
  if (compressor_ && !group_) {
    tern::aggregate_emulated(*compressor_, worker_grads_, step, grads);
    lap(&StepTimes::compress_s);
  } else if (group_) {
    aggregate_across(step);
    if (times) {
      // The aggregation's own split: encode + reduce is compression, the rest communication.
      const double now = clock();
      const double comp = last_aggregate_.encode_s + last_aggregate_.reduce_s;
      times->compress_s += std::min(comp, now - t);
      times->comm_s += std::max(0.0, now - t - comp);
      times->comm_exposed_s += std::max(0.0, now - t - comp);  // nothing overlaps yet
      t = now;
    }
  }
  Tensor params = net_.arena().params();
  optimizer_.step(params, grads, lr);
  if (ema_) ema_->update(params, step);
  lap(&StepTimes::update_s);
}

void TrainStep::aggregate_across(int64_t step) {
  comm::Communicator& comm = *group_->comm;
  Tensor grads = net_.arena().grads();
  if (comm.device() == grads.device()) {
    last_aggregate_ = comm::aggregate_distributed(*compressor_, comm, worker_grads_, step, grads,
                                                  group_->options);
    return;
  }
  // A communicator on another device (gloo with CUDA training): stage through it.
  std::vector<Tensor> staged;
  for (const Tensor& g : worker_grads_) staged.push_back(g.to(comm.device()));
  Tensor out = Tensor::empty({grads.numel()}, DType::f32, comm.device());
  last_aggregate_ =
      comm::aggregate_distributed(*compressor_, comm, staged, step, out, group_->options);
  grads.copy_from(out);
}

}  // namespace tg::train
