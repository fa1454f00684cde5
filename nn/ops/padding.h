// Spatial padding rules shared by conv2d and the pooling ops, with TensorFlow semantics.
//   VALID:    P = ceil((H - R + 1) / stride), no padding.
//   SAME:     P = ceil(H / stride); pad_total = max((P - 1) * stride + R - H, 0);
//             pad_before = pad_total / 2 (the odd extra pixel goes after: bottom/right).
//   explicit: symmetric `pad` on both sides, P = (H + 2 pad - R) / stride + 1.
#pragma once

#include <algorithm>
#include <cstdint>

#include "nn/core/error.h"

namespace tg {

enum class Padding : uint8_t { same, valid, explicit_pad };

struct Padded1d {
  int64_t out = 0;         // output size P
  int64_t pad_before = 0;  // top / left
  int64_t pad_after = 0;   // bottom / right
};

// One spatial dimension: input `in`, window `k`, `stride`, rule `p` (`pad` only for explicit).
inline Padded1d padded_dim(int64_t in, int64_t k, int64_t stride, Padding p, int64_t pad = 0) {
  TG_CHECK(in > 0 && k > 0 && stride > 0, "padding: input ", in, ", window ", k, ", stride ",
           stride, " must all be positive");
  Padded1d r;
  switch (p) {
    case Padding::valid:
      TG_CHECK(in >= k, "VALID padding: window ", k, " is larger than the input ", in);
      r.out = (in - k + stride) / stride;
      break;
    case Padding::same: {
      r.out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((r.out - 1) * stride + k - in, 0);
      r.pad_before = total / 2;
      r.pad_after = total - r.pad_before;
      break;
    }
    case Padding::explicit_pad:
      TG_CHECK(pad >= 0, "explicit padding must be >= 0, got ", pad);
      TG_CHECK(in + 2 * pad >= k, "explicit padding: window ", k, " larger than padded input ",
               in + 2 * pad);
      r.out = (in + 2 * pad - k) / stride + 1;
      r.pad_before = pad;
      r.pad_after = (r.out - 1) * stride + k - in - pad;  // may be < pad: unused rows
      if (r.pad_after < 0) r.pad_after = 0;
      break;
  }
  return r;
}

}  // namespace tg
