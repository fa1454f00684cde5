#include "nn/layers/param_builder.h"

#include <cmath>

#include "nn/core/philox.h"
#include "nn/init/init.h"

namespace tg {

float WeightInit::normal_std(int64_t fan_in) const {
  switch (kind) {
    case Kind::truncated_normal:
      return value;
    case Kind::variance_scaling:
      TG_CHECK(fan_in > 0, "variance_scaling init needs fan_in > 0, got ", fan_in);
      // TF divides by the truncated normal's std loss: 1.3 ~ 1 / 0.8796^2.
      return static_cast<float>(std::sqrt(1.3 * value / static_cast<double>(fan_in)));
    case Kind::constant:
    case Kind::xavier_uniform:
      return 0.0f;
  }
  return 0.0f;
}

ParamBuilder::ParamBuilder(ParamArena& arena, std::vector<bool>& decayed,
                           std::vector<std::pair<std::string, Tensor>>& buffers, uint64_t seed,
                           const Device& device)
    : arena_(arena), decayed_(decayed), buffers_(buffers), seed_(seed), device_(device) {}

size_t ParamBuilder::add_param(const std::string& name, const Shape& shape, const WeightInit& init,
                               bool decayed, int64_t fan_in, int64_t fan_out) {
  const uint64_t index = arena_.entries().size();
  const uint64_t seed = seed_, stream = rng_stream(RngPurpose::init, index);
  ParamArena::Initializer fn;
  switch (init.kind) {
    case WeightInit::Kind::constant: {
      const float v = init.value;
      fn = [v](Tensor& t) { init::constant_(t, v); };
      break;
    }
    case WeightInit::Kind::truncated_normal:
    case WeightInit::Kind::variance_scaling: {
      const float std = init.normal_std(fan_in);
      TG_CHECK(std >= 0.0f, "parameter '", name, "': init std must be >= 0, got ", std);
      fn = [=](Tensor& t) { init::truncated_normal_(t, 0.0f, std, seed, stream); };
      break;
    }
    case WeightInit::Kind::xavier_uniform: {
      TG_CHECK(fan_in > 0 && fan_out > 0, "parameter '", name,
               "': xavier init needs positive fans, got fan_in ", fan_in, ", fan_out ", fan_out);
      const float a = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
      fn = [=](Tensor& t) { init::uniform_(t, -a, a, seed, stream); };
      break;
    }
  }
  const size_t i = arena_.add(name, shape, std::move(fn));
  decayed_.push_back(decayed);
  return i;
}

Tensor ParamBuilder::add_buffer(const std::string& name, int64_t n, float value) {
  for (const auto& b : buffers_) TG_CHECK(b.first != name, "buffer '", name, "' registered twice");
  Tensor t = Tensor::full({n}, value, DType::f32, device_);
  buffers_.emplace_back(name, t);
  return t;
}

}  // namespace tg
