// GoogLeNet: TF-slim's Inception-v1 (inception_v1.py) as the TernGrad reference code builds it
// (`googlenet` in its slim models.py: inception_v1 under inception_utils.inception_arg_scope).
// No auxiliary classifiers.
//
//   x [N, 3, 224, 224]
//   Conv2d_1a_7x7    64 x 7x7 / 2                       -> [N, 64, 112, 112]
//   MaxPool_2a_3x3   max 3x3 / 2                        -> [N, 64, 56, 56]
//   Conv2d_2b_1x1    64 x 1x1
//   Conv2d_2c_3x3    192 x 3x3                          -> [N, 192, 56, 56]
//   MaxPool_3a_3x3   max 3x3 / 2                        -> [N, 192, 28, 28]
//   Mixed_3b, Mixed_3c                                  -> [N, 480, 28, 28]
//   MaxPool_4a_3x3   max 3x3 / 2                        -> [N, 480, 14, 14]
//   Mixed_4b .. Mixed_4f                                -> [N, 832, 14, 14]
//   MaxPool_5a_2x2   max 2x2 / 2                        -> [N, 832, 7, 7]
//   Mixed_5b, Mixed_5c                                  -> [N, 1024, 7, 7]
//   logits: avg pool 7x7 VALID -> dropout -> Conv2d_0c_1x1 (num_classes, bias, no BN/ReLU)
//           -> squeeze                                  -> [N, 1001]
// Every conv and pool is stride 1 SAME unless stated. A Mixed block concatenates (channels) four
// branches: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 | max 3x3 / 1 -> 1x1.
//
// Every conv except the classifier: no bias, BN (batch statistics when training, decay 0.9997,
// eps 0.001, offset only: inception_arg_scope's batch_norm_scale=False), ReLU.
// Initialization: inception_v1_base wraps its layers in its own arg_scope with
// weights_initializer=trunc_normal(0.01), which overrides inception_arg_scope's
// variance_scaling_initializer() for every conv of the base; only the classifier conv, built
// outside the base, gets the variance-scaling init (factor 2, FAN_IN, truncated normal with
// std sqrt(1.3 * 2 / 1024) ~ 0.0504) and a zero bias. L2 weight decay (4e-5 in the recipe) on
// every conv weight, classifier included (inception_arg_scope's weights_regularizer).
//
// Parameters at the defaults: 6,618,649 = 5,592,624 in the base (conv weights + one BN offset
// per filter) + 1024 * 1001 + 1001 for the classifier. Dropout ratio default 0.2 (slim's
// dropout_keep_prob 0.8). The final average pool covers the whole remaining feature map (7x7 at
// 224), so other image sizes (multiples of 32 give exact halvings) also yield [N, num_classes].
#include <array>
#include <string>
#include <vector>

#include "nn/layers/conv.h"
#include "nn/layers/dropout.h"
#include "nn/layers/pool.h"
#include "nn/nets/net_common.h"
#include "nn/ops/concat.h"
#include "nn/ops/reshape.h"

namespace tg {

namespace {

// Filters of one Mixed block: branch 0 (1x1), branch 1 (1x1 reduce, 3x3), branch 2 (1x1
// reduce, 3x3), branch 3 (pool projection 1x1).
struct MixedSpec {
  const char* name;
  int64_t b0, b1_reduce, b1, b2_reduce, b2, b3;
  const char* b2_conv_name;  // slim names Mixed_5b's second branch-2 conv "Conv2d_0a_3x3"
};

class Mixed {
 public:
  Mixed() = default;
  Mixed(ParamBuilder& b, int64_t in, const MixedSpec& m, ConvConfig c) {
    const std::string p = m.name;
    auto conv = [&](const std::string& name, int64_t cin, int64_t filters, int64_t k) {
      return ConvLayer(b, p + "/" + name, cin, c.shaped(filters, k));
    };
    b0_ = conv("Branch_0/Conv2d_0a_1x1", in, m.b0, 1);
    b1a_ = conv("Branch_1/Conv2d_0a_1x1", in, m.b1_reduce, 1);
    b1b_ = conv("Branch_1/Conv2d_0b_3x3", m.b1_reduce, m.b1, 3);
    b2a_ = conv("Branch_2/Conv2d_0a_1x1", in, m.b2_reduce, 1);
    b2b_ = conv(std::string("Branch_2/") + m.b2_conv_name, m.b2_reduce, m.b2, 3);
    b3_ = conv("Branch_3/Conv2d_0b_1x1", in, m.b3, 1);
    out_ = m.b0 + m.b1 + m.b2 + m.b3;
  }

