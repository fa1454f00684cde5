// The run configuration (config/config.h): defaults, full-file parsing, every error path (the
// message must name the key / position), --set overrides, the to_toml round trip and the
// reference table.
#include "config/config.h"

#include <gtest/gtest.h>

#include <toml++/toml.h>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/json.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::config {
namespace {

using tg::testing::expect_error_with;

void expect_file_error(const std::string& text, const std::vector<std::string>& fragments) {
  expect_error_with([&] { parse_config(text, "run.toml"); }, fragments);
}

void expect_set_error(const std::vector<std::string>& overrides,
                      const std::vector<std::string>& fragments) {
  expect_error_with([&] { default_config(overrides); }, fragments);
}

TEST(Config, DefaultsAreTheLeNetMnistRecipe) {
  const Config c = default_config();
  EXPECT_EQ(c, Config{});
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.model.name, "lenet");
  EXPECT_EQ(c.data.dataset.name, "mnist");
  EXPECT_EQ(c.train.optimizer.name, "momentum");
  EXPECT_EQ(enum_name(kLrPolicies, c.train.schedule.policy), "polynomial");
  EXPECT_EQ(c.train.schedule.lr, 0.01);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_EQ(c.train.iterations, 10000);
  EXPECT_EQ(c.workers.count, 1);
  EXPECT_EQ(enum_name(tern::kMethods, c.compression.method), "none");
  EXPECT_EQ(c.compression.clip, 2.5);
  EXPECT_EQ(c.compression.min_size, 1);
  EXPECT_TRUE(c.compression.quantize_logits);
  EXPECT_EQ(c.compression.floating_grad_epoch, 0);
  EXPECT_EQ(enum_name(tern::kScalerSharings, c.compression.scaler_sharing), "max");
  EXPECT_EQ(enum_name(tern::kPackFormats, c.compression.pack), "two_bit");
  EXPECT_EQ(c.compression.qsgd_levels, 4);
  EXPECT_EQ(c.compression.qsgd_bucket, 512);
  EXPECT_EQ(parse_config("", "empty.toml"), Config{});
  EXPECT_EQ(parse_config("# only a comment\n", "c.toml"), Config{});
}

TEST(Config, ParsesAFullFile) {
  const std::string text = R"(
device = "cuda:1"

[model]
name = "alexnet"
num_classes = 1001
dropout = 0.5

[data]
name = "image-folder"
path = "/data/imagenet"
augment = false
preprocess = "inception"
image_size = 299
label_offset = 1
synthetic_size = 16
synthetic_channels = 3
synthetic_classes = 4
eval_batch_size = 50
eval_limit = 1000
prefetch = 0

[train]
iterations = 300000
batch_size = 256
optimizer = "adam"
lr = 2e-4
lr_policy = "step"
lr_power = 1
lr_end = 1e-6
lr_decay_steps = 100
lr_decay_epochs = 2.5
lr_decay_rate = 0.5
lr_staircase = false
lr_boundaries = [100000, 200000, 250000]
momentum = 0.0
adam_beta1 = 0.8
adam_beta2 = 0.99
adam_epsilon = 1.0
weight_decay = 0
seed = 7
log_every = 10
eval_every = 5000
ema_decay = 0
checkpoint_every = 0

[workers]
count = 4

[compression]
method = "terngrad"
clip = 0
min_size = 100
quantize_logits = false
floating_grad_epoch = 3
scaler_sharing = "none"
pack = "base3"
qsgd_levels = 16
qsgd_bucket = 128
)";
  const Config c = parse_config(text, "full.toml");
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.model.name, "alexnet");
  EXPECT_EQ(c.model.net.num_classes, 1001);
  EXPECT_EQ(c.model.net.dropout_ratio, 0.5);
  EXPECT_EQ(c.data.dataset.name, "image-folder");
  EXPECT_EQ(c.data.dataset.path, "/data/imagenet");
  EXPECT_FALSE(c.data.dataset.augment);
  EXPECT_EQ(enum_name(data::kPreprocesses, c.data.dataset.preprocess), "inception");
  EXPECT_EQ(c.data.dataset.image_size, 299);
  EXPECT_EQ(c.data.dataset.label_offset, 1);
  EXPECT_EQ(c.data.dataset.synthetic_size, 16);
  EXPECT_EQ(c.data.dataset.synthetic_channels, 3);
  EXPECT_EQ(c.data.dataset.synthetic_classes, 4);
  EXPECT_EQ(c.data.eval_batch_size, 50);
  EXPECT_EQ(c.data.eval_limit, 1000);
  EXPECT_EQ(c.data.prefetch, 0);
  EXPECT_EQ(c.train.iterations, 300000);
  EXPECT_EQ(c.train.batch_size, 256);
  EXPECT_EQ(c.train.optimizer.name, "adam");
  EXPECT_EQ(c.train.schedule.lr, 2e-4);
  EXPECT_EQ(enum_name(kLrPolicies, c.train.schedule.policy), "step");
  EXPECT_EQ(c.train.schedule.power, 1.0);  // integer accepted for a float key
  EXPECT_EQ(c.train.schedule.end_lr, 1e-6);
  EXPECT_EQ(c.train.schedule.decay_steps, 100);
  EXPECT_EQ(c.train.lr_decay_epochs, 2.5);
  EXPECT_EQ(c.train.schedule.decay_rate, 0.5);
  EXPECT_FALSE(c.train.schedule.staircase);
  EXPECT_EQ(c.train.schedule.boundaries, (std::vector<int64_t>{100000, 200000, 250000}));
  EXPECT_EQ(c.train.optimizer.momentum, 0.0);
  EXPECT_EQ(c.train.optimizer.beta1, 0.8);
  EXPECT_EQ(c.train.optimizer.beta2, 0.99);
  EXPECT_EQ(c.train.optimizer.epsilon, 1.0);
  EXPECT_EQ(c.train.weight_decay, 0.0);
  EXPECT_EQ(c.train.seed, 7);
  EXPECT_EQ(c.train.log_every, 10);
  EXPECT_EQ(c.train.eval_every, 5000);
  EXPECT_EQ(c.train.ema_decay, 0.0);
  EXPECT_EQ(c.train.checkpoint_every, 0);
  EXPECT_EQ(c.workers.count, 4);
  EXPECT_EQ(enum_name(tern::kMethods, c.compression.method), "terngrad");
  EXPECT_EQ(c.compression.clip, 0.0);  // integer accepted for a float key
  EXPECT_EQ(c.compression.min_size, 100);
  EXPECT_FALSE(c.compression.quantize_logits);
  EXPECT_EQ(c.compression.floating_grad_epoch, 3);
  EXPECT_EQ(enum_name(tern::kScalerSharings, c.compression.scaler_sharing), "none");
  EXPECT_EQ(enum_name(tern::kPackFormats, c.compression.pack), "base3");
  EXPECT_EQ(c.compression.qsgd_levels, 16);
  EXPECT_EQ(c.compression.qsgd_bucket, 128);
}

