// CUDA vs CPU parity of the small nets (LeNet, CifarNet): the arena initializes on the host, so
// both devices start from bit-identical parameters; one training forward/backward must then
// agree to f32 round-off (cuBLAS and OpenBLAS sum in different orders).
#include <gtest/gtest.h>

#include <cmath>
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

// Logits: a few GEMMs of depth <= 2450 in f32; different summation orders give ~1e-6 relative
// differences, 1e-4 leaves two orders of magnitude of headroom.
constexpr double kLogitsAtol = 1e-5, kLogitsRtol = 1e-4;
// Gradients go through the same GEMMs twice more plus the pooling routing, which is identical
// unless two window values tie to within round-off (not with these random inputs).
constexpr double kGradAtol = 1e-5, kGradRtol = 2e-3;

void expect_parity(const std::string& name, int64_t batch) {
  SCOPED_TRACE(name);
  auto cpu = make_net(name, {}, Device::cpu());
  auto gpu = make_net(name, {}, Device::cuda(0));
  EXPECT_EQ(cpu->arena().params().to_vector<float>(), gpu->arena().params().to_vector<float>());

  const NetInfo& i = cpu->info();
  Tensor x = Tensor::empty({batch, i.in_channels, i.image_size, i.image_size});
  init::uniform_(x, -1.f, 1.f, 11, rng_stream(RngPurpose::test, 1));
  std::vector<int32_t> l(batch);
  for (int64_t n = 0; n < batch; ++n) l[n] = static_cast<int32_t>(n % i.num_classes);
  const Tensor labels = Tensor::from_vector(l, {batch});

  Tensor logits[2];
  Net* nets[2] = {cpu.get(), gpu.get()};
  for (int d = 0; d < 2; ++d) {
    const Device dev = nets[d]->device();
    nets[d]->arena().zero_grad();
    logits[d] = nets[d]->forward(x.to(dev), ForwardContext{});
    backward(softmax_cross_entropy(logits[d], labels.to(dev)));
  }
  testing::expect_close(logits[1].to(Device::cpu()), logits[0], kLogitsAtol, kLogitsRtol,
                        name + " logits");
  const auto& entries = cpu->arena().entries();
  for (size_t e = 0; e < entries.size(); ++e) {
    testing::expect_close(gpu->arena().entries()[e].param.grad().to(Device::cpu()),
                          entries[e].param.grad(), kGradAtol, kGradRtol,
                          name + " grad of " + entries[e].name);
  }
}

TEST(NetCuda, LeNetMatchesCpu) {
  TG_REQUIRE_CUDA();
  expect_parity("lenet", 8);
}

TEST(NetCuda, CifarNetMatchesCpu) {
  TG_REQUIRE_CUDA();
  expect_parity("cifarnet", 8);
}

}  // namespace
}  // namespace tg
