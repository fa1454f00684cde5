// The paper's networks (nn/nets): registry, exact parameter counts, per-layer layout and
// initialization of LeNet and CifarNet, and a forward/backward smoke test of every net (logits
// shape, loss ~ ln(classes) at init, finite and non-zero gradients, BN moving statistics and
// dropout behaviour in training vs evaluation, reproducibility from the seed, input checks).
// Each large net is built once per TEST (init of 61M / 133M parameters costs seconds), so each
// of them gets one TEST holding all its checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "nn/autograd/tape.h"
#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "nn/nets/net.h"
#include "nn/ops/softmax_xent.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// std of TF's truncated normal (redraw beyond 2 sigma) relative to the untruncated std:
// sqrt(1 - 4 phi(2) / (2 Phi(2) - 1)).
constexpr double kTruncStdFactor = 0.8796;

// Inputs uniform in [-1, 1) (the scale of LeNet's / GoogLeNet's preprocessing), labels i % K.
Tensor random_input(const Net& net, int64_t batch, uint64_t seed = 7) {
  const NetInfo& i = net.info();
  Tensor x = Tensor::empty({batch, i.in_channels, i.image_size, i.image_size});
  init::uniform_(x, -1.f, 1.f, seed, rng_stream(RngPurpose::test, 0));
  return x.to(net.device());
}
Tensor labels_for(const Net& net, int64_t batch) {
  std::vector<int32_t> l(batch);
  for (int64_t i = 0; i < batch; ++i) l[i] = static_cast<int32_t>(i % net.info().num_classes);
  return Tensor::from_vector(l, {batch}, net.device());
}

// The message of the tg::Error `fn` throws ("" and a test failure if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tg::Error";
  return "";
}

struct Expected {
  std::string name;
  Shape shape;
  bool decayed;
  enum { trunc, constant } init;
  double value;  // truncated-normal std, or the constant
};

// Names, shapes, decay flags and the initial values of every entry of `net`'s arena.
void expect_layout(const Net& net, const std::vector<Expected>& want) {
  const auto& e = net.arena().entries();
  ASSERT_EQ(e.size(), want.size());
  ASSERT_EQ(net.decayed().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(e[i].name, want[i].name);
    EXPECT_EQ(e[i].shape, want[i].shape);
    EXPECT_EQ(net.decayed()[i], want[i].decayed);
    const std::vector<float> v = e[i].param.to_vector<float>();
    if (want[i].init == Expected::constant) {
      for (float x : v) ASSERT_EQ(x, static_cast<float>(want[i].value));
      continue;
    }
    double sum = 0, sq = 0, max_abs = 0;
    for (float x : v) {
      sum += x;
      sq += double(x) * x;
      max_abs = std::max(max_abs, std::fabs(double(x)));
    }
    const double n = static_cast<double>(v.size()), mean = sum / n;
    const double sd = std::sqrt(sq / n - mean * mean), want_sd = kTruncStdFactor * want[i].value;
    // The sample std has relative standard error <= 1/sqrt(2n) (the truncated normal is
    // platykurtic); 6 of them (plus the 4-digit rounding of the factor) make a false alarm
    // < 1e-8 for any seed. The mean is within 6 standard errors of 0.
    EXPECT_NEAR(sd, want_sd, want_sd * (6.0 / std::sqrt(2 * n) + 1e-3));
    EXPECT_NEAR(mean, 0.0, 6.0 * want_sd / std::sqrt(n));
    EXPECT_LE(max_abs, 2.0 * want[i].value * (1 + 1e-6));  // truncated at 2 sigma
  }
}

int64_t count_params(const Net& net) {
  int64_t n = 0;
  for (const auto& e : net.arena().entries()) n += e.numel;
  EXPECT_EQ(n, net.arena().total_numel());
  return n;
}

// One training forward/backward on a fresh batch. Checks the logits shape, a finite loss near
// ln(K) (within `loss_tol` nats: small random logits at init), finite gradients, and that every
// arena entry received a non-zero gradient somewhere. Returns the loss.
float smoke_step(Net& net, int64_t batch, double loss_tol, uint64_t step = 0) {
  net.arena().zero_grad();
  const Tensor x = random_input(net, batch), labels = labels_for(net, batch);
  ForwardContext ctx;
  ctx.step = step;
  const Tensor logits = net.forward(x, ctx);
  EXPECT_EQ(logits.shape(), (Shape{batch, net.info().num_classes}));
  const Tensor loss = softmax_cross_entropy(logits, labels);
  const float l = loss.item<float>();
  EXPECT_TRUE(std::isfinite(l));
  EXPECT_NEAR(l, std::log(static_cast<double>(net.info().num_classes)), loss_tol);
  backward(loss);
  EXPECT_EQ(tape_size(), 0u);
  const std::vector<float> g = net.arena().grads().to_vector<float>();
  for (const auto& e : net.arena().entries()) {
    bool finite = true, nonzero = false;
    for (int64_t j = e.offset; j < e.offset + e.numel; ++j) {
      finite = finite && std::isfinite(g[j]);
      nonzero = nonzero || g[j] != 0.0f;
    }
    EXPECT_TRUE(finite) << e.name << " has a non-finite gradient";
    EXPECT_TRUE(nonzero) << e.name << " received no gradient";
  }
  return l;
}

