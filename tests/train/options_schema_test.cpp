// The config and the libraries agree: for every key of `terngrad config --reference`, every value
// the config accepts (config::key_samples(): a range's ends and a middle value, every allowed
// name, both booleans) builds the library objects the run would build from it (the net, the
// dataset, the optimizer, the learning-rate schedule, the compressor, the EMA, the communication
// algorithm), with no error. A key whose config range is wider than its library's (as
// compression.qsgd_levels once was: [1, 65535] against the compressor's [1, 127]) fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "config/config.h"
#include "datasets/dataset.h"
#include "nn/nets/net.h"
#include "nn/optim/ema.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/ternary_collectives.h"
#include "train/options.h"

namespace tg::train {
namespace {

using namespace tg::config;

constexpr int64_t kTrainSize = 64;

// Small defaults the sampled key is applied over: synthetic data, so no files are needed.
std::vector<std::string> base_overrides() {
  return {"data.name=synthetic", "data.synthetic_size=8", "train.batch_size=8"};
}

// Builds what a run builds from `c`; throws what a library throws. The net's parameters are
// not drawn (NetOptions::initialize, as --resume builds it): no option is checked there, and the
// draws were most of this test's time (AlexNet's 61 M and VGG-A's 133 M for each value sampled
// with them).
void build_libraries(const Config& c) {
  NetOptions no = net_options(c);
  no.initialize = false;
  const auto net = make_net(c.model.name, no, Device::cpu());
  if (c.data.dataset.name == "synthetic") {
    data::open_dataset(data_options(c), data::Split::train);
  } else {  // files would be needed: the name must be one the registry opens
    const auto names = data::dataset_names();
    if (std::find(names.begin(), names.end(), c.data.dataset.name) == names.end())
      TG_THROW("no dataset '", c.data.dataset.name, "'");
  }
  make_optimizer(c.train.optimizer);
  LrSchedule schedule(lr_schedule_options(c, kTrainSize));
  schedule(0);
  tern::make_compressor(compression_options(c, kTrainSize), grad_layout(*net));
  if (c.train.ema_decay > 0) Ema ema(net->arena().params(), c.train.ema_decay);
  comm::resolve_backend(c.comm.group.backend, parse_device(c.device));
  EXPECT_GE(c.comm.reducer.bucket_bytes(), 1);
  EXPECT_GT(c.comm.group.timeout_ms().count(), 0);
}

TEST(OptionsSchema, EveryValueTheConfigAcceptsTheLibrariesAccept) {
  const std::vector<KeySamples> keys = key_samples();
  ASSERT_GT(keys.size(), 50u);
  int accepted = 0, refused_by_config = 0;
  std::set<std::string> sampled;
  for (const KeySamples& k : keys) {
    ASSERT_FALSE(k.accepted.empty()) << k.key;
    for (const std::string& value : k.accepted) {
      const bool nccl_on_cpu = k.key == "comm.backend" && value == "\"nccl\"";
      if (nccl_on_cpu) continue;  // needs a CUDA device: the NCCL tests
      std::vector<std::string> overrides = base_overrides();
      overrides.push_back(k.key + "=" + value);
      Config c;
      try {
        c = default_config(overrides);
      } catch (const Error&) {
        // A combination the config refuses (e.g. train.batch_size not a multiple of
        // workers.count): not accepted, so nothing to check.
        ++refused_by_config;
        continue;
      }
      SCOPED_TRACE(k.key + " = " + value);
      EXPECT_NO_THROW(build_libraries(c));
      ++accepted;
      sampled.insert(k.key);
    }
  }
  EXPECT_GE(accepted, 140);
  EXPECT_LT(refused_by_config, 10);
  // The keys that feed a library are all sampled.
  for (const char* key : {"compression.qsgd_levels", "compression.method", "compression.pack",
                          "compression.scaler_sharing", "train.lr_policy", "train.optimizer",
                          "model.name", "data.name", "comm.algorithm"})
    EXPECT_TRUE(sampled.count(key)) << key;
}

// Defaults are declared once, in the libraries' option structs: a default Config holds each
// library's default-constructed options, and the run derives the rest (one seed for every
// random choice, the epoch length, the schedule's period).
TEST(OptionsSchema, ConfigDefaultsAreTheLibrariesDefaults) {
  const Config c;
  EXPECT_EQ(c.model.net, NetOptions{});
  EXPECT_EQ(c.data.dataset, data::DataOptions{});
  EXPECT_EQ(c.train.optimizer, OptimizerOptions{});
  EXPECT_EQ(c.train.schedule, LrScheduleOptions{});
  EXPECT_EQ(c.compression, tern::CompressionOptions{});
  EXPECT_EQ(c.comm.group, comm::GroupOptions{});
  EXPECT_EQ(c.comm.reducer, comm::ReducerOptions{});
  EXPECT_EQ(c.comm.exchange, tern::AggregateOptions{});

  const int64_t train_size = 60000;
  const tern::CompressionOptions z = compression_options(c, train_size);
  EXPECT_EQ(z.seed, static_cast<uint64_t>(c.train.seed));
  EXPECT_EQ(z.steps_per_epoch, static_cast<double>(train_size) / c.train.batch_size);
  EXPECT_EQ(lr_schedule_options(c, train_size).decay_steps, c.train.iterations);  // 0 = the run's
  EXPECT_EQ(data_options(c).synthetic_seed, static_cast<uint64_t>(c.train.seed));
  EXPECT_EQ(net_options(c).seed, static_cast<uint64_t>(c.train.seed));
}

// The samples reach the ends of the ranges the reference prints.
TEST(OptionsSchema, SamplesCoverRangeEndsAndEveryName) {
  for (const KeySamples& k : key_samples()) {
    if (k.key == "compression.qsgd_levels") {
      EXPECT_EQ(k.accepted.front(), "1");
      EXPECT_EQ(k.accepted.back(), std::to_string(tern::kMaxQsgdLevels));
    }
    if (k.key == "compression.method") {
      EXPECT_EQ(k.accepted.size(), tern::kMethods.size());
    }
    if (k.key == "model.name") {
      EXPECT_EQ(k.accepted.size(), net_names().size());
    }
  }
  // A value past the library's range is refused by the config, naming the key.
  try {
    default_config({"compression.qsgd_levels=128"});
    FAIL() << "qsgd_levels = 128 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compression.qsgd_levels"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tg::train
