// Runs that survive a lost rank (`terngrad train --nproc P --max-restarts N`), and the checkpoints
// they fall back on, as real processes of the real binary:
//   - the promise: a two-rank TernGrad run whose rank 1 is killed with SIGKILL after the first
//     checkpoint, or stopped with SIGSTOP past comm.timeout, is restarted by the launcher and
//     ends with the params_sha256 of the same run never interrupted (the one-process run with
//     the same workers, bit-identical to processes: tests/cmd/train_distributed_test.cpp);
//   - --resume starts a run that has no checkpoint yet (a restart loop's first attempt);
//   - the last train.keep_checkpoints are kept, and a damaged newest one falls back to the
//     previous intact one; checkpoints by the clock (train.checkpoint_minutes);
//   - bad input: --max-restarts without --nproc, restarts without --out, a bad TG_RESTARTS.
// Short LeNet runs on the real MNIST files (../shared/data/mnist).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"
#include "tests/testing/files.h"
#include "train/checkpoint.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;

const std::string kMnist = std::string(TG_SHARED_DATA_DIR) + "/mnist";

// LeNet/MNIST with TernGrad, two workers, batch 48: `iterations` iterations, a checkpoint every
// `every`; `extra` goes before --out.
std::vector<std::string> run_args(const std::string& out, int iterations, int every,
                                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"train", "--no-progress",
                                "--set", "data.path=" + kMnist,
                                "--set", "data.eval_limit=500",
                                "--set", "train.batch_size=48",
                                "--set", "train.iterations=" + std::to_string(iterations),
                                "--set", "train.log_every=5",
                                "--set", "train.checkpoint_every=" + std::to_string(every),
                                "--set", "workers.count=2",
                                "--set", "compression.method=terngrad"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("--out");
  a.push_back(out);
  return a;
}

json::Value summary_of(const std::string& out) {
  return json::parse(read_text(out + "/summary.json"));
}

void expect_ok(const CliResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 0) << what << "\nstderr:\n" << r.err;
}

// params_sha256 of the run never interrupted (one process, both workers emulated), once per
// setting.
std::string reference_sha(int iterations, int every) {
  static std::map<std::pair<int, int>, std::string> cache;
  static TempDir dir;
  const auto key = std::make_pair(iterations, every);
  if (!cache.count(key)) {
    const std::string out =
        dir / ("ref-" + std::to_string(iterations) + "-" + std::to_string(every));
    const CliResult r = run_cli(run_args(out, iterations, every));
    expect_ok(r, "reference run");
    cache[key] = summary_of(out)["params_sha256"].as_string();
  }
  return cache[key];
}

// The steps of metrics.jsonl's train records, in file order.
std::vector<int64_t> train_steps(const std::string& out) {
  std::vector<int64_t> steps;
  for (const json::Value& v : json_lines(read_text(out + "/metrics.jsonl")))
    if (v["type"].as_string() == "train")
      steps.push_back(static_cast<int64_t>(v["step"].as_number()));
  return steps;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out", 0) != 0)
      names.insert(e.path().filename().string());
  return names;
}

// Starts the two-rank run with restarts, waits for its first checkpoint, does `fault` to rank 1
// and waits for the launcher; the run must end with the uninterrupted run's parameters after one
// restart. Returns the launcher's stderr.
std::string survive(int fault, const std::vector<std::string>& extra) {
  constexpr int kIterations = 120, kEvery = 20;
  const std::string want = reference_sha(kIterations, kEvery);
  TempDir dir;
  const std::string out = dir / "run";
  std::vector<std::string> args = run_args(out, kIterations, kEvery, extra);
  args.insert(args.end() - 2, {"--nproc", "2", "--max-restarts", "2"});
  const pid_t launcher = spawn_cli(args, dir / "out", dir / "err");
  const bool checkpointed =
      wait_for_line(out + "/metrics.jsonl", "\"step\":" + std::to_string(kEvery + 5),
                    std::chrono::seconds(120), launcher);
  EXPECT_TRUE(checkpointed) << read_text(dir / "err");
  const pid_t victim = rank_pid(launcher, 1);
  EXPECT_GT(victim, 0) << "rank 1's process not found";
  if (checkpointed && victim > 0) {
    EXPECT_EQ(::kill(victim, fault), 0);
  }
  const int code = wait_exit_within(launcher, 180);
  const std::string err = read_text(dir / "err");
  EXPECT_EQ(code, 0) << err;
  if (code != 0) return err;
  const json::Value s = summary_of(out);
  EXPECT_EQ(s["params_sha256"].as_string(), want) << err;
  EXPECT_EQ(s["restarts"].as_number(), 1) << err;
  const double start = s["start_iteration"].as_number();
  EXPECT_GE(start, kEvery) << "the restart resumed from a checkpoint, not from the start";
  EXPECT_LT(start, kIterations) << "the fault came after the run's end";
  EXPECT_TRUE(contains(err, "[launch] restart 1 of 2 after rank ")) << err;
  EXPECT_TRUE(contains(err, "--resume: continuing from " + out + "/checkpoint")) << err;
  // metrics.jsonl: every logged step once, in order (what the first start logged after its last
  // checkpoint was dropped and redone).
  std::vector<int64_t> want_steps;
  for (int64_t step = 5; step <= kIterations; step += 5) want_steps.push_back(step);
  EXPECT_EQ(train_steps(out), want_steps);
  return err;
}

