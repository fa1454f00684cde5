// AlexNet as the TernGrad reference code builds it (`alexnet` in its slim models.py):
// Krizhevsky's two-column AlexNet with batch norm on every convolution. Each column is
// built as in the reference, with its own parameters (conv1_1 / conv1_2, ...), so each tensor
// gets its own TernGrad scaler.
//
//   x [N, 3, 224, 224]
//   conv1_c  48 x 11x11 / 4, SAME, on the full image; BN + ReLU; LRN    -> [N, 48, 56, 56]  x2
//   pool1_c  max 3x3 / 2, VALID                                         -> [N, 48, 27, 27]  x2
//   conv2_c  128 x 5x5 on its own column; BN + ReLU; LRN                -> [N, 128, 27, 27] x2
//   pool2_c  max 3x3 / 2, VALID; concat the columns                     -> [N, 256, 13, 13]
//   conv3_c  192 x 3x3, each on the full 256-channel concat; BN + ReLU  -> [N, 192, 13, 13] x2
//   conv4_c  192 x 3x3 on its own column; BN + ReLU                     -> [N, 192, 13, 13] x2
//   conv5_c  128 x 3x3 on its own column; BN + ReLU                     -> [N, 128, 13, 13] x2
//   pool5_c  max 3x3 / 2, VALID; concat; flatten                        -> [N, 9216]
//   fc6      4096, ReLU, std 0.005, bias 0.1; dropout
//   fc7      4096, ReLU, std 0.005, bias 0.1; dropout
//   logits   num_classes (1001), linear, std 0.01, bias 0
// (c = 1, 2 the column.) Conv weights std 0.01; BN: batch statistics when training, decay
// 0.9997, eps 0.001, offset (beta) only, no conv bias. LRN: TF defaults depth_radius 2, bias 2,
// alpha 1e-4, beta 0.75. L2 weight decay (5e-4) on every conv and fc weight, logits included.
// 60,969,321 parameters at the defaults. Dropout ratio default 0.5 (the paper's TernGrad runs
// use 0.2 through NetOptions::dropout_ratio).
//
// The flatten is channel-major (C, H, W) where TF's is (H, W, C): a fixed permutation of fc6's
// rows, immaterial for training from scratch.
#include <array>

#include "nn/layers/conv.h"
#include "nn/layers/dense.h"
#include "nn/layers/dropout.h"
#include "nn/layers/pool.h"
#include "nn/nets/net_common.h"
#include "nn/ops/concat.h"
#include "nn/ops/lrn.h"
#include "nn/ops/reshape.h"

namespace tg {

namespace {

class AlexNet final : public Net {
 public:
  AlexNet(const NetOptions& o, const Device& device) {
    const float ratio = nets_detail::resolve_dropout("alexnet", o, 0.5f);
    ParamBuilder b =
        start(nets_detail::resolve_info("alexnet", o, 3, 224, 1001, device), device, o.seed);

    ConvConfig c;
    c.init = WeightInit::truncated_normal(0.01f);
    c.batch_norm = true;
    auto conv = [&](const char* name, int64_t in, int64_t filters, int64_t k, int64_t stride) {
      return ConvLayer(b, name, in, c.shaped(filters, k, stride));
    };
    // Registration order = the reference's creation order (column 1, then column 2, per layer).
    conv1_ = {conv("conv1_1", info_.in_channels, 48, 11, 4),
              conv("conv1_2", info_.in_channels, 48, 11, 4)};
    conv2_ = {conv("conv2_1", 48, 128, 5, 1), conv("conv2_2", 48, 128, 5, 1)};
    conv3_ = {conv("conv3_1", 256, 192, 3, 1), conv("conv3_2", 256, 192, 3, 1)};
    conv4_ = {conv("conv4_1", 192, 192, 3, 1), conv("conv4_2", 192, 192, 3, 1)};
    conv5_ = {conv("conv5_1", 192, 128, 3, 1), conv("conv5_2", 192, 128, 3, 1)};

    int64_t s =
        pool_.out_size(conv2_[0].out_size(pool_.out_size(conv1_[0].out_size(info_.image_size))));
    s = pool_.out_size(conv5_[0].out_size(conv4_[0].out_size(conv3_[0].out_size(s))));
    DenseConfig f;
    f.units = 4096;
    f.init = WeightInit::truncated_normal(0.005f);
    f.bias_init = 0.1f;
    fc6_ = DenseLayer(b, "fc6", 256 * s * s, f);
    fc7_ = DenseLayer(b, "fc7", 4096, f);
    f.units = info_.num_classes;
    f.init = WeightInit::truncated_normal(0.01f);
    f.bias_init = 0.0f;
    f.relu = false;
    logits_ = DenseLayer(b, "logits", 4096, f);
    drop6_ = DropoutLayer(6, ratio);
    drop7_ = DropoutLayer(7, ratio);
    arena_.allocate(device, o.initialize);
  }

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override {
    check_input(x);
    const bool t = ctx.training;
    std::vector<Tensor> cols(2);
    for (int c = 0; c < 2; ++c) {
      Tensor h = max_pool(lrn(conv1_[c].forward(x, t), lrn_), pool_);
      cols[c] = max_pool(lrn(conv2_[c].forward(h, t), lrn_), pool_);
    }
    const Tensor pool2 = concat(cols, 1);
    for (int c = 0; c < 2; ++c) {
      const Tensor h = conv4_[c].forward(conv3_[c].forward(pool2, t), t);
      cols[c] = max_pool(conv5_[c].forward(h, t), pool_);
    }
    Tensor h = flatten(concat(cols, 1));
    h = drop6_.forward(fc6_.forward(h), t, ctx.seed, ctx.worker, ctx.step);
    h = drop7_.forward(fc7_.forward(h), t, ctx.seed, ctx.worker, ctx.step);
    return logits_.forward(h);
  }

 private:
  const PoolSpec pool_{3, 2, Padding::valid};
  const LrnOptions lrn_{2, 2.0f, 1e-4f, 0.75f};
  std::array<ConvLayer, 2> conv1_, conv2_, conv3_, conv4_, conv5_;
  DenseLayer fc6_, fc7_, logits_;
  DropoutLayer drop6_, drop7_;
};

}  // namespace

std::unique_ptr<Net> nets_detail::make_alexnet(const NetOptions& o, const Device& device) {
  return std::make_unique<AlexNet>(o, device);
}

}  // namespace tg
