// `terngrad train --resume` with a stateful compressor: 1-bit SGD and TernGrad with error feedback
// keep each worker's residual from one step to the next, and the checkpoint carries it, so a run
// with 2 emulated workers killed (kill -9, SIGTERM) and resumed ends with the params_sha256, EMA
// and metrics of an uninterrupted run. A resume without the residuals would diverge (checked), and
// a checkpoint whose compressor state does not fit the run is refused and left in place.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"
#include "train/checkpoint.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLenetParams = 1256080;

// A quick LeNet run on the synthetic dataset with 2 emulated workers and `method`.
std::vector<std::string> onebit_args(const std::string& out, int iterations,
                                     const std::string& method = "onebit") {
  return quick_train_args(out, iterations,
                          {"--set", "workers.count=2", "--set", "compression.method=" + method});
}

std::vector<std::string> resumed(std::vector<std::string> args) {
  args.push_back("--resume");
  return args;
}

json::Value summary(const std::string& dir) {
  return json::parse(read_text(dir + "/summary.json"));
}

std::vector<json::Value> metrics(const std::string& dir) {
  std::vector<json::Value> v;
  std::istringstream in(read_text(dir + "/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

// Waits until the run writing to `dir` has logged `step`; false on timeout.
bool wait_for_step(const std::string& dir, int step) {
  const std::string key = "\"step\":" + std::to_string(step) + ",";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_text(dir + "/metrics.jsonl").find(key) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// The run in b ended exactly as the uninterrupted run in a: parameters, EMA, every logged loss
// and the final evaluation.
void expect_same_run(const std::string& a, const std::string& b) {
  const json::Value sa = summary(a), sb = summary(b);
  EXPECT_EQ(sb["params_sha256"].as_string(), sa["params_sha256"].as_string());
  EXPECT_EQ(sb["ema_sha256"].as_string(), sa["ema_sha256"].as_string());
  EXPECT_EQ(sb["test_loss"].as_number(), sa["test_loss"].as_number());
  const std::vector<json::Value> ma = metrics(a), mb = metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["type"].as_string(), mb[i]["type"].as_string());
    EXPECT_EQ(ma[i]["step"].as_number(), mb[i]["step"].as_number());
    const char* key = ma[i]["type"].as_string() == "train" ? "loss" : "test_loss";
    EXPECT_EQ(ma[i][key].as_number(), mb[i][key].as_number())
        << "step " << ma[i]["step"].as_number();
  }
}

// A run of `args(out)` (2 workers, kIters iterations, a compressor with residuals) killed with
// SIGKILL after step 65 and resumed ends exactly as the uninterrupted run; the same checkpoint
// with its residuals zeroed ends elsewhere.
void expect_kill9_resume_bit_identical(
    const std::function<std::vector<std::string>(const std::string&)>& args) {
  TempDir dir;
  const std::string a = dir / "a", b = dir / "b", c = dir / "c";
  constexpr int kIters = 200;
  CliResult full = run_cli(args(a));
  ASSERT_EQ(full.exit_code, 0) << full.err;

  pid_t pid = spawn_cli(args(b), dir / "b_out", dir / "b_err");
  const bool reached = wait_for_step(b, 65);
  if (reached) ::kill(pid, SIGKILL);
  const int code = wait_exit(pid);
  ASSERT_TRUE(reached) << "the run never reached step 65: " << read_text(dir / "b_err");
  ASSERT_EQ(code, 128 + SIGKILL);
  ASSERT_FALSE(fs::exists(b + "/summary.json")) << "the run finished before it was killed";
  const train::Checkpoint ck = train::load_checkpoint(b + "/checkpoint.tgckpt");
  EXPECT_GE(ck.step, 60);
  EXPECT_LT(ck.step, kIters);
  // One residual per worker, the size of the gradient, and not zero (there was error feedback).
  for (int w = 0; w < 2; ++w) {
    const Tensor& r = ck.get(train::compressor_state_key(w, "residual"));
    EXPECT_EQ(r.dtype(), DType::f32);
    EXPECT_EQ(r.shape(), Shape({kLenetParams}));
    double norm = 0;
    for (float v : r.to_vector<float>()) norm += static_cast<double>(v) * v;
    EXPECT_GT(norm, 0.0) << "worker " << w;
  }
  EXPECT_FALSE(ck.has(train::compressor_state_key(2, "residual")));

  // Control: the same checkpoint with the residuals zeroed (what --resume did before they were
  // saved) ends elsewhere, so the equality below is evidence that they are restored.
  fs::create_directories(c);
  fs::copy_file(b + "/metrics.jsonl", c + "/metrics.jsonl");
  train::Checkpoint zeroed = ck;
  for (auto& [name, t] : zeroed.tensors)
    if (name.rfind("compressor/", 0) == 0) t = Tensor::zeros(t.shape());
  train::save_checkpoint(c + "/checkpoint.tgckpt", zeroed);

  CliResult r = run_cli(resumed(args(b)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resuming at iteration"), std::string::npos) << r.err;
  expect_same_run(a, b);

  CliResult rc = run_cli(resumed(args(c)));
  ASSERT_EQ(rc.exit_code, 0) << rc.err;
  EXPECT_NE(summary(c)["params_sha256"].as_string(), summary(a)["params_sha256"].as_string());
}

TEST(TrainCompressorState, OnebitResumeAfterKill9EndsBitIdentical) {
  expect_kill9_resume_bit_identical([](const std::string& out) { return onebit_args(out, 200); });
}

TEST(TrainCompressorState, TernGradErrorFeedbackResumeAfterKill9EndsBitIdentical) {
  expect_kill9_resume_bit_identical([](const std::string& out) {
    return quick_train_args(out, 200,
                            {"--set", "workers.count=2", "--set", "compression.method=terngrad",
                             "--set", "compression.error_feedback=true"});
  });
}

TEST(TrainCompressorState, OnebitSigtermSavesTheResidualsAndResumeFinishesTheRun) {
  TempDir dir;
  const std::string a = dir / "a", b = dir / "b";
  constexpr int kIters = 120;
  ASSERT_EQ(run_cli(onebit_args(a, kIters)).exit_code, 0);
  pid_t pid = spawn_cli(onebit_args(b, kIters), dir / "b_out", dir / "b_err");
  ASSERT_TRUE(wait_for_step(b, 25)) << read_text(dir / "b_err");
  ::kill(pid, SIGTERM);
  const int code = wait_exit(pid);
  if (code == 0) GTEST_SKIP() << "the run finished before SIGTERM arrived";
  ASSERT_EQ(code, 130) << read_text(dir / "b_err");
  const train::Checkpoint ck = train::load_checkpoint(b + "/checkpoint.tgckpt");
  EXPECT_GE(ck.step, 25);  // the step it stopped at, not a periodic checkpoint's
  EXPECT_TRUE(ck.has("compressor/worker1/residual"));
  CliResult r = run_cli(resumed(onebit_args(b, kIters)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_run(a, b);
}

// Rewrites dir's checkpoint through `edit`, resumes, expects a refusal mentioning `fragments`,
// and the checkpoint left exactly as it was.
void expect_resume_refused(const std::string& dir, const std::vector<std::string>& args,
                           const std::function<void(train::Checkpoint&)>& edit,
                           const std::vector<std::string>& fragments) {
  const std::string path = dir + "/checkpoint.tgckpt";
  train::Checkpoint ck = train::load_checkpoint(path);
  edit(ck);
  train::save_checkpoint(path, ck);
  const std::string before = read_text(path);
  CliResult r = run_cli(resumed(args));
  EXPECT_NE(r.exit_code, 0);
  for (const std::string& f : fragments)
    EXPECT_NE(r.err.find(f), std::string::npos) << "stderr lacks '" << f << "': " << r.err;
  EXPECT_EQ(read_text(path), before) << "a refused resume must not touch the checkpoint";
}

TEST(TrainCompressorState, ResumeRefusesCompressorStateThatDoesNotFitTheRun) {
  TempDir dir;
  const std::string run = dir / "run", tern = dir / "tern";
  // The compressor state is checked when it is loaded, before any iteration runs: a finished
  // run's final checkpoint serves.
  ASSERT_EQ(run_cli(onebit_args(run, 20)).exit_code, 0);
  const auto args = onebit_args(run, 20);
  auto original = train::load_checkpoint(run + "/checkpoint.tgckpt");
  auto restore = [&](train::Checkpoint& ck) { ck = original; };

  // Residuals of 4 workers for a 2-worker run.
  expect_resume_refused(
      run, args,
      [&](train::Checkpoint& ck) {
        const Tensor r = ck.get("compressor/worker0/residual");
        ck.tensors.emplace_back("compressor/worker2/residual", r);
        ck.tensors.emplace_back("compressor/worker3/residual", r);
      },
      {"checkpoint.tgckpt", "onebit compressor state for 4 worker(s)", "config has 2 worker(s)"});
  // No residuals at all (a checkpoint from before they were saved): refused, not zeroed.
  expect_resume_refused(run, args,
                        [&](train::Checkpoint& ck) {
                          restore(ck);
                          std::erase_if(ck.tensors, [](const auto& e) {
                            return e.first.rfind("compressor/", 0) == 0;
                          });
                        },
                        {"worker 0", "missing entry 'residual'", "older terngrad"});
  // A residual of the wrong size.
  expect_resume_refused(run, args,
                        [&](train::Checkpoint& ck) {
                          restore(ck);
                          for (auto& [name, t] : ck.tensors)
                            if (name == "compressor/worker1/residual")
                              t = Tensor::zeros({kLenetParams - 1});
                        },
                        {"worker 1", "'residual' must be f32 [1256080]", "[1256079]"});

  // A stateless method's checkpoint given a residual it cannot take.
  ASSERT_EQ(run_cli(onebit_args(tern, 20, "terngrad")).exit_code, 0);
  EXPECT_FALSE(
      train::load_checkpoint(tern + "/checkpoint.tgckpt").has("compressor/worker0/residual"));
  expect_resume_refused(
      tern, onebit_args(tern, 20, "terngrad"),
      [&](train::Checkpoint& ck) {
        ck.tensors.emplace_back("compressor/worker0/residual", Tensor::zeros({kLenetParams}));
        ck.tensors.emplace_back("compressor/worker1/residual", Tensor::zeros({kLenetParams}));
      },
      {"terngrad", "keeps no state", "'residual'"});
}

}  // namespace
}  // namespace tg::testing
