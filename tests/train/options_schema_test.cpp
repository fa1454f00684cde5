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
#include "terngrad/ternary_collectives.h"
#include "train/options.h"

namespace tg::train {
namespace {

using namespace tg::config;

constexpr int64_t kTrainSize = 64;

// Small defaults the sampled key is applied over: synthetic data, so no files are needed.
std::vector<std::string> base_overrides() {
  return {"data.name=synthetic", "data.synthetic_size=8", "train.batch_size=8"};
}

// Builds what a run builds from `c`; throws what a library throws.
void build_libraries(const Config& c) {
  const auto net = make_net(c.model.name, net_options(c), Device::cpu());
  if (c.data.name == "synthetic") {
    data::open_dataset(data_options(c), data::Split::train);
  } else {  // files would be needed: the name must be one the registry opens
    const auto names = data::dataset_names();
    if (std::find(names.begin(), names.end(), c.data.name) == names.end())
      TG_THROW("no dataset '", c.data.name, "'");
  }
  make_optimizer(optimizer_options(c));
  LrSchedule schedule(lr_schedule_options(c, kTrainSize));
  schedule(0);
  tern::make_compressor(compression_options(c, kTrainSize), grad_layout(*net));
  if (c.train.ema_decay > 0) Ema ema(net->arena().params(), c.train.ema_decay);
  exchange_options(c);
  comm::resolve_backend(group_options(c).backend, parse_device(c.device));
  comm::ReducerOptions reducer = reducer_options(c);
  EXPECT_GE(reducer.bucket_bytes(), 1);
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

// A key's default is the library's: the options a default Config gives each library equal that
// library's own default-constructed options, field by field, except where the config's default
// is the paper's recipe rather than the library's (each named here with its reason).
TEST(OptionsSchema, ConfigDefaultsAreTheLibrariesDefaults) {
  const Config c;
  const int64_t train_size = 60000;

  const tern::CompressionOptions z = compression_options(c, train_size), zl;
  EXPECT_EQ(z.method, zl.method);
  EXPECT_EQ(z.clip, zl.clip);
  EXPECT_EQ(z.min_size, zl.min_size);
  EXPECT_EQ(z.quantize_logits, zl.quantize_logits);
  EXPECT_EQ(z.floating_grad_epoch, zl.floating_grad_epoch);
  EXPECT_EQ(z.scaler_sharing, zl.scaler_sharing);
  EXPECT_EQ(z.pack, zl.pack);
  EXPECT_EQ(z.error_feedback, zl.error_feedback);
  EXPECT_EQ(z.levels, zl.levels);
  EXPECT_EQ(z.rescale, zl.rescale);
  EXPECT_EQ(z.qsgd_levels, zl.qsgd_levels);
  EXPECT_EQ(z.qsgd_bucket, zl.qsgd_bucket);
  EXPECT_EQ(z.seed, zl.seed);

  const OptimizerOptions o = optimizer_options(c), ol;
  EXPECT_EQ(o.name, ol.name);
  EXPECT_EQ(o.momentum, ol.momentum);
  EXPECT_EQ(o.beta1, ol.beta1);
  EXPECT_EQ(o.beta2, ol.beta2);
  EXPECT_EQ(o.epsilon, ol.epsilon);

  const LrScheduleOptions l = lr_schedule_options(c, train_size), ll;
  // The recipe: the paper's LeNet schedule decays polynomially over the run (the library's own
  // default is a constant rate).
  EXPECT_EQ(l.policy, LrPolicy::polynomial);
  EXPECT_EQ(ll.policy, LrPolicy::constant);
  EXPECT_EQ(l.lr, ll.lr);
  EXPECT_EQ(l.end_lr, ll.end_lr);
  EXPECT_EQ(l.power, ll.power);
  EXPECT_EQ(l.decay_rate, ll.decay_rate);
  EXPECT_EQ(l.staircase, ll.staircase);
  EXPECT_EQ(l.boundaries, ll.boundaries);
  EXPECT_EQ(l.decay_steps, c.train.iterations);  // 0 in the library = the run's iterations

  const data::DataOptions d = data_options(c), dl;
  EXPECT_EQ(d.name, dl.name);
  EXPECT_EQ(d.path, dl.path);
  EXPECT_EQ(d.augment, dl.augment);
  EXPECT_EQ(d.preprocess, dl.preprocess);
  EXPECT_EQ(d.image_size, dl.image_size);
  EXPECT_EQ(d.label_offset, dl.label_offset);
  EXPECT_EQ(d.synthetic_size, dl.synthetic_size);
  EXPECT_EQ(d.synthetic_channels, dl.synthetic_channels);
  EXPECT_EQ(d.synthetic_classes, dl.synthetic_classes);
  EXPECT_EQ(d.synthetic_seed, static_cast<uint64_t>(c.train.seed));  // one seed for the run

  const NetOptions n = net_options(c), nl;
  EXPECT_EQ(n.num_classes, nl.num_classes);
  EXPECT_EQ(n.dropout_ratio, nl.dropout_ratio);
  EXPECT_EQ(n.seed, nl.seed);
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
