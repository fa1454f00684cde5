// 2-D max and average pooling over NCHW f32 tensors with TensorFlow semantics, differentiable,
// CPU and CUDA. Letters: N batch, C channels, H W input height and width, P Q output height and
// width. Output sizes and pads come from padded_dim() (padding.h): SAME pads the odd extra
// row/column at the bottom/right.
#pragma once

#include <cstdint>

#include "nn/core/tensor.h"
#include "nn/ops/padding.h"

namespace tg {

struct Pool2dOptions {
  int64_t kh = 0, kw = 0;  // window height, width
  int64_t sh = 0, sw = 0;  // stride along H, W
  Padding padding = Padding::valid;
  int64_t pad_h = 0, pad_w = 0;  // only for Padding::explicit_pad; must be < the window
};

// x: [N, C, H, W] f32 on any device -> [N, C, P, Q], a new contiguous tensor on x's device.
// max_pool2d: padded cells never win; the first maximum in row-major window order does, and the
// backward pass routes dy to exactly that input cell.
// avg_pool2d: mean over the window cells inside the image (padding excluded from the count).
// Throws on an undefined/non-f32/non-4-D input, non-positive window or stride, a window larger
// than the input under VALID, or an explicit pad that is negative or not smaller than the window.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt);

}  // namespace tg
