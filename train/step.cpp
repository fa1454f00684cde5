#include "train/step.h"

#include <algorithm>
#include <chrono>

#include "nn/autograd/tape.h"
#include "nn/core/clock.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/profile.h"
#include "nn/ops/elementwise.h"
#include "nn/ops/softmax_xent.h"

namespace tg::train {

TrainStep::TrainStep(Net& net, Optimizer& optimizer, Ema* ema, double weight_decay, uint64_t seed,
                     tern::Compressor* compressor, const StepComm* group,
                     const comm::ReducerOptions& reducer, const tern::AggregateOptions& exchange)
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
  if (!compressor_) return;
  comm::ReducerOptions ro = reducer;
  // A communicator on another device than the net (gloo with CUDA training): the gradients are
  // staged through it after backward, so nothing overlaps. With NCCL the reducer's buckets run
  // on the device's side stream beside backward (comm/reducer.h). Emulated workers reduce
  // after the last backward pass, on this thread.
  staged_ = group_ && group_->comm->device() != net_.device();
  if (staged_ || !group_) ro.overlap = false;
  if (!group_) self_ = comm::make_self_communicator(net_.device());
  comm::Communicator& comm = group_ ? *group_->comm : *self_;
  comm_hook_ = std::make_unique<tern::CompressionHook>(*compressor_, exchange);
  reducer_ = std::make_unique<comm::Reducer>(compressor_->layout(), comm, *comm_hook_, ro);
  overlap_backward_ = reducer_->overlapped();
  const auto& entries = net_.arena().entries();
  for (size_t i = 0; i < entries.size(); ++i)
    slot_of_leaf_[entries[i].param.autograd_meta().get()] = i;
}

TrainStep::~TrainStep() = default;

std::span<const tern::AggregateStats> TrainStep::last_buckets() const {
  if (!comm_hook_) return {};
  return comm_hook_->last_step();
}

std::vector<tern::SlotRange> TrainStep::buckets() const {
  return reducer_ ? reducer_->buckets() : std::vector<tern::SlotRange>{};
}

// The phase times of one step, when asked for: each lap synchronizes the device (so a phase's
// kernels land in it) and adds the time since the last lap to a field of StepTimes.
class PhaseTimer {
 public:
  PhaseTimer(StepTimes* times, const Device& device) : times_(times), device_(device) {
    if (times_) t_ = now();
  }
  void lap(double StepTimes::*field) {
    if (!times_) return;
    const Clock::time_point t = now();
    times_->*field += std::chrono::duration<double>(t - t_).count();
    t_ = t;
  }
  StepTimes* times() const { return times_; }

 private:
  Clock::time_point now() const {
    if (device_.is_cuda()) cuda::synchronize(device_.index);
    return Clock::now();
  }
  StepTimes* times_;
  Device device_;
  Clock::time_point t_{};
};

// One iteration: every local worker's forward and backward pass, the reduction of their
// gradients, the optimizer's update.
void TrainStep::run(const std::vector<HostBatch>& batches, int64_t step, double lr,
                    Tensor& loss_sum, StepTimes* times) {
  const int workers = static_cast<int>(batches.size());
  TG_CHECK(workers >= 1, "train step: no batches");
  TG_CHECK(compressor_ != nullptr || workers == 1, "train step: ", workers,
           " workers need a compressor (method none averages in fp32)");
  PhaseTimer timer(times, net_.device());
  const std::vector<Tensor> local = local_gradients(workers);
  {
    // Each worker's backward pass writes its gradient where the reducer reads it, with no
    // memset before and no copy after; the arena's own buffer is bound again afterwards.
    struct Rebind {
      ParamArena& arena;
      ~Rebind() { arena.bind_grads(Tensor()); }
    } rebind{net_.arena()};
    for (int w = 0; w < workers; ++w) forward_backward(batches[w], step, w, local, loss_sum, timer);
  }
  if (reducer_) reduce(step, local, timer);
  Tensor params = net_.arena().params();
  optimizer_.step(params, reducer_ ? reduced_ : net_.arena().grads(), lr);
  if (ema_) ema_->update(params, step);
  timer.lap(&StepTimes::update_s);
}

