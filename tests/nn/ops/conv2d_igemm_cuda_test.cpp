// The implicit-GEMM convolutions on the GPU: the same bits as the CPU emulation of the same
// kernels (conv2d_igemm_test.cpp), the CPU reference's numbers at every conv shape of the five
// nets, the same bits run to run, and the policy's dispatch through conv2d(). Skips without a GPU.
#include <cmath>
#include <cstring>

#include "nn/autograd/tape.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/precision.h"
#include "tests/nn/ops/conv2d_igemm_util.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::NetConv;

constexpr Conv2dPass kPasses[] = {Conv2dPass::forward, Conv2dPass::backward_data,
                                  Conv2dPass::backward_weight};

using testing::ConvData;
using testing::cpu_pass;
using testing::emulated_pass;
using testing::make_conv_data;
using testing::pass_output_shape;

// One pass of `a` on the GPU; the output comes back to the host.
Tensor on_gpu(const ConvData& d, Conv2dPass p, const Conv2dAlgo& a) {
  const Device gpu = Device::cuda(0);
  const Tensor x = d.x.to(gpu), w = d.w.to(gpu), b = d.bias.to(gpu), dy = d.dy.to(gpu);
  Tensor out = Tensor::full(pass_output_shape(d.s, p), 7.0, DType::f32, gpu);
  const int64_t nws = std::max<int64_t>(conv2d_workspace_floats(d.s), 1);
  Tensor ws = Tensor::full({nws}, 1e30, DType::f32, gpu);
#if TG_CUDA
  cuda::DeviceGuard guard(gpu.index);
  switch (p) {
    case Conv2dPass::forward:
      conv2d_forward_cuda_with(a, d.s, x.data<float>(), w.data<float>(), b.data<float>(),
                               out.data<float>(), ws.data<float>());
      break;
    case Conv2dPass::backward_data:
      conv2d_backward_data_cuda_with(a, d.s, dy.data<float>(), w.data<float>(), out.data<float>(),
                                     ws.data<float>());
      break;
    case Conv2dPass::backward_weight:
      conv2d_backward_weight_cuda_with(a, d.s, x.data<float>(), dy.data<float>(), out.data<float>(),
                                       nullptr, ws.data<float>());
      break;
  }
#else
  (void)a;
#endif
  return out.to(Device::cpu());
}

// The GPU computes exactly what the emulation does: same fmaf chains, same split order.
TEST(Conv2dIgemmCuda, BitsEqualTheCpuEmulation) {
  TG_REQUIRE_CUDA();
  uint64_t seed = 21;
  for (const NetConv& c : testing::small_convs()) {
    SCOPED_TRACE(c.name);
    const ConvData d = make_conv_data(c, seed++);
    for (Conv2dPass p : kPasses) {
      SCOPED_TRACE(conv2d_pass_name(p));
      for (Conv2dAlgo a : conv2d_igemm_tiles()) {
        for (int splits : {1, 3}) {
          a.splits = splits;
          SCOPED_TRACE(conv2d_algo_name(a));
          testing::expect_bitwise_equal(on_gpu(d, p, a), emulated_pass(d, p, a), "output");
        }
      }
    }
  }
}

// Every conv shape of the five nets at one and two images, every pass, with the rule's tile and
// split and with every tile: the CPU reference's numbers (Kd up to 4,608 products in [-1, 1)
// summed in another order), and the same bits when run again.
TEST(Conv2dIgemmCuda, EveryNetShapeMatchesTheCpuAndRepeatsBitForBit) {
  TG_REQUIRE_CUDA();
  uint64_t seed = 40;
  for (int64_t batch : {1, 2}) {
    for (const NetConv& c : testing::net_convs(batch)) {
      SCOPED_TRACE(std::string(c.name) + " batch " + std::to_string(batch));
      const ConvData d = make_conv_data(c, seed++);
      const int64_t nws = conv2d_workspace_floats(d.s);
      for (Conv2dPass p : kPasses) {
        SCOPED_TRACE(conv2d_pass_name(p));
        const Tensor want = cpu_pass(d, p);
        std::vector<Conv2dAlgo> algos{conv2d_igemm_rule(d.s, p, nws)};
        for (const Conv2dAlgo& t : conv2d_igemm_tiles())
          algos.push_back(conv2d_igemm_split(d.s, p, t, nws));
        for (const Conv2dAlgo& a : algos) {
          SCOPED_TRACE(conv2d_algo_name(a));
          const Tensor got = on_gpu(d, p, a);
          testing::expect_close(got, want, 1e-3, 1e-4, "output");
          testing::expect_bitwise_equal(on_gpu(d, p, a), got, "second run");
        }
      }
    }
  }
}