TEST(Config, EveryCompressionMethodParses) {
  for (const char* m : {"none", "fp16", "terngrad", "qsgd", "onebit"}) {
    SCOPED_TRACE(m);
    EXPECT_EQ(
        enum_name(tern::kMethods,
                  default_config({std::string("compression.method=") + m}).compression.method),
        m);
  }
}

TEST(Config, PartialFileKeepsOtherDefaultsAndAcceptsDottedKeys) {
  const Config c = parse_config("train.lr = 0.1\n[data]\nname = \"cifar10\"\n", "p.toml");
  Config expected;
  expected.train.schedule.lr = 0.1;
  expected.data.dataset.name = "cifar10";
  EXPECT_EQ(c, expected);
}

TEST(Config, LoadsFromFileAndNamesAnUnreadableOne) {
  const tg::testing::TempDir dir;
  const std::string path = dir / "tg_config_test.toml";
  tg::testing::write_text(path, "[train]\niterations = 5\n");
  EXPECT_EQ(load_config_file(path).train.iterations, 5);
  EXPECT_EQ(load_config_file(path, {"train.iterations=6"}).train.iterations, 6);
  std::remove(path.c_str());
  expect_error_with([&] { load_config_file(path); }, {"cannot open config file", path});
  expect_error_with([&] { load_config_file(dir.str()); }, {"is a directory"});
}

TEST(ConfigErrors, SyntaxErrorNamesFileLineAndColumn) {
  expect_file_error("[train]\nlr = 0.1\nbatch_size = = 3\n", {"run.toml:3:", "TOML syntax error"});
  expect_file_error("[train\n", {"run.toml:1:", "TOML syntax error"});
  expect_file_error("[train]\nlr = 0.1\nlr = 0.2\n", {"run.toml:3:", "TOML syntax error"});
}

TEST(ConfigErrors, UnknownSectionAndKeys) {
  expect_file_error("[optimizer]\nlr = 1\n",
                    {"run.toml:1:", "unknown section [optimizer]",
                     "[model], [data], [train], [workers], [compression]"});
  expect_file_error("\n\n[train]\nlr = 0.1\nlrr = 0.1\n",
                    {"run.toml:5:1", "unknown key 'lrr' in [train]", "known keys: iterations",
                     "batch_size", "checkpoint_every"});
  // train.workers moved to [workers] count.
  expect_file_error("[train]\nworkers = 2\n", {"run.toml:2:1", "unknown key 'workers' in [train]"});
  expect_file_error("[workers]\nnum = 2\n",
                    {"unknown key 'num' in [workers]", "known keys: count"});
  expect_file_error("[compression]\nqsgd_level = 2\n",
                    {"unknown key 'qsgd_level' in [compression]", "known keys: method, clip",
                     "qsgd_levels", "qsgd_bucket"});
  expect_file_error("[data]\nsize = 3\n", {"unknown key 'size' in [data]", "synthetic_size"});
  expect_file_error("devices = \"cpu\"\n",
                    {"run.toml:1:1", "unknown top-level key 'devices'", "device"});
  expect_file_error("[train.sub]\nx = 1\n", {"unknown key 'sub' in [train]"});
  expect_file_error("train = 5\n",
                    {"run.toml:1:", "train: expected a table [train]", "got integer 5"});
}

