// VGG-A (VggNet-A, 11 weight layers; Simonyan & Zisserman 2015, configuration A), used by the
// paper only in its throughput model (Figure 5). Built as the TernGrad reference code's
// `vgg_a` (slim models.py) without batch norm:
//
//   x [N, 3, 224, 224]
//   conv1 64 | pool | conv2 128 | pool | conv3_1, conv3_2 256 | pool | conv4_1, conv4_2 512 |
//   pool | conv5_1, conv5_2 512 | pool                   -> [N, 512, 7, 7] -> flatten 25088
//   fc6 4096, ReLU; dropout | fc7 4096, ReLU; dropout | fc8 num_classes (1000), linear
// Convs 3x3 stride 1 SAME + bias + ReLU; pools max 2x2 / 2 VALID. Weights: Xavier (Glorot)
// uniform, biases 0, as the reference's arg scope. L2 weight decay (5e-4) on every weight.
// 132,863,336 parameters at the defaults. Dropout ratio default 0.5.
#include <array>
#include <string>
#include <vector>

#include "nn/layers/conv.h"
#include "nn/layers/dense.h"
#include "nn/layers/dropout.h"
#include "nn/layers/pool.h"
#include "nn/nets/net_common.h"
#include "nn/ops/reshape.h"

namespace tg {

namespace {

struct VggConv {
  const char* name;
  int64_t filters;
  bool pool_after;
};

constexpr std::array<VggConv, 8> kConvs = {{
    {"conv1", 64, true},
    {"conv2", 128, true},
    {"conv3_1", 256, false},
    {"conv3_2", 256, true},
    {"conv4_1", 512, false},
    {"conv4_2", 512, true},
    {"conv5_1", 512, false},
    {"conv5_2", 512, true},
}};

class VggA final : public Net {
 public:
  VggA(const NetOptions& o, const Device& device) {
    const float ratio = nets_detail::resolve_dropout("vgg_a", o, 0.5f);
    ParamBuilder b =
        start(nets_detail::resolve_info("vgg_a", o, 3, 224, 1000, device), device, o.seed);

    ConvConfig c;
    c.kernel_h = c.kernel_w = 3;
    c.init = WeightInit::xavier_uniform();
    int64_t in = info_.in_channels, s = info_.image_size;
    for (size_t i = 0; i < kConvs.size(); ++i) {
      c.filters = kConvs[i].filters;
      convs_[i] = ConvLayer(b, kConvs[i].name, in, c);
      in = c.filters;
      s = convs_[i].out_size(s);
      if (kConvs[i].pool_after) s = pool_.out_size(s);
    }
    DenseConfig f;
    f.init = WeightInit::xavier_uniform();
    f.units = 4096;
    fc6_ = DenseLayer(b, "fc6", in * s * s, f);
    fc7_ = DenseLayer(b, "fc7", 4096, f);
    f.units = info_.num_classes;
    f.relu = false;
    fc8_ = DenseLayer(b, "fc8", 4096, f);
    drop6_ = DropoutLayer(6, ratio);
    drop7_ = DropoutLayer(7, ratio);
    arena_.allocate(device, o.initialize);
  }

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override {
    check_input(x);
    const bool t = ctx.training;
    Tensor h = x;
    for (size_t i = 0; i < kConvs.size(); ++i) {
      h = convs_[i].forward(h, t);
      if (kConvs[i].pool_after) h = max_pool(h, pool_);
    }
    h = drop6_.forward(fc6_.forward(flatten(h)), t, ctx.seed, ctx.worker, ctx.step);
    h = drop7_.forward(fc7_.forward(h), t, ctx.seed, ctx.worker, ctx.step);
    return fc8_.forward(h);
  }

 private:
  const PoolSpec pool_{2, 2, Padding::valid};
  std::array<ConvLayer, kConvs.size()> convs_;
  DenseLayer fc6_, fc7_, fc8_;
  DropoutLayer drop6_, drop7_;
};

}  // namespace

std::unique_ptr<Net> nets_detail::make_vgg_a(const NetOptions& o, const Device& device) {
  return std::make_unique<VggA>(o, device);
}

}  // namespace tg
