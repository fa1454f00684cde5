// Compressor state across devices: 1-bit SGD residuals saved from a CPU run (as a checkpoint
// holds them, on the host) and loaded into a compressor that encodes on the GPU continue
// bit-identically to the CPU run, and the GPU compressor's state snapshots come back on the GPU
// with the CPU's values (the onebit kernels are bit-identical across devices). Skips without a
// GPU.
#include <gtest/gtest.h>

#include <vector>

#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "terngrad/compressor.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

#if TG_CUDA
std::vector<GradSlot> layout() {
  return {{"conv/w", 0, 5000}, {"conv/b", 5000, 20}, {"fc/w", 5020, 10003}, {"fc/b", 15023, 10}};
}
constexpr int64_t kTotal = 15033;
constexpr int kWorkers = 2;

Tensor gradient(int64_t step, int worker) {
  Tensor t = Tensor::empty({kTotal});
  init::normal_(t, 0.01f * (worker + 1), 0.1f, 31,
                rng_stream(RngPurpose::test, static_cast<uint64_t>(step), worker));
  return t;
}

std::unique_ptr<Compressor> onebit() {
  CompressionOptions o;
  o.method = ::tg::tern::Method::onebit;
  return make_compressor(o, layout());
}

// Encodes every worker's gradient of `step` on `device`; returns the messages on the host.
std::vector<std::vector<uint8_t>> encode_on(Compressor& c, int64_t step, const Device& device) {
  std::vector<std::vector<uint8_t>> msgs;
  Tensor msg = Tensor::empty({static_cast<int64_t>(c.payload_bytes(step))}, DType::u8, device);
  for (int w = 0; w < kWorkers; ++w) {
    c.encode(gradient(step, w).to(device), nullptr, step, w, msg);
    msgs.push_back(msg.to(Device::cpu()).to_vector<uint8_t>());
  }
  return msgs;
}
#endif

TEST(CompressorStateCuda, HostResidualsContinueOnTheGpuBitIdentically) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  const Device gpu = Device::cuda(0);
  auto cpu_run = onebit();
  for (int64_t step = 0; step < 3; ++step) encode_on(*cpu_run, step, Device::cpu());
  auto gpu_run = onebit();
  for (int w = 0; w < kWorkers; ++w) {
    const NamedTensors s = cpu_run->state(w);
    ASSERT_TRUE(s[0].second.device().is_cpu());
    gpu_run->load_state(w, s);
  }
  for (int64_t step = 3; step < 6; ++step)
    ASSERT_EQ(encode_on(*gpu_run, step, gpu), encode_on(*cpu_run, step, Device::cpu()))
        << "step " << step;
  for (int w = 0; w < kWorkers; ++w) {
    const Tensor r = gpu_run->state(w)[0].second;
    EXPECT_TRUE(r.device().is_cuda());
    EXPECT_EQ(r.to(Device::cpu()).to_vector<float>(),
              cpu_run->state(w)[0].second.to_vector<float>());
  }
  // A GPU state loads into a fresh compressor too (a copy on the GPU) and continues alike.
  auto again = onebit();
  for (int w = 0; w < kWorkers; ++w) again->load_state(w, gpu_run->state(w));
  EXPECT_EQ(encode_on(*again, 6, gpu), encode_on(*gpu_run, 6, gpu));
#endif
}

}  // namespace
}  // namespace tg::tern