TEST(ConfigErrors, CudaKeysNameTheBadValueOrPin) {
  expect_file_error("[cuda]\nconv_algo = \"cudnn\"\n",
                    {"cuda.conv_algo", "im2col, igemm, autotune", "\"cudnn\""});
  expect_file_error(
      "[cuda]\nconv_algorithms = \"N1 fwd=igemm64x64; N1 bwd_data\"\n",
      {"run.toml:2:", "cuda.conv_algorithms", "'N1 bwd_data'", "<pass key>=<algorithm>"});
  expect_file_error("[cuda]\nconv_algorithms = \"N1 fwd=winograd\"\n",
                    {"cuda.conv_algorithms['N1 fwd']", "'winograd'"});
  expect_file_error("[cuda]\nconv_algorithms = \"N1 fwd=igemm64x64_tf32\"\n",
                    {"cuda.conv_algorithms['N1 fwd']", "igemm64x64_tf32", "cuda.tf32 is false"});
  const Config c = parse_config(
      "[cuda]\nconv_algo = \"igemm\"\ntf32 = true\nconv_algorithms = \"N1 fwd=im2col; N1 "
      "bwd_data=igemm32x128_tf32\"\n",
      "run.toml");
  EXPECT_EQ(c.cuda.conv_algo, "igemm");
  EXPECT_TRUE(c.cuda.tf32);
  EXPECT_EQ(c.cuda.conv_algorithms, "N1 fwd=im2col; N1 bwd_data=igemm32x128_tf32");
}

TEST(ConfigErrors, WrongTypes) {
  expect_file_error("[train]\nlr = \"abc\"\n",
                    {"run.toml:2:", "train.lr: expected a number, got string \"abc\""});
  expect_file_error("[train]\nbatch_size = 64.5\n",
                    {"train.batch_size: expected an integer, got float 64.5"});
  expect_file_error("[train]\nbatch_size = 64.0\n", {"train.batch_size: expected an integer"});
  expect_file_error("[data]\naugment = 1\n", {"data.augment: expected a boolean, got integer 1"});
  expect_file_error("[model]\nname = 3\n", {"model.name: expected a string, got integer 3"});
  expect_file_error("device = true\n", {"device: expected a string, got boolean true"});
  expect_file_error("[train]\nlr_boundaries = 5\n",
                    {"train.lr_boundaries: expected an array of integers, got integer 5"});
  expect_file_error("[train]\nlr_boundaries = [1, 2.5]\n",
                    {"train.lr_boundaries[1]: expected an integer, got float 2.5"});
  expect_file_error("[train]\nlr = 1979-05-27\n", {"train.lr: expected a number, got date"});
  expect_file_error("[train]\nlr = [0.1]\n", {"train.lr: expected a number, got array"});
  expect_file_error("[train]\nlr = {a = 1}\n", {"train.lr: expected a number, got a table"});
}

