// Elementwise arithmetic with numpy broadcasting, differentiable, CPU and CUDA.
// Inputs: f32 tensors on one device; the result is a new contiguous tensor of the broadcast
// shape. Throws on dtype/device mismatch or shapes that do not broadcast.
#pragma once

#include "nn/core/tensor.h"

namespace tg {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// x * scale + shift (both scalars).
Tensor affine(const Tensor& x, float scale, float shift);
inline Tensor add_scalar(const Tensor& x, float s) {
  return affine(x, 1.0f, s);
}
inline Tensor mul_scalar(const Tensor& x, float s) {
  return affine(x, s, 0.0f);
}
inline Tensor neg(const Tensor& x) {
  return affine(x, -1.0f, 0.0f);
}

// Sums `g` over the dimensions that broadcasting expanded, giving a tensor of `shape`
// (the backward of broadcasting). Not recorded on the tape.
Tensor sum_to(const Tensor& g, const Shape& shape);

// In-place, never recorded (optimizer updates, gradient bookkeeping): y += alpha * x, y *= s.
// Same shape, dtype f32, same device; y contiguous.
void add_(Tensor& y, const Tensor& x, float alpha = 1.0f);
void scale_(Tensor& y, float s);

}  // namespace tg