// The TF32 tiles on tensor cores. Against the emulation (PTX's fragment layout, lane by lane):
// the same numbers up to the order and rounding of the tensor core's additions, so a fragment
// read from the wrong place shows (scaled error: |difference| / (sum of the products'
// magnitudes + 1) <= 2^-12). At every net shape: within TF32's rounding of the CPU reference
// (each operand within 2^-11 of its value, products within ~2^-10; the rest is the tensor
// core's fp32 accumulation over up to ~100k products, allowed 3x that), and the same bits again.
TEST(Conv2dIgemmCuda, Tf32TilesMatchTheEmulationAndTheCpuAndRepeat) {
  TG_REQUIRE_CUDA();
  std::vector<Conv2dAlgo> tf32_tiles;
  for (const Conv2dAlgo& t : conv2d_igemm_tiles(true))
    if (t.tf32) tf32_tiles.push_back(t);
  uint64_t seed = 71;
  for (const NetConv& c : testing::small_convs()) {
    SCOPED_TRACE(c.name);
    const ConvData d = make_conv_data(c, seed++);
    const ConvData absolute = testing::map_conv_data(d, [](float v) { return std::fabs(v); });
    for (Conv2dPass p : kPasses) {
      SCOPED_TRACE(conv2d_pass_name(p));
      const Tensor magnitude = cpu_pass(absolute, p);
      for (Conv2dAlgo a : tf32_tiles) {
        for (int splits : {1, 3}) {
          a.splits = splits;
          SCOPED_TRACE(conv2d_algo_name(a));
          EXPECT_LE(testing::max_scaled_error(on_gpu(d, p, a), emulated_pass(d, p, a), magnitude),
                    std::ldexp(1.0, -12));
        }
      }
    }
  }
  for (const NetConv& c : testing::net_convs(2)) {
    SCOPED_TRACE(c.name);
    const ConvData d = make_conv_data(c, seed++);
    const ConvData absolute = testing::map_conv_data(d, [](float v) { return std::fabs(v); });
    const int64_t nws = conv2d_workspace_floats(d.s);
    for (Conv2dPass p : kPasses) {
      SCOPED_TRACE(conv2d_pass_name(p));
      const Tensor want = cpu_pass(d, p), magnitude = cpu_pass(absolute, p);
      for (const Conv2dAlgo& t : tf32_tiles) {
        const Conv2dAlgo a = conv2d_igemm_split(d.s, p, t, nws);
        SCOPED_TRACE(conv2d_algo_name(a));
        const Tensor got = on_gpu(d, p, a);
        EXPECT_LE(testing::max_scaled_error(got, want, magnitude), 3 * std::ldexp(1.0, -10));
        testing::expect_bitwise_equal(on_gpu(d, p, a), got, "second run");
      }
    }
  }
}

// conv2d() on the GPU follows the policy: igemm everywhere records igemm choices and gives the
// CPU's numbers through the tape; a pin wins over the mode; autotune records one of the
// candidates for each pass and then keeps it.
TEST(Conv2dIgemmCuda, ThePolicyPicksAndRecordsEachPass) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const NetConv c{"3x3", {4, 8, 10, 10}, {16, 8, 3, 3}, testing::conv_opts(1, 1, Padding::same)};
  const ConvData d = make_conv_data(c, 9);
  auto run = [&](const Device& dev) {
    Tensor x = d.x.to(dev), w = d.w.to(dev), b = d.bias.to(dev);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor y = conv2d(x, w, b, c.o);
    backward(y, d.dy.to(dev));
    return std::vector<Tensor>{y.to(Device::cpu()), x.grad().to(Device::cpu()),
                               w.grad().to(Device::cpu())};
  };
  const auto cpu = run(Device::cpu());
  const std::string fwd = conv2d_pass_key(d.s, Conv2dPass::forward);
  for (const std::string mode : {"igemm", "autotune"}) {
    SCOPED_TRACE(mode);
    Conv2dPolicy pol;
    pol.mode = mode;
    pol.pins[fwd] = "igemm32x128s2";
    set_conv2d_policy(pol);
    const auto g = run(gpu);
    for (int k = 0; k < 3; ++k) testing::expect_close(g[k], cpu[k], 2e-4, 1e-4, "output");
    const auto choices = conv2d_choices();
    ASSERT_EQ(choices.size(), 3u);
    EXPECT_EQ(choices[0], (std::pair<std::string, std::string>{fwd, "igemm32x128s2"}));
    for (const auto& [key, algo] : choices) {
      if (mode == "igemm") {
        EXPECT_EQ(algo.rfind("igemm", 0), 0u) << key;
      } else {
        EXPECT_NO_THROW(parse_conv2d_algo(algo, key));
      }
    }
    // The recorded choices hold: the same bits again.
    const auto again = run(gpu);
    for (int k = 0; k < 3; ++k) testing::expect_bitwise_equal(again[k], g[k], "repeat");
  }
  // With cuda.tf32 on, mode igemm runs the TF32 twins (values within TF32's rounding: |y| of
  // 72 products of values in [-1, 1) stays below ~20, so 2e-2 is ~2^-10 of it).
  set_cuda_tf32(true);
  set_conv2d_policy({"igemm", {}});
  const auto t = run(gpu);
  for (int k = 0; k < 3; ++k) testing::expect_close(t[k], cpu[k], 2e-2, 2e-3, "tf32 output");
  for (const auto& [key, algo] : conv2d_choices())
    EXPECT_TRUE(parse_conv2d_algo(algo, key).tf32) << key << " " << algo;
  set_cuda_tf32(false);
  set_conv2d_policy({});
}

}  // namespace
}  // namespace tg
