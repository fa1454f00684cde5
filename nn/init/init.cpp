#include "nn/init/init.h"

#include <cmath>
#include <numbers>

#include "nn/core/philox.h"

namespace tg::init {

namespace {

float* host_f32(Tensor& t, const char* who) {
  check_tensor(t, who, DType::f32, Device::cpu());
  TG_CHECK(t.is_contiguous(), who, ": tensor must be contiguous");
  return t.data<float>();
}

// Standard normal draw number `attempt` for element i. Each (i, attempt) owns one Philox block
// (attempt pages follow each other, n blocks apart), so re-draws never disturb other elements.
double std_normal(uint64_t seed, uint64_t stream, uint64_t i, uint64_t attempt, uint64_t n) {
  const Philox4 r = philox_block(seed, stream, i + attempt * n);
  const double u1 = 1.0 - uniform01_double(r.v[0], r.v[1]);  // (0, 1]: log is finite
  const double u2 = uniform01_double(r.v[2], r.v[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

void uniform_(Tensor& t, float lo, float hi, uint64_t seed, uint64_t stream) {
  TG_CHECK(lo < hi, "uniform_: lo (", lo, ") must be < hi (", hi, ")");
  float* p = host_f32(t, "uniform_");
  const int64_t n = t.numel();
  for (int64_t b = 0; b * 4 < n; ++b) {
    const Philox4 r = philox_block(seed, stream, b);
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) p[b * 4 + j] = lo + (hi - lo) * uniform01(r.v[j]);
  }
}

void normal_(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream) {
  TG_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  float* p = host_f32(t, "normal_");
  const uint64_t n = t.numel();
  for (uint64_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(mean + std * std_normal(seed, stream, i, 0, n));
}

void truncated_normal_(Tensor& t, float mean, float std, uint64_t seed, uint64_t stream) {
  TG_CHECK(std >= 0, "truncated_normal_: std must be >= 0, got ", std);
  float* p = host_f32(t, "truncated_normal_");
  const uint64_t n = t.numel();
  for (uint64_t i = 0; i < n; ++i) {
    double z = std_normal(seed, stream, i, 0, n);
    for (uint64_t a = 1; std::fabs(z) > 2.0; ++a) z = std_normal(seed, stream, i, a, n);
    p[i] = static_cast<float>(mean + std * z);
  }
}

void constant_(Tensor& t, float value) {
  host_f32(t, "constant_");
  t.fill_(value);
}

}  // namespace tg::init
