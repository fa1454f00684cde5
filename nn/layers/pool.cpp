#include "nn/layers/pool.h"
#include "nn/core/profile.h"

#include "nn/ops/pool2d.h"

namespace tg {

namespace {
Pool2dOptions options(const PoolSpec& p) {
  Pool2dOptions o;
  o.kh = o.kw = p.kernel;
  o.sh = o.sw = p.stride;
  o.padding = p.padding;
  return o;
}
}  // namespace

int64_t PoolSpec::out_size(int64_t in) const {
  return padded_dim(in, kernel, stride, padding).out;
}

Tensor max_pool(const Tensor& x, const PoolSpec& p) {
  profile::LayerScope scope("max_pool");
  return max_pool2d(x, options(p));
}

Tensor avg_pool(const Tensor& x, const PoolSpec& p) {
  profile::LayerScope scope("avg_pool");
  return avg_pool2d(x, options(p));
}

}  // namespace tg
