// Parameter arena: all parameters of a model in one contiguous f32 buffer and all gradients in
// another, carved into per-tensor views in registration order. Compression and collectives
// work on the flat buffers (or a few buckets of them), never on a hundred small tensors.
//
// Usage: register every parameter with add(), then allocate(device) once. Initializers run on
// the host (so CPU and CUDA runs start bit-identical), then the whole arena moves to `device`
// in one copy.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/core/tensor.h"

namespace tg {

class ParamArena {
 public:
  // Fills a host f32 tensor of the parameter's shape.
  using Initializer = std::function<void(Tensor& host_param)>;

  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset = 0;  // in elements, into the flat buffers
    int64_t numel = 0;
    Initializer init;
    Tensor param;  // view into params(); requires grad; grad() is the view into grads()
  };

  // Registers a parameter; returns its index. Names must be unique. Throws after allocate().
  size_t add(const std::string& name, const Shape& shape, Initializer init);
  // Allocates both buffers on `device`, runs the initializers (unless `initialize` is false: then
  // the parameters are zero, for a caller that overwrites them all, e.g. from a checkpoint),
  // zeroes the gradients.
  void allocate(const Device& device, bool initialize = true);

  bool allocated() const { return params_.defined(); }
  const Tensor& params() const { return params_; }  // flat [total]
  const Tensor& grads() const { return grads_; }    // flat [total]
  int64_t total_numel() const { return total_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Tensor& param(size_t i) const;
  const Tensor& param(const std::string& name) const;
  void zero_grad();  // one memset over the gradient buffer the parameters' grads point at

  // Per-pass gradients without the memset (train/step.cpp, once per emulated worker):
  // zero_grad_lazily() marks every gradient as standing for zero, so the backward pass writes
  // each one instead of adding into it (nn/autograd/tape.h: grad_buffer); settle_grad(i) /
  // settle_grads() zero the ones backward never reached. Between the two, grads hold stale
  // values: read a gradient only after backward reported it or after settling it.
  void zero_grad_lazily();
  void settle_grad(size_t i);
  void settle_grads();
  // Points the parameters' grads at `flat` ([total] f32 on the arena's device) instead of the
  // arena's own buffer, so a backward pass writes another worker's gradient where it will be
  // read from; bind_grads(Tensor()) points them back. grads() is always the arena's own buffer.
  void bind_grads(const Tensor& flat);

 private:
  std::vector<Entry> entries_;
  int64_t total_ = 0;
  Tensor params_, grads_;
  Tensor bound_;  // bind_grads(): the buffer the grads point at instead of grads_ (or none)
};

}  // namespace tg
