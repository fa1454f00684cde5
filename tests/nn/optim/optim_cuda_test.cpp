// Optimizer and EMA updates on CUDA vs the CPU: bit-identical, because both kernels spell out
// the same f32 operations with explicit fma and correctly rounded division and square root
// (optim_kernels.h). Also checkpoint state moving between devices. Skips without a GPU.
#include <string>

#include "nn/optim/ema.h"
#include "nn/optim/optimizer.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_bitwise_equal;
using testing::random_normal;

constexpr int kSteps = 6;

Tensor grad_at(int64_t n, int k) {
  // Mixed scales (and exact zeros) so Adam's v spans decades and eps matters somewhere.
  Tensor g = random_normal({n}, k % 2 ? 0.01f : 2.0f, 321, k);
  if (n > 3) g.slice(0, 0, 3).zero_();
  return g;
}

std::unique_ptr<Optimizer> make(const std::string& name) {
  OptimizerOptions o;
  o.name = name;
  return make_optimizer(o);
}

void expect_state_equal(const Optimizer& gpu, const Optimizer& cpu) {
  const auto sg = gpu.state(), sc = cpu.state();
  ASSERT_EQ(sg.size(), sc.size());
  for (size_t i = 0; i < sg.size(); ++i) {
    EXPECT_EQ(sg[i].first, sc[i].first);
    if (sc[i].second.dtype() == DType::f32) {
      EXPECT_EQ(sg[i].second.device(), Device::cuda(0)) << sg[i].first << ": slots stay on the GPU";
      expect_bitwise_equal(sg[i].second.to(Device::cpu()), sc[i].second, sc[i].first);
    } else {
      EXPECT_EQ(sg[i].second.item<int64_t>(), sc[i].second.item<int64_t>()) << sc[i].first;
    }
  }
}

TEST(OptimCuda, OptimizerParityExact) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (const std::string name : {"sgd", "momentum", "adam"}) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
      SCOPED_TRACE(name + " n=" + std::to_string(n));
      auto cpu_opt = make(name), gpu_opt = make(name);
      Tensor w_cpu = random_normal({n}, 1.0f, 99);
      Tensor w_gpu = w_cpu.to(gpu);
      for (int k = 0; k < kSteps; ++k) {
        const Tensor g = grad_at(n, k);
        const double lr = 0.01 * (k + 1);
        cpu_opt->step(w_cpu, g, lr);
        gpu_opt->step(w_gpu, g.to(gpu), lr);
      }
      expect_bitwise_equal(w_gpu.to(Device::cpu()), w_cpu, "weights");
      expect_state_equal(*gpu_opt, *cpu_opt);
    }
  }
}

TEST(OptimCuda, EmaParityExact) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
    SCOPED_TRACE(n);
    const Tensor p0 = random_normal({n}, 1.0f, 5);
    Ema cpu(p0, 0.9999), gpu_ema(p0.to(gpu), 0.9999);
    EXPECT_EQ(gpu_ema.shadow().device(), gpu);
    for (int64_t t = 0; t < 20; ++t) {
      const Tensor p = random_normal({n}, 1.0f, 6, t);
      cpu.update(p, t);
      gpu_ema.update(p.to(gpu), t);
    }
    expect_bitwise_equal(gpu_ema.shadow().to(Device::cpu()), cpu.shadow(), "shadow");
  }
}

// A checkpoint written from GPU slots (copied to the host) restores into a GPU optimizer (the
// slots move to the GPU at the first step) and into a CPU one, both continuing identically.
TEST(OptimCuda, StateMovesBetweenDevices) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t n = 4099;
  for (const std::string name : {"momentum", "adam"}) {
    SCOPED_TRACE(name);
    auto a = make(name);
    Tensor w = random_normal({n}, 1.0f, 7).to(gpu);
    for (int k = 0; k < 3; ++k) a->step(w, grad_at(n, k).to(gpu), 0.01);
    auto saved = a->state();
    for (auto& [key, t] : saved) t = t.to(Device::cpu());
    const Tensor w_saved = w.to(Device::cpu());
    for (int k = 3; k < 6; ++k) a->step(w, grad_at(n, k).to(gpu), 0.01);

    auto b_gpu = make(name), b_cpu = make(name);
    b_gpu->load_state(saved);
    b_cpu->load_state(saved);
    Tensor wg = w_saved.to(gpu), wc = w_saved.clone();
    for (int k = 3; k < 6; ++k) {
      b_gpu->step(wg, grad_at(n, k).to(gpu), 0.01);
      b_cpu->step(wc, grad_at(n, k), 0.01);
    }
    expect_bitwise_equal(wg.to(Device::cpu()), w.to(Device::cpu()), "restored on the GPU");
    expect_bitwise_equal(wc, w.to(Device::cpu()), "restored on the CPU");
    expect_state_equal(*b_gpu, *b_cpu);
  }
}

TEST(OptimCuda, MixedDevicesThrow) {
  TG_REQUIRE_CUDA();
  auto opt = make("sgd");
  Tensor w = Tensor::zeros({8}, DType::f32, Device::cuda(0));
  EXPECT_THROW(opt->step(w, Tensor::zeros({8}), 0.1), Error);
  Ema ema(w, 0.9);
  EXPECT_THROW(ema.update(Tensor::zeros({8}), 0), Error);
}

}  // namespace
}  // namespace tg
