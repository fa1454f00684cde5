// LeNet for MNIST as the TernGrad reference code builds it (github.com/wenwei202/terngrad): the
// Caffe LeNet variant with SAME padding and ReLU after the convolutions.
//
//   x [N, 1, 28, 28]
//   conv1   20 x 5x5, SAME, ReLU, std 0.05, bias 0        -> [N, 20, 28, 28]
//   pool1   max 2x2 / 2, SAME                             -> [N, 20, 14, 14]
//   conv2   50 x 5x5, SAME, ReLU, std 0.05, bias 0        -> [N, 50, 14, 14]
//   pool2   max 2x2 / 2, SAME                             -> [N, 50, 7, 7] -> flatten 2450
//   fc3     500, ReLU, std 0.048, bias 0                  -> [N, 500]
//   logits  num_classes, linear, std 0.0767, bias 0       -> [N, 10]
// 1,256,080 parameters at the defaults; L2 weight decay (5e-4 in the recipe) on all four weights.
// No dropout, BN or LRN. Other image sizes / channel counts resize the flatten accordingly.
#include "nn/layers/conv.h"
#include "nn/layers/dense.h"
#include "nn/layers/pool.h"
#include "nn/nets/net_common.h"
#include "nn/ops/reshape.h"

namespace tg {

namespace {

class LeNet final : public Net {
 public:
  LeNet(const NetOptions& o, const Device& device) {
    ParamBuilder b =
        start(nets_detail::resolve_info("lenet", o, 1, 28, 10, device), device, o.seed);

    ConvConfig c;
    c.kernel_h = c.kernel_w = 5;
    c.init = WeightInit::truncated_normal(0.05f);
    c.filters = 20;
    conv1_ = ConvLayer(b, "conv1", info_.in_channels, c);
    c.filters = 50;
    conv2_ = ConvLayer(b, "conv2", 20, c);

    const int64_t s =
        pool_.out_size(conv2_.out_size(pool_.out_size(conv1_.out_size(info_.image_size))));
    DenseConfig f;
    f.units = 500;
    f.init = WeightInit::truncated_normal(0.048f);
    fc3_ = DenseLayer(b, "fc3", 50 * s * s, f);
    f.units = info_.num_classes;
    f.init = WeightInit::truncated_normal(0.0767f);
    f.relu = false;
    logits_ = DenseLayer(b, "logits", 500, f);
    arena_.allocate(device, o.initialize);
  }

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override {
    check_input(x);
    Tensor h = max_pool(conv1_.forward(x, ctx.training), pool_);
    h = max_pool(conv2_.forward(h, ctx.training), pool_);
    return logits_.forward(fc3_.forward(flatten(h)));
  }

 private:
  const PoolSpec pool_{2, 2, Padding::same};
  ConvLayer conv1_, conv2_;
  DenseLayer fc3_, logits_;
};

}  // namespace

std::unique_ptr<Net> nets_detail::make_lenet(const NetOptions& o, const Device& device) {
  return std::make_unique<LeNet>(o, device);
}

}  // namespace tg
