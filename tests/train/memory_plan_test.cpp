// The memory plan's pieces (train/memory_plan.h): the kernel's text parsed, the limit from the
// environment, the convolutions' scratch, and probes that leave the run as it was. The plan
// against measured peaks, and the refusal, are tested through the CLI (tests/cmd/train_test.cpp).
#include "train/memory_plan.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "config/config.h"
#include "nn/core/allocator.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "nn/ops/conv2d_kernels.h"
#include "train/options.h"
#include "train/step.h"

namespace tg::train {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

TEST(MemoryPlan, ParsesTheKernelsText) {
  const std::string meminfo =
      "MemTotal:       24596408 kB\nMemFree:         1234567 kB\nMemAvailable:   20480000 kB\n";
  EXPECT_EQ(meminfo_available_bytes(meminfo), int64_t{20480000} * 1024);
  EXPECT_EQ(meminfo_available_bytes("MemTotal: 100 kB\n"), -1);  // a kernel without the field
  EXPECT_EQ(meminfo_rss_bytes("Name:\tterngrad\nVmHWM:\t  300 kB\nVmRSS:\t  254000 kB\n"),
            int64_t{254000} * 1024);
  EXPECT_EQ(meminfo_rss_bytes(""), -1);
  // cgroup v2: "max" is no limit; v1 says so with a number near 2^63.
  EXPECT_EQ(cgroup_room_bytes("max\n", "1000\n"), -1);
  EXPECT_EQ(cgroup_room_bytes("9223372036854771712\n", "1000\n"), -1);
  EXPECT_EQ(cgroup_room_bytes("4294967296\n", "1073741824\n"), int64_t{3} << 30);
  EXPECT_EQ(cgroup_room_bytes("1000\n", "5000\n"), 0);  // over its limit already: no room
  EXPECT_EQ(cgroup_room_bytes("", "1000"), -1);         // no such file
  EXPECT_EQ(cgroup_room_bytes("garbage", "1000"), -1);
}

TEST(MemoryPlan, TheEnvironmentsLimitIsWhatTheProcessMayHoldInAll) {
  ::setenv("TG_MEMORY_LIMIT_MB", "64", 1);
  const int64_t rss = resident_bytes();
  const MemoryLimit small = memory_limit();
  ASSERT_GT(rss, 0);
  EXPECT_NE(small.source.find("TG_MEMORY_LIMIT_MB=64"), std::string::npos) << small.source;
  // 64 MiB less what this process holds (measured again inside: it can only have grown).
  EXPECT_LE(small.bytes, std::max<int64_t>(0, (int64_t{64} << 20) - rss));
  ::setenv("TG_MEMORY_LIMIT_MB", "lots", 1);
  try {
    memory_limit();
    ADD_FAILURE() << "a malformed TG_MEMORY_LIMIT_MB was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TG_MEMORY_LIMIT_MB = 'lots'"), std::string::npos)
        << e.what();
  }
  ::unsetenv("TG_MEMORY_LIMIT_MB");
  const MemoryLimit open = memory_limit();  // MemAvailable at least, on Linux
  EXPECT_GT(open.bytes, 0);
  EXPECT_EQ(open.source.find("TG_MEMORY_LIMIT_MB"), std::string::npos) << open.source;
}

TEST(MemoryPlan, ConvolutionScratchCountsEachSizeOnceAndNothingOnTheTaskPath) {
  // CifarNet's conv2 (64 -> 64 channels, 5x5, 12x12 output). A few images run on the chunk path,
  // whose scratch the caller allocates: training and evaluation at the same batch share that
  // block, at two batches they hold one each. Enough images for eight tasks run on the threads'
  // own scratch and the caller allocates none.
  const Conv2dShape conv2{1, 64, 12, 12, 64, 5, 5, 12, 12, 1, 1, 2, 2, 1};
  ActivationBytes train, eval;
  train.convs = {conv2};
  eval.convs = {conv2};
  auto block = [&](int64_t n) {
    Conv2dShape s = conv2;
    s.N = n;
    EXPECT_TRUE(conv2d_cpu_uses_workspace(s)) << n;
    return static_cast<int64_t>(CachingAllocator::round_size(
        static_cast<size_t>(conv2d_workspace_floats(s)) * sizeof(float)));
  };
  EXPECT_EQ(conv_workspace_bytes(train, 2, eval, 2), block(2));
  EXPECT_EQ(conv_workspace_bytes(train, 2, eval, 3), block(2) + block(3));
  Conv2dShape many = conv2;
  many.N = 4096;
  ASSERT_FALSE(conv2d_cpu_uses_workspace(many));
  EXPECT_EQ(conv_workspace_bytes(train, 4096, eval, 4096), 0);
  EXPECT_EQ(conv_workspace_bytes(train, 4096, eval, 2), block(2));
  EXPECT_EQ(conv_workspace_bytes(ActivationBytes{}, 64, ActivationBytes{}, 500), 0);
}

TEST(MemoryPlan, ProbesLeaveTheRunAsItWas) {
  // Two LeNets from one config, one probed: a training step on the same batch then gives both
  // the same parameters, bit for bit (the probe's gradients are not added to the step's).
  const config::Config cfg =
      config::default_config({"model.name=lenet", "workers.count=2", "compression.method=terngrad",
                              "train.batch_size=8", "device=cpu"});
  RunParts a = build_run(cfg, Device::cpu(), 1024), b = build_run(cfg, Device::cpu(), 1024);
  const ActivationBytes tr = probe_training_activations(*a.net);
  const ActivationBytes ev = probe_eval_activations(*a.net);
  EXPECT_GT(tr.per_image, 0);
  EXPECT_GT(ev.per_image, 0);
  EXPECT_FALSE(tr.convs.empty());
  HostBatch hb;
  hb.x = Tensor::empty({8, 1, 28, 28});
  init::normal_(hb.x, 0.f, 1.f, 7, rng_stream(RngPurpose::data, 0));
  hb.y = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  const std::vector<HostBatch> batches = {hb};
  for (RunParts* r : {&a, &b}) {
    TrainStep step(*r->net, *r->optimizer, r->ema ? &*r->ema : nullptr, cfg.train.weight_decay,
                   static_cast<uint64_t>(cfg.train.seed), r->compressor.get());
    Tensor loss = Tensor::zeros({});
    step.run(batches, 0, 0.01, loss);
  }
  EXPECT_TRUE(same_bits(a.net->arena().params(), b.net->arena().params()));

  // AlexNet's batch-norm running statistics are put back.
  auto net = make_net("alexnet", NetOptions{}, Device::cpu());
  std::vector<Tensor> before;
  for (const auto& [name, t] : net->buffers()) before.push_back(t.clone());
  ASSERT_FALSE(before.empty());
  const Tensor params = net->arena().params().clone();
  probe_training_activations(*net);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(same_bits(net->buffers()[i].second, before[i])) << net->buffers()[i].first;
  EXPECT_TRUE(same_bits(net->arena().params(), params));
}

}  // namespace
}  // namespace tg::train
