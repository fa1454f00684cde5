// TensorBoard output of the CLI (issue 16 item 5): `terngrad train` and `terngrad measure-bounds`
// write event files that the `tensorboard` Python package reads back with exactly the numbers of
// metrics.jsonl / bounds.jsonl (tests/train/check_tensorboard.py); train.tensorboard = false
// turns them off; --help and the config reference say where they go.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cmd/cli_util.h"
#include "tests/testing/tensorboard_check.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;

int count_event_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  return n;
}

// Fails the test on a mismatch; skips it when the tensorboard package is not installed.
#define TG_EXPECT_EVENTS_MATCH(dir, bounds)                        \
  do {                                                             \
    const ScriptResult check = check_tensorboard((dir), (bounds)); \
    if (check.exit_code == 77) GTEST_SKIP() << check.output;       \
    EXPECT_EQ(check.exit_code, 0) << check.output;                 \
    EXPECT_TRUE(contains(check.output, "match")) << check.output;  \
  } while (0)

TEST(TensorBoardCli, TrainWritesMetricsAsScalars) {
  TempDir tmp;
  const std::string out = tmp / "run";
  // Two emulated workers with TernGrad: wire bytes and the compression split are non-zero.
  const CliResult r =
      run_cli(quick_train_args(out, 20,
                               {"--set", "workers.count=2", "--set", "compression.method=terngrad",
                                "--set", "train.eval_every=10"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_event_files(out), 1);
  TG_EXPECT_EVENTS_MATCH(out, false);
}

TEST(TensorBoardCli, MeasureBoundsWritesScalerAndSparsityPerTensor) {
  TempDir tmp;
  const std::string out = tmp / "b";
  const CliResult r = run_cli({"measure-bounds", "--no-progress",
                               "--set",          "data.name=synthetic",
                               "--set",          "data.synthetic_size=512",
                               "--set",          "data.eval_batch_size=128",
                               "--set",          "train.batch_size=16",
                               "--set",          "train.iterations=12",
                               "--set",          "train.log_every=5",
                               "--set",          "train.checkpoint_every=0",
                               "--set",          "compression.method=terngrad",
                               "--every",        "5",
                               "--out",          out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_event_files(out), 1);
  EXPECT_EQ(count_event_files(fs::path(out) / "train"), 1);
  TG_EXPECT_EVENTS_MATCH(out, true);
  TG_EXPECT_EVENTS_MATCH((fs::path(out) / "train").string(), false);
}

TEST(TensorBoardCli, TheConfigKeyTurnsItOff) {
  TempDir tmp;
  const std::string out = tmp / "run";
  const CliResult r = run_cli(quick_train_args(out, 5, {"--set", "train.tensorboard=false"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(fs::path(out) / "metrics.jsonl"));
  EXPECT_EQ(count_event_files(out), 0);
}

TEST(TensorBoardCli, HelpAndReferenceSayWhereTheFilesGo) {
  CliResult r = run_cli({"train", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "events.out.tfevents")) << r.out;
  EXPECT_TRUE(contains(r.out, "tensorboard --logdir")) << r.out;
  r = run_cli({"measure-bounds", "--help"});
  EXPECT_TRUE(contains(r.out, "tensorboard --logdir")) << r.out;
  r = run_cli({"config", "--reference"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "| `train.tensorboard` | boolean | `true` |")) << r.out;
}

}  // namespace
}  // namespace tg::testing