  Tensor forward(const Tensor& x, bool t) const {
    static const PoolSpec kPool{3, 1, Padding::same};
    return concat({b0_.forward(x, t), b1b_.forward(b1a_.forward(x, t), t),
                   b2b_.forward(b2a_.forward(x, t), t), b3_.forward(max_pool(x, kPool), t)},
                  1);
  }
  int64_t out_channels() const { return out_; }

 private:
  ConvLayer b0_, b1a_, b1b_, b2a_, b2b_, b3_;
  int64_t out_ = 0;
};

constexpr std::array<MixedSpec, 9> kMixed = {{
    {"Mixed_3b", 64, 96, 128, 16, 32, 32, "Conv2d_0b_3x3"},
    {"Mixed_3c", 128, 128, 192, 32, 96, 64, "Conv2d_0b_3x3"},
    {"Mixed_4b", 192, 96, 208, 16, 48, 64, "Conv2d_0b_3x3"},
    {"Mixed_4c", 160, 112, 224, 24, 64, 64, "Conv2d_0b_3x3"},
    {"Mixed_4d", 128, 128, 256, 24, 64, 64, "Conv2d_0b_3x3"},
    {"Mixed_4e", 112, 144, 288, 32, 64, 64, "Conv2d_0b_3x3"},
    {"Mixed_4f", 256, 160, 320, 32, 128, 128, "Conv2d_0b_3x3"},
    {"Mixed_5b", 256, 160, 320, 32, 128, 128, "Conv2d_0a_3x3"},
    {"Mixed_5c", 384, 192, 384, 48, 128, 128, "Conv2d_0b_3x3"},
}};

class GoogLeNet final : public Net {
 public:
  GoogLeNet(const NetOptions& o, const Device& device) {
    const float ratio = nets_detail::resolve_dropout("googlenet", o, 0.2f);
    ParamBuilder b =
        start(nets_detail::resolve_info("googlenet", o, 3, 224, 1001, device), device, o.seed);

    ConvConfig c;
    c.init = WeightInit::truncated_normal(0.01f);
    c.batch_norm = true;
    auto conv = [&](const char* name, int64_t in, int64_t filters, int64_t k, int64_t stride) {
      return ConvLayer(b, name, in, c.shaped(filters, k, stride));
    };
    conv1a_ = conv("Conv2d_1a_7x7", info_.in_channels, 64, 7, 2);
    conv2b_ = conv("Conv2d_2b_1x1", 64, 64, 1, 1);
    conv2c_ = conv("Conv2d_2c_3x3", 64, 192, 3, 1);
    int64_t in = 192;
    for (size_t i = 0; i < kMixed.size(); ++i) {
      mixed_[i] = Mixed(b, in, kMixed[i], c);
      in = mixed_[i].out_channels();
    }
    // Spatial size after the stem and the three reductions (SAME: ceil halvings).
    int64_t s = pool3_.out_size(pool3_.out_size(conv1a_.out_size(info_.image_size)));
    s = pool2_.out_size(pool3_.out_size(s));
    avg_ = PoolSpec{s, 1, Padding::valid};

    ConvConfig l;
    l.filters = info_.num_classes;
    l.kernel_h = l.kernel_w = 1;
    l.init = WeightInit::variance_scaling(2.0f);
    l.bias = true;
    l.bias_init = 0.0f;
    l.relu = false;
    logits_ = ConvLayer(b, "logits/Conv2d_0c_1x1", in, l);
    drop_ = DropoutLayer(0, ratio);
    arena_.allocate(device, o.initialize);
  }

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override {
    check_input(x);
    const bool t = ctx.training;
    Tensor h = max_pool(conv1a_.forward(x, t), pool3_);
    h = max_pool(conv2c_.forward(conv2b_.forward(h, t), t), pool3_);
    for (size_t i = 0; i < mixed_.size(); ++i) {
      if (i == 2) h = max_pool(h, pool3_);  // MaxPool_4a_3x3
      if (i == 7) h = max_pool(h, pool2_);  // MaxPool_5a_2x2
      h = mixed_[i].forward(h, t);
    }
    h = drop_.forward(avg_pool(h, avg_), t, ctx.seed, ctx.worker, ctx.step);
    return flatten(logits_.forward(h, t));  // [N, K, 1, 1] -> [N, K]
  }

 private:
  const PoolSpec pool3_{3, 2, Padding::same};
  const PoolSpec pool2_{2, 2, Padding::same};
  PoolSpec avg_;
  ConvLayer conv1a_, conv2b_, conv2c_, logits_;
  std::array<Mixed, kMixed.size()> mixed_;
  DropoutLayer drop_;
};

}  // namespace

std::unique_ptr<Net> nets_detail::make_googlenet(const NetOptions& o, const Device& device) {
  return std::make_unique<GoogLeNet>(o, device);
}

}  // namespace tg