// The local gradients the reducer reads: the earlier workers' own buffers (made once), then the
// arena's (the last worker's).
std::vector<Tensor> TrainStep::local_gradients(int workers) {
  const Device dev = net_.device();
  Tensor grads = net_.arena().grads();
  if (compressor_) {
    if (worker_grads_.size() != static_cast<size_t>(workers - 1)) {
      worker_grads_.clear();
      for (int w = 0; w + 1 < workers; ++w)
        worker_grads_.push_back(Tensor::empty({grads.numel()}, DType::f32, dev));
    }
    if (!reduced_.defined()) reduced_ = Tensor::empty({grads.numel()}, DType::f32, dev);
  }
  std::vector<Tensor> local = worker_grads_;
  local.push_back(grads);
  return local;
}

// grad += weight_decay * param for arena entry i, when the net decays it.
void TrainStep::decay(size_t i) {
  if (weight_decay_ == 0 || !net_.decayed()[i]) return;
  const auto& e = net_.arena().entries()[i];
  Tensor g = e.param.grad();
  add_(g, e.param, static_cast<float>(weight_decay_));
}

void TrainStep::forward_backward(const HostBatch& batch, int64_t step, int w,
                                 const std::vector<Tensor>& local, Tensor& loss_sum,
                                 PhaseTimer& timer) {
  const Device dev = net_.device();
  const bool last = static_cast<size_t>(w) + 1 == local.size();
  const int first_worker = group_ ? group_->first_worker : 0;
  const int total_workers = group_ ? group_->total_workers : static_cast<int>(local.size());
  ParamArena& arena = net_.arena();
  arena.bind_grads(last ? Tensor() : local[w]);
  arena.zero_grad_lazily();
  Tensor x = batch.x.to(dev), y = batch.y.to(dev);
  timer.lap(&StepTimes::transfer_s);
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
  add_(loss_sum, loss, 1.0f / static_cast<float>(total_workers));
  timer.lap(&StepTimes::forward_s);
  if (last && overlap_backward_) {
    backward_overlapped(loss, step, local);
  } else {
    backward(loss);
    arena.settle_grads();
    for (size_t i = 0; i < arena.entries().size(); ++i) decay(i);
  }
  if (gradient_hook_) gradient_hook_(step, first_worker + w, local[w]);
  timer.lap(&StepTimes::backward_s);
}

// The last worker's backward pass, each parameter's gradient handed to the reducer (weight
// decay added) as soon as backward has finished it.
void TrainStep::backward_overlapped(const Tensor& loss, int64_t step,
                                    const std::vector<Tensor>& local) {
  ParamArena& arena = net_.arena();
  const size_t slots = arena.entries().size();
  reducer_->begin(step, local, reduced_);
  std::vector<bool> reported(slots, false);
  backward(loss, Tensor(), [&](const AutogradMeta& leaf) {
    const auto it = slot_of_leaf_.find(&leaf);
    if (it == slot_of_leaf_.end()) return;
    // A node that read the leaf but got no output gradient added nothing: zero it now.
    arena.settle_grad(it->second);
    decay(it->second);
    reported[it->second] = true;
    reducer_->mark_ready(it->second);
  });
  // Parameters backward never reached (a zero gradient) still get their weight decay.
  for (size_t i = 0; i < slots; ++i)
    if (!reported[i]) {
      arena.settle_grad(i);
      decay(i);
      reducer_->mark_ready(i);
    }
}

// The local gradients reduced over the group into reduced_ (all of it after backward, or what
// overlapping backward left), staged through the communicator's device when it is not the net's.
void TrainStep::reduce(int64_t step, const std::vector<Tensor>& local, PhaseTimer& timer) {
  if (staged_) {
    std::vector<Tensor> staged;
    for (const Tensor& g : local) staged.push_back(g.to(group_->comm->device()));
    Tensor out = Tensor::empty({reduced_.numel()}, DType::f32, group_->comm->device());
    reducer_->begin(step, staged, out);
    last_reduce_ = reducer_->finish();
    reduced_.copy_from(out);
  } else {
    if (!overlap_backward_) reducer_->begin(step, local, reduced_);
    last_reduce_ = reducer_->finish();
  }
  timer.lap(&StepTimes::reduce_wait_s);
  if (StepTimes* times = timer.times()) {
    // The reduction's own split: encode + reduce is compression, the collectives
    // communication; in one process all of it is compression.
    if (group_) {
      const double compress = tern::compression_seconds(last_buckets());
      times->compress_s += compress;
      times->comm_s += std::max(0.0, last_reduce_.busy_s - compress);
    } else {
      times->compress_s += last_reduce_.busy_s;
    }
  }
}

}  // namespace tg::train
