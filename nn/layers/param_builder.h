// ParamBuilder: how a network's layers register their parameters and buffers.
//
// A layer asks the builder for each parameter (name, shape, initializer, whether the recipe's L2
// weight decay applies); the builder appends it to the net's ParamArena and its `decayed` flags,
// and binds the initializer to a reproducible Philox stream: parameter i of a net built with seed
// s is drawn from stream rng_stream(RngPurpose::init, i) under key s, so the same (net, seed)
// gives bit-identical parameters on every machine and device (the arena initializes on the host).
// Buffers (batch-norm moving statistics) are plain tensors on the net's device, named in the
// net's buffer list.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/autograd/arena.h"
#include "nn/core/tensor.h"

namespace tg {

// How a weight tensor starts. The fan sizes are those of TensorFlow: for a conv kernel
// (TF [R, S, Cin, Cout], ours [K, C/groups, R, S]) fan_in = R*S*C/groups, fan_out = R*S*K; for a
// dense weight [in, out] fan_in = in, fan_out = out.
struct WeightInit {
  enum class Kind : uint8_t {
    constant,          // every element = value
    truncated_normal,  // TF truncated_normal_initializer(0, value): redraw beyond 2 std
    variance_scaling,  // tf.contrib.layers.variance_scaling_initializer(factor=value, FAN_IN,
                       // uniform=False): truncated normal, std = sqrt(1.3 * factor / fan_in)
    xavier_uniform     // tf.contrib.layers.xavier_initializer(): U(-a, a),
                       // a = sqrt(6 / (fan_in + fan_out))
  };
  Kind kind = Kind::constant;
  float value = 0.0f;

  static WeightInit constant(float v) { return {Kind::constant, v}; }
  static WeightInit truncated_normal(float std) { return {Kind::truncated_normal, std}; }
  static WeightInit variance_scaling(float factor = 2.0f) {
    return {Kind::variance_scaling, factor};
  }
  static WeightInit xavier_uniform() { return {Kind::xavier_uniform, 0.0f}; }

  // The std of the normal a truncated-normal kind draws from (before truncation); 0 for the
  // other kinds. Throws if a fan is not positive for a kind that needs it.
  float normal_std(int64_t fan_in) const;
};

class ParamBuilder {
 public:
  // All references must outlive the builder (they are the net's members).
  ParamBuilder(ParamArena& arena, std::vector<bool>& decayed,
               std::vector<std::pair<std::string, Tensor>>& buffers, uint64_t seed,
               const Device& device);

  // Appends a parameter to the arena and its decay flag; returns its arena index. `fan_in` and
  // `fan_out` feed the fan-dependent initializers. Throws on a duplicate name, a bad init value
  // (negative std, non-positive fan where one is needed) or after the arena is allocated.
  size_t add_param(const std::string& name, const Shape& shape, const WeightInit& init,
                   bool decayed, int64_t fan_in = 0, int64_t fan_out = 0);

  // A contiguous f32 buffer [n] on the net's device filled with `value`, appended to the net's
  // buffer list under `name`. Returns the tensor (a handle sharing the listed storage).
  Tensor add_buffer(const std::string& name, int64_t n, float value);

  const ParamArena& arena() const { return arena_; }
  const Device& device() const { return device_; }

 private:
  ParamArena& arena_;
  std::vector<bool>& decayed_;
  std::vector<std::pair<std::string, Tensor>>& buffers_;
  uint64_t seed_;
  Device device_;
};

}  // namespace tg