TEST(TrainRestart, KilledRankRestartsAndEndsBitIdentical) {
  ASSERT_TRUE(fs::exists(kMnist + "/train-images-idx3-ubyte.gz")) << "MNIST missing at " << kMnist;
  const std::string err = survive(SIGKILL, {});
  EXPECT_TRUE(contains(err, "restart 1 of 2 after rank 1 was killed by signal 9 (SIGKILL)")) << err;
}

TEST(TrainRestart, RankStoppedPastTheTimeoutRestartsAndEndsBitIdentical) {
  // Rank 1 stops (SIGSTOP: alive, silent); rank 0 gives up on it after comm.timeout and exits
  // naming it; the launcher kills the stopped rank and restarts both.
  const std::string err = survive(SIGSTOP, {"--set", "comm.timeout=3"});
  EXPECT_TRUE(contains(err, "restart 1 of 2 after rank 0 exited with status 1: terngrad: error:"))
      << err;
}

TEST(TrainRestart, ResumeStartsARunThatHasNoCheckpointYet) {
  TempDir dir;
  const std::string out = dir / "run";
  // A first attempt killed before its first checkpoint left metrics.jsonl behind.
  fs::create_directories(out);
  write_text(out + "/metrics.jsonl", "{\"type\":\"train\",\"step\":5}\n{\"type\":\"tr");
  std::vector<std::string> args = run_args(out, 30, 10);
  args.push_back("--resume");
  const CliResult r = run_cli(args);
  expect_ok(r, "--resume into a directory without a checkpoint");
  EXPECT_TRUE(
      contains(r.err, "--resume: no checkpoint in " + out + " yet; starting from iteration 0"))
      << r.err;
  const json::Value s = summary_of(out);
  EXPECT_EQ(s["start_iteration"].as_number(), 0);
  EXPECT_EQ(s["restarts"].as_number(), 0);
  EXPECT_EQ(s["params_sha256"].as_string(), reference_sha(30, 10));
  EXPECT_EQ(train_steps(out), (std::vector<int64_t>{5, 10, 15, 20, 25, 30}));
  // And into a directory that does not exist yet.
  const std::string fresh = dir / "fresh/run";
  std::vector<std::string> again = run_args(fresh, 30, 10);
  again.push_back("--resume");
  expect_ok(run_cli(again), "--resume into a new directory");
  EXPECT_EQ(summary_of(fresh)["params_sha256"].as_string(), reference_sha(30, 10));
}

TEST(TrainRestart, TheNewestKCheckpointsAreKept) {
  TempDir dir;
  const std::string out = dir / "run";
  expect_ok(run_cli(run_args(out, 50, 10, {"--set", "train.keep_checkpoints=3"})), "keep 3");
  EXPECT_EQ(files_in(out), (std::set<std::string>{"checkpoint.tgckpt", "checkpoint-40.tgckpt",
                                                  "checkpoint-30.tgckpt", "config.toml",
                                                  "metrics.jsonl", "summary.json"}));
  EXPECT_EQ(train::load_checkpoint(out + "/checkpoint.tgckpt").step, 50);
  EXPECT_EQ(train::load_checkpoint(out + "/checkpoint-40.tgckpt").step, 40);
  EXPECT_EQ(train::load_checkpoint(out + "/checkpoint-30.tgckpt").step, 30);
  const std::string one = dir / "one";
  expect_ok(run_cli(run_args(one, 30, 10, {"--set", "train.keep_checkpoints=1"})), "keep 1");
  EXPECT_FALSE(fs::exists(one + "/checkpoint-20.tgckpt"));
  EXPECT_TRUE(fs::exists(one + "/checkpoint.tgckpt"));
}