std::vector<std::vector<float>> buffer_values(const Net& net) {
  std::vector<std::vector<float>> v;
  for (const auto& b : net.buffers()) v.push_back(b.second.to_vector<float>());
  return v;
}

// BN nets: every buffer is a named [C] moving mean (zeros) or variance (ones) at construction;
// an evaluation forward leaves all of them bit-identical, a training forward moves every one.
void expect_bn_buffers(Net& net, size_t want_count, int64_t batch) {
  ASSERT_EQ(net.buffers().size(), want_count);
  for (size_t i = 0; i < net.buffers().size(); ++i) {
    const auto& [name, t] = net.buffers()[i];
    const bool mean = i % 2 == 0;
    EXPECT_TRUE(name.ends_with(mean ? "/moving_mean" : "/moving_variance")) << name;
    for (float v : t.to_vector<float>()) ASSERT_EQ(v, mean ? 0.0f : 1.0f) << name;
  }
  const Tensor x = random_input(net, batch);
  const auto before = buffer_values(net);
  {
    NoGradGuard no_grad;
    ForwardContext eval;
    eval.training = false;
    net.forward(x, eval);
  }
  EXPECT_EQ(buffer_values(net), before) << "evaluation changed the moving statistics";
  {
    NoGradGuard no_grad;
    net.forward(x, ForwardContext{});
  }
  const auto after = buffer_values(net);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_NE(after[i], before[i]) << net.buffers()[i].first << " did not move in training";
}

// Dropout nets: the evaluation forward does not depend on the step; the training forward is a
// function of (seed, worker, step): repeatable, and different for another step or worker.
void expect_dropout_behaviour(Net& net, int64_t batch) {
  NoGradGuard no_grad;
  const Tensor x = random_input(net, batch);
  ForwardContext eval;
  eval.training = false;
  const auto e0 = net.forward(x, eval).to_vector<float>();
  eval.step = 5;
  EXPECT_EQ(net.forward(x, eval).to_vector<float>(), e0);
  ForwardContext tr;
  const auto t0 = net.forward(x, tr).to_vector<float>();
  EXPECT_EQ(net.forward(x, tr).to_vector<float>(), t0) << "training forward not repeatable";
  tr.step = 1;
  EXPECT_NE(net.forward(x, tr).to_vector<float>(), t0) << "dropout mask ignores the step";
  tr.step = 0;
  tr.worker = 1;
  EXPECT_NE(net.forward(x, tr).to_vector<float>(), t0) << "dropout mask ignores the worker";
  EXPECT_NE(t0, e0);
}

// ---- registry ---------------------------------------------------------------------------

