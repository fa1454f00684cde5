// Shared by the conv2d CPU and CUDA tests: Conv2dOptions in one expression.
#pragma once

#include "nn/ops/conv2d.h"

namespace tg::testing {

inline Conv2dOptions conv_opts(int64_t sh, int64_t sw, Padding p, int64_t ph = 0, int64_t pw = 0,
                               int64_t groups = 1) {
  Conv2dOptions o;
  o.stride_h = sh;
  o.stride_w = sw;
  o.padding = p;
  o.pad_h = ph;
  o.pad_w = pw;
  o.groups = groups;
  return o;
}

}  // namespace tg::testing
