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
  // Allocates both buffers on `device`, runs the initializers, zeroes the gradients.
  void allocate(const Device& device);

  bool allocated() const { return params_.defined(); }
  const Tensor& params() const { return params_; }  // flat [total]
  const Tensor& grads() const { return grads_; }    // flat [total]
  int64_t total_numel() const { return total_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Tensor& param(size_t i) const;
  const Tensor& param(const std::string& name) const;
  void zero_grad();  // one memset over the whole gradient buffer

 private:
  std::vector<Entry> entries_;
  int64_t total_ = 0;
  Tensor params_, grads_;
};

}  // namespace tg