TEST(NetRegistry, NamesAndUnknownNameError) {
  const std::vector<std::string> want = {"lenet", "cifarnet", "alexnet", "googlenet", "vgg_a"};
  EXPECT_EQ(net_names(), want);
  const std::string msg = error_of([] { make_net("resnet50", {}, Device::cpu()); });
  EXPECT_NE(msg.find("resnet50"), std::string::npos) << msg;
  for (const auto& n : want) EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

TEST(NetRegistry, BadOptionsThrow) {
  NetOptions o;
  o.dropout_ratio = 1.0f;
  EXPECT_NE(error_of([&] { make_net("alexnet", o, Device::cpu()); }).find("dropout"),
            std::string::npos);
  o = {};
  o.num_classes = -3;
  EXPECT_NE(error_of([&] { make_net("lenet", o, Device::cpu()); }).find("num_classes"),
            std::string::npos);
}

// ---- LeNet ------------------------------------------------------------------------------

TEST(LeNet, LayoutCountAndInit) {
  auto net = make_net("lenet", {}, Device::cpu());
  EXPECT_EQ(net->info().name, "lenet");
  EXPECT_EQ(net->info().in_channels, 1);
  EXPECT_EQ(net->info().image_size, 28);
  EXPECT_EQ(net->info().num_classes, 10);
  EXPECT_EQ(count_params(*net), 1256080);
  EXPECT_TRUE(net->buffers().empty());
  expect_layout(*net, {
                          {"conv1/w", {20, 1, 5, 5}, true, Expected::trunc, 0.05},
                          {"conv1/b", {20}, false, Expected::constant, 0.0},
                          {"conv2/w", {50, 20, 5, 5}, true, Expected::trunc, 0.05},
                          {"conv2/b", {50}, false, Expected::constant, 0.0},
                          {"fc3/w", {2450, 500}, true, Expected::trunc, 0.048},
                          {"fc3/b", {500}, false, Expected::constant, 0.0},
                          {"logits/w", {500, 10}, true, Expected::trunc, 0.0767},
                          {"logits/b", {10}, false, Expected::constant, 0.0},
                      });
}

TEST(LeNet, ForwardBackwardSmoke) {
  auto net = make_net("lenet", {}, Device::cpu());
  // Logits rms at init ~0.3: the batch-4 loss is within ~4 rms / sqrt(4) of ln 10.
  smoke_step(*net, 4, 0.6);
}

TEST(LeNet, SameSeedSameParamsOtherSeedDiffers) {
  NetOptions o;
  auto a = make_net("lenet", o, Device::cpu()), b = make_net("lenet", o, Device::cpu());
  EXPECT_EQ(a->arena().params().to_vector<float>(), b->arena().params().to_vector<float>());
  o.seed = 124;
  auto c = make_net("lenet", o, Device::cpu());
  EXPECT_NE(a->arena().params().to_vector<float>(), c->arena().params().to_vector<float>());
  // Forward is deterministic too (no dropout: training and evaluation agree).
  const Tensor x = random_input(*a, 4);
  NoGradGuard no_grad;
  ForwardContext eval;
  eval.training = false;
  EXPECT_EQ(a->forward(x, ForwardContext{}).to_vector<float>(),
            b->forward(x, eval).to_vector<float>());
}

// initialize = false (a checkpoint restore follows): the same layout and buffers, every parameter
// zero, and nothing else about the net differs.
TEST(NetRegistry, UninitializedNetsHaveTheLayoutAndZeroParameters) {
  for (const std::string name : {"lenet", "cifarnet"}) {
    SCOPED_TRACE(name);
    NetOptions o;
    auto a = make_net(name, o, Device::cpu());
    o.initialize = false;
    auto b = make_net(name, o, Device::cpu());
    ASSERT_EQ(a->arena().entries().size(), b->arena().entries().size());
    for (size_t i = 0; i < a->arena().entries().size(); ++i) {
      EXPECT_EQ(a->arena().entries()[i].name, b->arena().entries()[i].name);
      EXPECT_EQ(a->arena().entries()[i].shape, b->arena().entries()[i].shape);
    }
    const std::vector<float> p = b->arena().params().to_vector<float>();
    EXPECT_EQ(std::count(p.begin(), p.end(), 0.0f), static_cast<ptrdiff_t>(p.size()));
    const std::vector<float> q = a->arena().params().to_vector<float>();
    EXPECT_LT(std::count(q.begin(), q.end(), 0.0f), static_cast<ptrdiff_t>(q.size()));
    // Copying a's parameters in makes the two nets the same function.
    Tensor bp = b->arena().params();  // a handle to the same storage
    bp.copy_from(a->arena().params());
    const Tensor x = random_input(*a, 2);
    NoGradGuard no_grad;
    ForwardContext eval;
    eval.training = false;
    EXPECT_EQ(a->forward(x, eval).to_vector<float>(), b->forward(x, eval).to_vector<float>());
  }
}

TEST(LeNet, WrongInputShapeErrorNamesBoth) {
  auto net = make_net("lenet", {}, Device::cpu());
  const std::string msg = error_of([&] {
    net->forward(Tensor::zeros({2, 1, 32, 32}), ForwardContext{});
  });
  EXPECT_NE(msg.find("[N, 1, 28, 28]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 1, 32, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lenet"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] {
              net->forward(Tensor::zeros({2, 28, 28}), ForwardContext{});
            }).find("[2, 28, 28]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { net->forward(Tensor(), ForwardContext{}); }).find("undefined"),
            std::string::npos);
}

TEST(LeNet, OptionsResizeTheNet) {
  NetOptions o;
  o.num_classes = 5;
  o.image_size = 32;
  o.in_channels = 3;
  auto net = make_net("lenet", o, Device::cpu());
  EXPECT_EQ(net->arena().entries()[4].shape, (Shape{50 * 8 * 8, 500}));
  smoke_step(*net, 2, 0.6);
}

// ---- CifarNet ---------------------------------------------------------------------------

TEST(CifarNet, LayoutCountAndInit) {
  auto net = make_net("cifarnet", {}, Device::cpu());
  EXPECT_EQ(net->info().in_channels, 3);
  EXPECT_EQ(net->info().image_size, 24);
  EXPECT_EQ(net->info().num_classes, 10);
  EXPECT_EQ(count_params(*net), 1068298);
  EXPECT_TRUE(net->buffers().empty());
  expect_layout(*net, {
                          {"conv1/w", {64, 3, 5, 5}, false, Expected::trunc, 0.05},
                          {"conv1/b", {64}, false, Expected::constant, 0.0},
                          {"conv2/w", {64, 64, 5, 5}, false, Expected::trunc, 0.05},
                          {"conv2/b", {64}, false, Expected::constant, 0.1},
                          {"fc3/w", {2304, 384}, true, Expected::trunc, 0.04},
                          {"fc3/b", {384}, false, Expected::constant, 0.1},
                          {"fc4/w", {384, 192}, true, Expected::trunc, 0.04},
                          {"fc4/b", {192}, false, Expected::constant, 0.1},
                          {"logits/w", {192, 10}, false, Expected::trunc, 1.0 / 192.0},
                          {"logits/b", {10}, false, Expected::constant, 0.0},
                      });
}

TEST(CifarNet, ForwardBackwardSmokeAndSeed) {
  auto net = make_net("cifarnet", {}, Device::cpu());
  // Logits rms at init ~0.04 (logits std 1/192): the loss is within 0.1 of ln 10.
  smoke_step(*net, 4, 0.1);
  auto again = make_net("cifarnet", {}, Device::cpu());
  auto fresh = make_net("cifarnet", {}, Device::cpu());
  EXPECT_EQ(again->arena().params().to_vector<float>(), fresh->arena().params().to_vector<float>());
  const std::string msg = error_of([&] {
    net->forward(Tensor::zeros({4, 3, 32, 32}), ForwardContext{});
  });
  EXPECT_NE(msg.find("[N, 3, 24, 24]"), std::string::npos) << msg;
}

// ---- AlexNet ----------------------------------------------------------------------------

TEST(AlexNet, CountLayoutSmokeBnDropout) {
  auto net = make_net("alexnet", {}, Device::cpu());
  EXPECT_EQ(net->info().image_size, 224);
  EXPECT_EQ(net->info().num_classes, 1001);
  // conv1 2x(48*3*11*11) = 34848, conv2 2x(128*48*5*5) = 307200, conv3 2x(192*256*3*3) =
  // 884736, conv4 2x(192*192*9) = 663552, conv5 2x(128*192*9) = 442368, BN offsets
  // 96+256+384+384+256 = 1376, fc6 9216*4096+4096, fc7 4096*4096+4096, logits 4096*1001+1001.
  EXPECT_EQ(count_params(*net), 60969321);
  const auto& e = net->arena().entries();
  ASSERT_EQ(e.size(), 26u);  // 10 convs x (w, beta) + 3 fc x (w, b)
  EXPECT_EQ(e[0].name, "conv1_1/w");
  EXPECT_EQ(e[0].shape, (Shape{48, 3, 11, 11}));
  EXPECT_EQ(e[1].name, "conv1_1/beta");
  EXPECT_EQ(e[6].name, "conv2_2/w");
  EXPECT_EQ(e[6].shape, (Shape{128, 48, 5, 5}));
  EXPECT_EQ(e[8].shape, (Shape{192, 256, 3, 3}));  // conv3_1 sees both columns
  EXPECT_EQ(e[20].name, "fc6/w");
  EXPECT_EQ(e[20].shape, (Shape{9216, 4096}));
  EXPECT_EQ(e[24].name, "logits/w");
  EXPECT_EQ(e[24].shape, (Shape{4096, 1001}));
  for (size_t i = 0; i < e.size(); ++i)  // all weights decayed, offsets and biases not
    EXPECT_EQ(net->decayed()[i], e[i].name.ends_with("/w")) << e[i].name;
  // fc6 bias 0.1, logits bias 0.
  EXPECT_EQ(e[21].param.to_vector<float>()[17], 0.1f);
  EXPECT_EQ(e[25].param.to_vector<float>()[17], 0.0f);

  expect_bn_buffers(*net, 20, 2);
  // BN'd convs and fc weights of std 0.005 / 0.01: logits rms ~0.16 at init, so the batch-2
  // loss is within ~3 rms of ln 1001.
  smoke_step(*net, 2, 0.5);
  expect_dropout_behaviour(*net, 2);
  EXPECT_NE(error_of([&] {
              net->forward(Tensor::zeros({1, 3, 227, 227}), ForwardContext{});
            }).find("[N, 3, 224, 224]"),
            std::string::npos);
}

// ---- GoogLeNet --------------------------------------------------------------------------

TEST(GoogLeNet, CountLayoutSmokeBnDropout) {
  auto net = make_net("googlenet", {}, Device::cpu());
  EXPECT_EQ(net->info().num_classes, 1001);
  // Exact TF-slim inception_v1 figure with 1001 classes and no auxiliary head: every conv of
  // the base has a kernel and one BN offset per filter and no bias (57 convs: 3 in the stem +
  // 9 Mixed blocks x 6; 5,592,624 values), the classifier conv 1024*1001 weights + 1001 biases.
  EXPECT_EQ(count_params(*net), 6618649);
  const auto& e = net->arena().entries();
  ASSERT_EQ(e.size(), 57u * 2 + 2);
  EXPECT_EQ(e[0].name, "Conv2d_1a_7x7/w");
  EXPECT_EQ(e[0].shape, (Shape{64, 3, 7, 7}));
  EXPECT_EQ(e[1].name, "Conv2d_1a_7x7/beta");
  EXPECT_EQ(e[6].name, "Mixed_3b/Branch_0/Conv2d_0a_1x1/w");
  EXPECT_EQ(e[6].shape, (Shape{64, 192, 1, 1}));
  EXPECT_EQ(e[e.size() - 2].name, "logits/Conv2d_0c_1x1/w");
  EXPECT_EQ(e[e.size() - 2].shape, (Shape{1001, 1024, 1, 1}));
  EXPECT_EQ(e[e.size() - 1].name, "logits/Conv2d_0c_1x1/b");
  for (size_t i = 0; i < e.size(); ++i)  // every conv weight (classifier included) decayed
    EXPECT_EQ(net->decayed()[i], e[i].name.ends_with("/w")) << e[i].name;
  // Classifier: variance scaling, std sqrt(1.3 * 2 / 1024) before truncation.
  {
    const std::vector<float> w = e[e.size() - 2].param.to_vector<float>();
    double sq = 0;
    for (float v : w) sq += double(v) * v;
    const double want = kTruncStdFactor * std::sqrt(2.6 / 1024);
    EXPECT_NEAR(std::sqrt(sq / w.size()), want, want * (6.0 / std::sqrt(2.0 * w.size()) + 1e-3));
  }
  expect_bn_buffers(*net, 57 * 2, 2);
  // Post-BN ReLU features average-pooled into a 0.05-std classifier: logits rms ~0.6 at init;
  // the batch-2 loss is within ~3 rms of ln 1001.
  smoke_step(*net, 2, 1.5);
  expect_dropout_behaviour(*net, 2);
}

TEST(GoogLeNet, SmallImageAndNoDropout) {
  NetOptions o;
  o.image_size = 64;
  o.num_classes = 10;
  o.dropout_ratio = 0.0f;
  auto net = make_net("googlenet", o, Device::cpu());
  smoke_step(*net, 2, 1.5);
  NoGradGuard no_grad;
  const Tensor x = random_input(*net, 2);
  ForwardContext a, b;
  b.step = 3;
  EXPECT_EQ(net->forward(x, a).to_vector<float>(), net->forward(x, b).to_vector<float>());
}

// ---- VGG-A ------------------------------------------------------------------------------

TEST(VggA, CountAndSmoke) {
  auto net = make_net("vgg_a", {}, Device::cpu());
  EXPECT_EQ(net->info().num_classes, 1000);
  // Convs (with biases) 9,220,480; fc6 25088*4096+4096, fc7 4096*4096+4096, fc8 4096*1000+1000.
  EXPECT_EQ(count_params(*net), 132863336);
  const auto& e = net->arena().entries();
  ASSERT_EQ(e.size(), 22u);
  EXPECT_EQ(e[16].name, "fc6/w");
  EXPECT_EQ(e[16].shape, (Shape{25088, 4096}));
  for (size_t i = 0; i < e.size(); ++i)
    EXPECT_EQ(net->decayed()[i], e[i].name.ends_with("/w")) << e[i].name;
  EXPECT_TRUE(net->buffers().empty());
  // Xavier-initialized ReLU stack: logits O(0.1-1); loss within 1 nat of ln 1000.
  smoke_step(*net, 1, 1.0);
}

}  // namespace
}  // namespace tg
