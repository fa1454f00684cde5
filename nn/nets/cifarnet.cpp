// CifarNet: the TensorFlow CIFAR-10 tutorial ConvNet as the TernGrad reference code builds it
// (`cifar10_alexnet`; github.com/wenwei202/terngrad).
//
//   x [N, 3, 24, 24]
//   conv1   64 x 5x5, SAME, ReLU, std 0.05, bias 0.0      -> [N, 64, 24, 24]
//   pool1   max 3x3 / 2, SAME                             -> [N, 64, 12, 12]
//   lrn1    depth_radius 4, bias 1, alpha 0.001/9, beta 0.75
//   conv2   64 x 5x5, SAME, ReLU, std 0.05, bias 0.1      -> [N, 64, 12, 12]
//   lrn2    as lrn1 (LRN before pooling here)
//   pool2   max 3x3 / 2, SAME                             -> [N, 64, 6, 6] -> flatten 2304
//   fc3     384, ReLU, std 0.04, bias 0.1
//   fc4     192, ReLU, std 0.04, bias 0.1
//   logits  num_classes, linear, std 1/192, bias 0
// 1,068,298 parameters at the defaults. L2 weight decay (0.004) on fc3 and fc4 weights only.
#include "nn/layers/conv.h"
#include "nn/layers/dense.h"
#include "nn/layers/pool.h"
#include "nn/nets/net_common.h"
#include "nn/ops/lrn.h"
#include "nn/ops/reshape.h"

namespace tg {

namespace {

class CifarNet final : public Net {
 public:
  CifarNet(const NetOptions& o, const Device& device) {
    ParamBuilder b =
        start(nets_detail::resolve_info("cifarnet", o, 3, 24, 10, device), device, o.seed);

    ConvConfig c;
    c.filters = 64;
    c.kernel_h = c.kernel_w = 5;
    c.init = WeightInit::truncated_normal(0.05f);
    c.decay = false;
    c.bias_init = 0.0f;
    conv1_ = ConvLayer(b, "conv1", info_.in_channels, c);
    c.bias_init = 0.1f;
    conv2_ = ConvLayer(b, "conv2", 64, c);

    const int64_t s =
        pool_.out_size(conv2_.out_size(pool_.out_size(conv1_.out_size(info_.image_size))));
    DenseConfig f;
    f.init = WeightInit::truncated_normal(0.04f);
    f.bias_init = 0.1f;
    f.units = 384;
    fc3_ = DenseLayer(b, "fc3", 64 * s * s, f);
    f.units = 192;
    fc4_ = DenseLayer(b, "fc4", 384, f);
    f.units = info_.num_classes;
    f.init = WeightInit::truncated_normal(1.0f / 192.0f);
    f.bias_init = 0.0f;
    f.decay = false;
    f.relu = false;
    logits_ = DenseLayer(b, "logits", 192, f);
    arena_.allocate(device, o.initialize);
  }

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override {
    check_input(x);
    Tensor h = lrn(max_pool(conv1_.forward(x, ctx.training), pool_), lrn_);
    h = max_pool(lrn(conv2_.forward(h, ctx.training), lrn_), pool_);
    return logits_.forward(fc4_.forward(fc3_.forward(flatten(h))));
  }

 private:
  const PoolSpec pool_{3, 2, Padding::same};
  const LrnOptions lrn_{4, 1.0f, 0.001f / 9.0f, 0.75f};
  ConvLayer conv1_, conv2_;
  DenseLayer fc3_, fc4_, logits_;
};

}  // namespace

std::unique_ptr<Net> nets_detail::make_cifarnet(const NetOptions& o, const Device& device) {
  return std::make_unique<CifarNet>(o, device);
}

}  // namespace tg