TEST(ConfigErrors, OutOfRangeNamesKeyAndValue) {
  struct Case {
    const char* text;
    std::vector<std::string> fragments;
  };
  const Case cases[] = {
      {"[train]\nbatch_size = 0\n", {"train.batch_size: must be in [1, 16777216], got 0"}},
      {"[train]\niterations = -5\n", {"train.iterations: must be >= 1, got -5"}},
      {"[train]\nlr = -0.1\n", {"train.lr: must be >= 0", "got -0.1"}},
      {"[train]\nlr = inf\n", {"train.lr: must be >= 0 and finite", "got inf"}},
      {"[train]\nlr = nan\n", {"train.lr:", "finite", "got nan"}},
      {"[train]\nmomentum = 1\n", {"train.momentum: must be in [0, 1)", "got 1.0"}},
      {"[train]\nmomentum = -0.1\n", {"train.momentum: must be in [0, 1)"}},
      {"[train]\nema_decay = 1.0\n", {"train.ema_decay: must be in [0, 1)"}},
      {"[train]\nadam_beta2 = 1.5\n", {"train.adam_beta2: must be in [0, 1)"}},
      {"[train]\nadam_epsilon = 0\n", {"train.adam_epsilon: must be > 0"}},
      {"[train]\nweight_decay = -1e-4\n", {"train.weight_decay: must be >= 0"}},
      {"[model]\ndropout = 1.0\n", {"model.dropout: must be < 1", "got 1.0"}},
      {"[model]\nnum_classes = -1\n", {"model.num_classes: must be in [0, 1048576]"}},
      {"[model]\nname = \"\"\n", {"model.name: must be one of lenet, cifarnet", "got \"\""}},
      {"[data]\nname = \"\"\n", {"data.name: must be one of mnist, fashion-mnist", "got \"\""}},
      {"[data]\npreprocess = \"vgg\"\n",
       {"data.preprocess: must be one of alexnet, inception", "got \"vgg\""}},
      {"[data]\neval_batch_size = 0\n", {"data.eval_batch_size: must be in [1, 16777216]"}},
      {"[data]\nprefetch = -1\n", {"data.prefetch: must be in [0, 1024]"}},
      {"[train]\neval_every = -1\n", {"train.eval_every: must be >= 0, got -1"}},
      {"[train]\nlog_every = 0\n", {"train.log_every: must be >= 1, got 0"}},
      {"[train]\ncheckpoint_every = -2\n", {"train.checkpoint_every: must be >= 0, got -2"}},
      {"[workers]\ncount = 0\n", {"workers.count: must be in [1, 1048576], got 0"}},
      {"[compression]\nmethod = \"ternary\"\n",
       {"compression.method: must be one of none, fp16, terngrad, qsgd, onebit",
        "got \"ternary\""}},
      {"[compression]\nclip = -0.5\n", {"compression.clip: must be >= 0", "got -0.5"}},
      {"[compression]\nclip = inf\n", {"compression.clip: must be >= 0 and finite"}},
      {"[compression]\nmin_size = -1\n", {"compression.min_size: must be >= 0, got -1"}},
      {"[compression]\nfloating_grad_epoch = -1\n",
       {"compression.floating_grad_epoch: must be >= 0, got -1"}},
      {"[compression]\nscaler_sharing = \"mean\"\n",
       {"compression.scaler_sharing: must be one of max, none", "got \"mean\""}},
      {"[compression]\npack = \"one_bit\"\n",
       {"compression.pack: must be one of two_bit, base3", "got \"one_bit\""}},
      {"[compression]\nqsgd_levels = 0\n", {"compression.qsgd_levels: must be in [1, 127], got 0"}},
      {"[compression]\nlevels = 2\n", {"compression.levels: must be in [3, 5], got 2"}},
      {"[compression]\nqsgd_levels = 128\n",
       {"compression.qsgd_levels: must be in [1, 127], got 128"}},
      {"[compression]\nqsgd_bucket = 0\n", {"compression.qsgd_bucket: must be >= 1, got 0"}},
      {"[compression]\nquantize_logits = 1\n",
       {"compression.quantize_logits: expected a boolean, got integer 1"}},
      {"[train]\nseed = -1\n", {"train.seed: must be >= 0"}},
      {"[train]\nlr_decay_rate = 0\n", {"train.lr_decay_rate: must be > 0"}},
      {"[train]\noptimizer = \"rmsprop\"\n",
       {"train.optimizer: must be one of sgd, momentum, adam", "got \"rmsprop\""}},
      {"[train]\nlr_policy = \"cosine\"\n",
       {"train.lr_policy: must be one of constant, polynomial, exponential, step",
        "got \"cosine\""}},
      {"device = \"gpu\"\n", {"device: must be cpu, cuda or cuda:N", "got \"gpu\""}},
      {"device = \"cuda:\"\n", {"device: must be cpu, cuda or cuda:N"}},
      {"device = \"cuda:-1\"\n", {"device: must be cpu, cuda or cuda:N"}},
      {"device = \"CPU\"\n", {"device: must be cpu, cuda or cuda:N"}},
      {"[train]\nlr_boundaries = [10, 10]\n",
       {"train.lr_boundaries: must be strictly increasing", "got [10, 10]"}},
      {"[train]\nlr_boundaries = [30, 20]\n", {"train.lr_boundaries: must be strictly increasing"}},
      {"[train]\nlr_boundaries = [-1, 20]\n", {"train.lr_boundaries:", "each >= 0"}},
      {"[train]\nbatch_size = 64\n[workers]\ncount = 3\n",
       {"run.toml:4:", "train.batch_size: must be a multiple of workers.count (3), got 64"}},
      {"[workers]\ncount = 3\n[train]\nbatch_size = 64\n",
       {"run.toml:", "train.batch_size: must be a multiple of workers.count (3), got 64"}},
      {"[train]\nlr_policy = \"exponential\"\nlr_decay_steps = 0\n",
       {"train.lr_policy = \"exponential\" needs train.lr_decay_steps > 0"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    expect_file_error(c.text, c.fragments);
  }
  // The position of the offending value is named when it came from the file.
  expect_file_error("[train]\n\nbatch_size = 0\n", {"run.toml:3:", "train.batch_size"});
}

TEST(ConfigErrors, ValuesAtTheBoundaryAreAccepted) {
  const Config c = parse_config(
      "[train]\nlr = 0\nmomentum = 0\nema_decay = 0.999999\nbatch_size = 1\niterations = 1\n"
      "eval_every = 0\ncheckpoint_every = 0\nlog_every = 1\nlr_boundaries = [0, 1]\n"
      "[model]\ndropout = -1\n",
      "b.toml");
  EXPECT_EQ(c.train.schedule.lr, 0.0);
  EXPECT_EQ(c.train.schedule.boundaries, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(parse_config("device = \"cuda\"", "d.toml").device, "cuda");
  EXPECT_EQ(parse_config("device = \"cuda:12\"", "d.toml").device, "cuda:12");
  EXPECT_EQ(parse_config("[train]\nlr_policy = \"exponential\"\nlr_decay_epochs = 2\n", "e")
                .train.lr_decay_epochs,
            2.0);
  const Config z = parse_config(
      "[compression]\nclip = 0\nmin_size = 0\nfloating_grad_epoch = 0\nqsgd_levels = 1\n"
      "qsgd_bucket = 1\n[workers]\ncount = 1\n",
      "z.toml");
  EXPECT_EQ(z.compression.clip, 0.0);
  EXPECT_EQ(z.compression.min_size, 0);
  EXPECT_EQ(z.compression.qsgd_levels, 1);
  EXPECT_EQ(z.compression.qsgd_bucket, 1);
  EXPECT_EQ(default_config({"compression.qsgd_levels=127"}).compression.qsgd_levels, 127);
}

TEST(ConfigOverrides, ValueKinds) {
  const Config c = default_config({
      "train.lr=0.1",
      "train.iterations = 100",
      "train.momentum=0",  // integer into a float key
      "data.augment=false",
      "model.name=\"cifarnet\"",  // quoted string
      "train.optimizer=adam",     // bare word
      "device=cuda:0",            // top-level key, bare word that is not TOML
      "train.lr_boundaries=[10, 20]",
      "data.path=/data/mnist dir",  // bare path with a space
      "train.batch_size=128",
      "workers.count=4",
      "compression.method=terngrad",  // bare word
      "compression.clip=0",           // integer into a float key
      "compression.quantize_logits=false",
  });
  EXPECT_EQ(c.train.schedule.lr, 0.1);
  EXPECT_EQ(c.train.iterations, 100);
  EXPECT_EQ(c.train.optimizer.momentum, 0.0);
  EXPECT_FALSE(c.data.dataset.augment);
  EXPECT_EQ(c.model.name, "cifarnet");
  EXPECT_EQ(c.train.optimizer.name, "adam");
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.train.schedule.boundaries, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(c.data.dataset.path, "/data/mnist dir");
  EXPECT_EQ(c.train.batch_size, 128);
  EXPECT_EQ(c.workers.count, 4);
  EXPECT_EQ(enum_name(tern::kMethods, c.compression.method), "terngrad");
  EXPECT_EQ(c.compression.clip, 0.0);
  EXPECT_FALSE(c.compression.quantize_logits);
  EXPECT_EQ(default_config({"device=cuda"}).device, "cuda");
  // A string key takes the text as written even when it would parse as another TOML type.
  EXPECT_EQ(default_config({"data.path=2024-01-01"}).data.dataset.path, "2024-01-01");
  EXPECT_EQ(default_config({"comm.interface=123"}).comm.group.interface, "123");
  EXPECT_EQ(default_config({"data.path="}).data.dataset.path, "");
  // The value keeps any '=' after the first.
  EXPECT_EQ(default_config({"data.path=/a=b"}).data.dataset.path, "/a=b");
}

TEST(ConfigOverrides, AppliedAfterTheFileAndValidatedTogether) {
  const std::string text = "[train]\nlr = 0.5\nbatch_size = 64\n[workers]\ncount = 2\n";
  const Config c = parse_config(text, "f.toml", {"train.lr=0.25", "train.lr=0.125"});
  EXPECT_EQ(c.train.schedule.lr, 0.125);  // last override wins
  EXPECT_EQ(c.workers.count, 2);
  // Invalid in the file, fixed by an override: fine, validation happens after overrides.
  EXPECT_EQ(
      parse_config("[train]\nbatch_size = 0\n", "f.toml", {"train.batch_size=8"}).train.batch_size,
      8);
  // Each setting alone is valid, together they are not; the error names the override.
  expect_error_with([&] { parse_config(text, "f.toml", {"workers.count=3"}); },
                    {"--set 'workers.count=3'",
                     "train.batch_size: must be a multiple of "
                     "workers.count (3), got 64"});
  expect_error_with([&] { parse_config(text, "f.toml", {"train.batch_size=63"}); },
                    {"--set 'train.batch_size=63'",
                     "train.batch_size: must be a multiple of "
                     "workers.count (2), got 63"});
  // Changing both together is fine.
  EXPECT_EQ(
      parse_config(text, "f.toml", {"train.batch_size=2048", "workers.count=16"}).workers.count,
      16);
}

TEST(ConfigOverrides, Errors) {
  expect_set_error({"train.lr"}, {"--set 'train.lr'", "expected section.key=value"});
  expect_set_error({"=3"}, {"--set '=3'", "expected section.key=value"});
  expect_set_error({"optim.lr=3"}, {"--set 'optim.lr=3'", "unknown section [optim]"});
  expect_set_error({"train.lrr=3"},
                   {"--set 'train.lrr=3'", "unknown key 'lrr' in [train]", "known keys:"});
  expect_set_error({"lr=3"}, {"--set 'lr=3'", "unknown top-level key 'lr'", "device"});
  expect_set_error({"train.lr=abc"},
                   {"--set 'train.lr=abc'", "train.lr: expected a number, got string \"abc\""});
  expect_set_error({"train.batch_size=1.5"},
                   {"train.batch_size: expected an integer, got float 1.5"});
  expect_set_error({"data.augment=yes"}, {"data.augment: expected a boolean, got string"});
  expect_set_error({"train.batch_size=0"}, {"--set 'train.batch_size=0'",
                                            "train.batch_size: must be in [1, 16777216], got 0"});
  // Sizes past what any run needs are refused by the key's range, not by an overflow deep in a
  // library (a shape, a vector) that names no key.
  expect_set_error({"model.num_classes=9223372036854775807"},
                   {"--set 'model.num_classes=9223372036854775807'",
                    "model.num_classes: must be in [0, 1048576], got 9223372036854775807"});
  expect_set_error({"train.batch_size=9223372036854775807"},
                   {"train.batch_size: must be in [1, 16777216]"});
  expect_set_error({"data.synthetic_size=9223372036854775807"},
                   {"data.synthetic_size: must be in [1, 1073741824]"});
  expect_set_error({"workers.count=4294967296"}, {"workers.count: must be in [1, 1048576]"});
  expect_set_error({"device=tpu"}, {"--set 'device=tpu'", "device: must be cpu, cuda or cuda:N"});
  expect_set_error({"train.optimizer=rmsprop"}, {"train.optimizer: must be one of"});
  expect_set_error({"train.lr_boundaries=[3, 1]"}, {"train.lr_boundaries: must be strictly"});
  expect_set_error({"train.workers=4"},
                   {"--set 'train.workers=4'", "unknown key 'workers' in [train]"});
  expect_set_error({"compression.method=sign"},
                   {"--set 'compression.method=sign'",
                    "compression.method: must be one of none, fp16, terngrad, qsgd, onebit"});
  expect_set_error({"compression.qsgd_levels=70000"},
                   {"compression.qsgd_levels: must be in [1, 127], got 70000"});
  expect_set_error({"compression.clip=-1"}, {"compression.clip: must be >= 0"});
  expect_set_error({"compress.method=none"},
                   {"unknown section [compress]", "[workers], [compression]"});
}

// A config with every key changed from its default, awkward strings and doubles that need
// all 17 significant digits.
Config unusual_config() {
  Config c;
  c.device = "cuda:3";
  c.cuda.conv_algo = "autotune";
  c.cuda.conv_algorithms = "N1 C3 H8 W8 K4 R3 S3 P8 Q8 s1x1 p1x1 g1 fwd=igemm64x64s2";
  c.cuda.tf32 = true;
  c.model.name = "vgg_a";
  c.model.net.num_classes = 1001;
  c.model.net.dropout_ratio = 1.0 / 3.0;
  c.data.dataset.name = "image-folder";
  c.data.dataset.path = "C:\\dir \"quoted\"\n\ttab \xc3\xbc\x01\x7f'single'";
  c.data.dataset.augment = false;
  c.data.dataset.preprocess = data::Preprocess::inception;
  c.data.dataset.image_size = 224;
  c.data.dataset.label_offset = 1;
  c.data.dataset.skip_bad_files = true;
  c.data.dataset.fast_decode = true;
  c.data.pin_memory = false;
  c.data.dataset.synthetic_size = 3;
  c.data.dataset.synthetic_channels = 2;
  c.data.dataset.synthetic_classes = 7;
  c.data.eval_batch_size = 13;
  c.data.eval_limit = 99;
  c.data.prefetch = 5;
  c.data.loader_threads = 3;
  c.train.iterations = 123456789012;
  c.train.batch_size = 96;
  c.train.optimizer.name = "sgd";
  c.train.schedule.lr = 0.1 + 0.2;
  c.train.schedule.policy = LrPolicy::exponential;
  c.train.schedule.power = 2.0;
  c.train.schedule.end_lr = 1e-300;
  c.train.schedule.decay_steps = 350;
  c.train.lr_decay_epochs = 1e20;
  c.train.schedule.decay_rate = 0.94;
  c.train.schedule.staircase = false;
  c.train.schedule.boundaries = {0, 5, 9000000000};
  c.train.optimizer.momentum = 0.9999999999999999;
  c.train.optimizer.beta1 = 5e-324;
  c.train.optimizer.beta2 = 0.123456789012345678;
  c.train.optimizer.epsilon = 1.0;
  c.train.weight_decay = 4e-5;
  c.train.seed = 9007199254740993;
  c.train.log_every = 1;
  c.train.eval_every = 17;
  c.train.ema_decay = 0.0;
  c.train.checkpoint_every = 0;
  c.train.checkpoint_minutes = 1.0 / 3.0;
  c.train.keep_checkpoints = 1000;
  c.workers.count = 8;
  c.compression.method = tern::Method::qsgd;
  c.compression.clip = 1.0 / 7.0;
  c.compression.min_size = 0;
  c.compression.quantize_logits = false;
  c.compression.floating_grad_epoch = 4;
  c.compression.scaler_sharing = tern::ScalerSharing::none;
  c.compression.pack = tern::PackFormat::base3;
  c.compression.qsgd_levels = 127;
  c.compression.qsgd_bucket = 7;
  c.compression.error_feedback = true;
  c.compression.levels = 5;
  c.compression.rescale = true;
  c.train.tensorboard = false;
  c.comm.group.backend = comm::Backend::nccl;
  c.comm.group.timeout = 0.1 + 0.7;
  c.comm.group.interface = "eth1";
  c.comm.group.ranks_per_node = 4;
  c.comm.group.secret_file = "secrets/job key";
  c.comm.group.sched_batch = false;
  c.comm.reducer.bucket_mb = 1.0 / 3.0;
  c.comm.reducer.overlap = false;
  c.comm.exchange.algorithm = tern::Route::ring;
  c.comm.max_restarts = 7;
  return c;
}

// "section.key" -> the value's TOML text, for every key line of to_toml's output.
std::map<std::string, std::string> key_lines(const std::string& toml_text) {
  std::map<std::string, std::string> out;
  std::istringstream in(toml_text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" = ");
    out[(section.empty() ? "" : section + ".") + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

TEST(ConfigRoundTrip, ToTomlParsesBackExactly) {
  const Config defaults;
  EXPECT_EQ(parse_config(to_toml(defaults), "resolved.toml"), defaults);
  const Config c = unusual_config();
  ASSERT_FALSE(c == defaults);
  const std::string text = to_toml(c);
  const Config back = parse_config(text, "resolved.toml");
  EXPECT_EQ(back.data.dataset.path, c.data.dataset.path);
  EXPECT_EQ(back.train.optimizer.momentum, c.train.optimizer.momentum);
  EXPECT_EQ(back.train.optimizer.beta1, c.train.optimizer.beta1);
  EXPECT_EQ(back, c) << text;
  // Every key of the reference differs from its default, so this also proves each key is
  // written and read back into its field.
  const auto lines = key_lines(text), default_lines = key_lines(to_toml(defaults));
  ASSERT_EQ(lines.size(), default_lines.size());
  size_t reference_rows = 0;
  const std::string ref = reference_markdown();
  for (size_t p = ref.find("\n| `"); p != std::string::npos; p = ref.find("\n| `", p + 1))
    ++reference_rows;
  EXPECT_EQ(lines.size(), reference_rows);
  for (const auto& [key, value] : lines) EXPECT_NE(value, default_lines.at(key)) << key;
  EXPECT_NE(back.model, defaults.model);
  EXPECT_EQ(back.workers, c.workers);
  EXPECT_EQ(back.compression, c.compression);
  EXPECT_NE(back.workers, defaults.workers);
  EXPECT_NE(back.compression, defaults.compression);
  // The new sections come after [train], in table order.
  const size_t train_at = text.find("\n[train]\n");
  const size_t workers_at = text.find("\n[workers]\n");
  const size_t compression_at = text.find("\n[compression]\n");
  ASSERT_NE(train_at, std::string::npos) << text;
  ASSERT_NE(workers_at, std::string::npos) << text;
  ASSERT_NE(compression_at, std::string::npos) << text;
  EXPECT_LT(train_at, workers_at);
  EXPECT_LT(workers_at, compression_at);
  EXPECT_EQ(to_toml(back), text);
  // Float keys holding whole numbers are written as TOML floats.
  EXPECT_NE(text.find("adam_epsilon = 1.0\n"), std::string::npos) << text;
  const std::string default_text = to_toml(defaults);
  EXPECT_NE(default_text.find("weight_decay = 5e-4\n"), std::string::npos) << default_text;
  EXPECT_NE(default_text.find("dropout = -1.0\n"), std::string::npos) << default_text;
}

TEST(ConfigRoundTrip, ToJsonHasEveryKey) {
  const Config c = unusual_config();
  const json::Value v = json::parse(to_json(c));
  EXPECT_EQ(v["device"].as_string(), "cuda:3");
  EXPECT_EQ(v["model"]["name"].as_string(), "vgg_a");
  EXPECT_EQ(v["model"]["dropout"].as_number(), 1.0 / 3.0);
  EXPECT_EQ(v["data"]["path"].as_string(), c.data.dataset.path);
  EXPECT_FALSE(v["data"]["augment"].b);
  EXPECT_EQ(v["train"]["lr"].as_number(), 0.1 + 0.2);
  ASSERT_EQ(v["train"]["lr_boundaries"].arr.size(), 3u);
  EXPECT_EQ(v["train"]["lr_boundaries"].arr[1].as_number(), 5.0);
  EXPECT_FALSE(v["train"].has("workers"));
  EXPECT_EQ(v["workers"]["count"].as_number(), 8.0);
  EXPECT_EQ(v["compression"]["method"].as_string(), "qsgd");
  EXPECT_EQ(v["compression"]["clip"].as_number(), 1.0 / 7.0);
  EXPECT_FALSE(v["compression"]["quantize_logits"].b);
  EXPECT_EQ(v["compression"]["pack"].as_string(), "base3");
  EXPECT_EQ(v["compression"]["qsgd_levels"].as_number(), 127.0);
  // Same key set as the TOML form.
  const toml::table t = toml::parse(to_toml(c));
  size_t toml_keys = 0, json_keys = 0;
  for (auto&& [k, node] : t) {
    if (const auto* sec = node.as_table()) {
      toml_keys += sec->size();
      ASSERT_TRUE(v.has(k.str())) << k.str();
      for (auto&& [sk, sn] : *sec) EXPECT_TRUE(v[k.str()].has(sk.str())) << sk.str();
    } else {
      ++toml_keys;
      EXPECT_TRUE(v.has(k.str())) << k.str();
    }
  }
  for (const auto& [k, node] : v.obj) {
    json_keys += node.type == json::Value::Type::object ? node.obj.size() : 1;
  }
  EXPECT_EQ(toml_keys, json_keys);
}

TEST(ConfigReference, ListsEveryKeyOnce) {
  const std::string ref = reference_markdown();
  EXPECT_EQ(ref.rfind("| key | type | default | meaning |", 0), 0u) << ref;
  // Every key of the resolved TOML appears exactly once as a row.
  const toml::table t = toml::parse(to_toml(Config{}));
  size_t keys = 0;
  auto check = [&](const std::string& name) {
    ++keys;
    const std::string cell = "| `" + name + "` |";
    const size_t at = ref.find(cell);
    EXPECT_NE(at, std::string::npos) << name;
    EXPECT_EQ(ref.find(cell, at + 1), std::string::npos) << name << " listed twice";
  };
  for (auto&& [k, node] : t) {
    if (const auto* sec = node.as_table()) {
      for (auto&& [sk, sn] : *sec) check(std::string(k.str()) + "." + std::string(sk.str()));
    } else {
      check(std::string(k.str()));
    }
  }
  size_t rows = 0;
  for (size_t p = ref.find("\n| `"); p != std::string::npos; p = ref.find("\n| `", p + 1)) ++rows;
  EXPECT_EQ(rows, keys);
  EXPECT_GE(keys, 48u);
  // Types, defaults and rules show up in the row.
  EXPECT_NE(ref.find("| `train.lr` | float | `0.01` |"), std::string::npos) << ref;
  EXPECT_NE(ref.find("| `train.batch_size` | integer | `64` |"), std::string::npos);
  EXPECT_NE(ref.find("| `device` | string | `\"cpu\"` |"), std::string::npos);
  EXPECT_NE(ref.find("| `train.lr_boundaries` | integer array | `[]` |"), std::string::npos);
  EXPECT_NE(ref.find("one of sgd, momentum, adam"), std::string::npos);
  EXPECT_EQ(ref.find("`train.workers`"), std::string::npos) << ref;
  EXPECT_NE(ref.find("| `workers.count` | integer | `1` |"), std::string::npos) << ref;
  EXPECT_NE(ref.find("| `compression.method` | string | `\"none\"` |"), std::string::npos);
  EXPECT_NE(ref.find("one of none, fp16, terngrad, qsgd, onebit"), std::string::npos);
  EXPECT_NE(ref.find("| `compression.clip` | float | `2.5` |"), std::string::npos);
  EXPECT_NE(ref.find("| `compression.quantize_logits` | boolean | `true` |"), std::string::npos);
  EXPECT_NE(ref.find("| `compression.pack` | string | `\"two_bit\"` |"), std::string::npos);
  EXPECT_NE(ref.find("| `compression.qsgd_levels` | integer | `4` |"), std::string::npos);
  EXPECT_NE(ref.find("(in [1, 127])"), std::string::npos) << ref;
  EXPECT_NE(ref.find("| `compression.qsgd_bucket` | integer | `512` |"), std::string::npos);
  // Each compression key says which method it belongs to.
  for (const char* key :
       {"clip", "min_size", "quantize_logits", "floating_grad_epoch", "scaler_sharing", "pack"}) {
    const size_t at = ref.find(std::string("| `compression.") + key + "` |");
    ASSERT_NE(at, std::string::npos) << key;
    const std::string row = ref.substr(at, ref.find('\n', at) - at);
    EXPECT_NE(row.find("terngrad:"), std::string::npos) << row;
  }
  // Rows follow the table order: [train], then [workers], then [compression].
  EXPECT_LT(ref.find("`train.checkpoint_every`"), ref.find("`workers.count`"));
  EXPECT_LT(ref.find("`workers.count`"), ref.find("`compression.method`"));
}

// The README's key table is the reference, generated (`terngrad config --reference`): a key, a
// default or a doc changed in the schema and not in the README fails here.
TEST(ConfigReference, TheReadmeTableIsTheReference) {
  std::ifstream in(TG_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << TG_SOURCE_DIR "/README.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const size_t at = readme.find("| key | type | default | meaning |");
  ASSERT_NE(at, std::string::npos);
  const size_t end = readme.find("\n\n", at);
  EXPECT_EQ(readme.substr(at, end - at + 1), reference_markdown())
      << "README.md's key table differs from `terngrad config --reference`: paste the latter";
}

}  // namespace
}  // namespace tg::config