TEST(TrainRestart, DamagedNewestCheckpointsFallBackToTheNewestIntactOne) {
  TempDir dir;
  const std::string out = dir / "run";
  const auto args = run_args(out, 40, 10, {"--set", "train.keep_checkpoints=3"});
  expect_ok(run_cli(args), "first run");
  const std::string want = summary_of(out)["params_sha256"].as_string();
  // The newest torn by the storage (a byte flipped), the one before cut short (a full disk on
  // storage that does not honour the rename's atomicity); checkpoint-20 intact.
  std::string newest = read_text(out + "/checkpoint.tgckpt");
  newest[newest.size() / 2] = static_cast<char>(newest[newest.size() / 2] ^ 0x10);
  write_text(out + "/checkpoint.tgckpt", newest);
  const std::string older = read_text(out + "/checkpoint-30.tgckpt");
  write_text(out + "/checkpoint-30.tgckpt", older.substr(0, older.size() / 3));
  // A kill mid-write leaves a temporary file: never a candidate.
  write_text(out + "/checkpoint.tgckpt.tmp", older.substr(0, 100));
  fs::remove(out + "/summary.json");

  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  const CliResult r = run_cli(resume);
  expect_ok(r, "resume past damaged checkpoints");
  EXPECT_TRUE(contains(r.err, "--resume: skipping " + out + "/checkpoint.tgckpt: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "--resume: skipping " + out + "/checkpoint-30.tgckpt: ")) << r.err;
  EXPECT_TRUE(
      contains(r.err, "--resume: continuing from " + out + "/checkpoint-20.tgckpt (iteration 20)"))
      << r.err;
  EXPECT_EQ(summary_of(out)["start_iteration"].as_number(), 20);
  EXPECT_EQ(summary_of(out)["params_sha256"].as_string(), want);
  // The damaged files are set aside (kept for inspection, never tried again); the run wrote its
  // own 30 and 40 again.
  EXPECT_TRUE(fs::exists(out + "/checkpoint.tgckpt.damaged"));
  EXPECT_TRUE(fs::exists(out + "/checkpoint-30.tgckpt.damaged"));
  EXPECT_EQ(train::load_checkpoint(out + "/checkpoint.tgckpt").step, 40);
  EXPECT_EQ(train::load_checkpoint(out + "/checkpoint-30.tgckpt").step, 30);
  EXPECT_EQ(train::load_checkpoint(out + "/checkpoint-20.tgckpt").step, 20);

  // Nothing intact at all: one error naming every file, exit 1, nothing renamed.
  for (const std::string name :
       {"checkpoint.tgckpt", "checkpoint-30.tgckpt", "checkpoint-20.tgckpt"})
    write_text(out + "/" + name, "TGCKPT");
  const std::set<std::string> before = files_in(out);
  const CliResult bad = run_cli(resume);
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--resume: no intact checkpoint in " + out)) << bad.err;
  for (const std::string name :
       {"checkpoint.tgckpt", "checkpoint-30.tgckpt", "checkpoint-20.tgckpt"})
    EXPECT_TRUE(contains(bad.err, out + "/" + name)) << bad.err;
  EXPECT_EQ(files_in(out), before);
}

TEST(TrainRestart, CheckpointsByTheClockAgreeAcrossRanks) {
  // A checkpoint whenever 30 ms have passed (rank 0's clock, agreed through the per-step
  // collective): several of them at iterations no count would give, the same parameters.
  TempDir dir;
  const std::string out = dir / "run";
  std::vector<std::string> args = run_args(out, 40, 0,
                                           {"--set", "train.checkpoint_minutes=0.0005", "--set",
                                            "train.keep_checkpoints=1000", "--nproc", "2"});
  const CliResult r = run_cli(args);
  expect_ok(r, "checkpoints by the clock");
  std::vector<int64_t> steps;
  for (const auto& name : files_in(out))
    if (name.rfind("checkpoint-", 0) == 0)
      steps.push_back(train::load_checkpoint(out + "/" + name).step);
  EXPECT_GE(steps.size(), 2u) << "40 iterations of two ranks take far longer than 30 ms";
  for (int64_t step : steps) EXPECT_TRUE(step > 0 && step < 40) << step;
  EXPECT_EQ(summary_of(out)["params_sha256"].as_string(), reference_sha(40, 0));
}

TEST(TrainRestart, BadRestartSettingsAreOneLineErrors) {
  TempDir dir;
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--max-restarts", "2"}, {}, "--max-restarts needs --nproc"},
      {{"--max-restarts", "-1", "--nproc", "2"}, {}, "--max-restarts"},
      {{"--set", "comm.max_restarts=5000"}, {}, "comm.max_restarts"},
      {{}, {"TG_RESTARTS=two"}, "TG_RESTARTS='two' is not a non-negative integer"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = run_args(dir / "x", 10, 0, c.flags);
    TempDir io;
    const int code = wait_exit(spawn_cli(args, io / "out", io / "err", c.env));
    const std::string err = read_text(io / "err");
    EXPECT_EQ(code, 1) << err;
    EXPECT_TRUE(contains(err, c.message)) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  // Restarts need the checkpoints of --out.
  std::vector<std::string> args = {"train", "--nproc",        "2", "--max-restarts", "1",
                                   "--set", "workers.count=2"};
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "comm.max_restarts = 1 needs --out")) << r.err;
}

}  // namespace
}  // namespace tg::testing
