#include "nn/core/shape.h"

#include <algorithm>

#include "nn/core/error.h"

namespace tg {

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  // Shapes can come from files and configs (a checkpoint's header, model.num_classes): a product
  // that overflows is an error, never undefined behaviour.
  for (int64_t d : s)
    TG_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(s),
             " has more elements than int64 can count");
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TG_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  TG_CHECK(static_cast<int>(n) <= kMaxDims, "broadcast result has ", n, " dimensions; at most ",
           kMaxDims, " are supported");
  return out;
}

}  // namespace tg
