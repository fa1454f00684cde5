// The CI accuracy regression of the paper's LeNet claims (issue 6 §5; the paper's Figure 3), on the
// real data, with the paper recipe (paper/configs/lenet_mnist.toml and lenet_fashion_mnist.toml:
// momentum 0.9, LR 0.01 polynomial power 0.5 to zero, weight decay 5e-4, global batch 64, 10,000
// iterations, EMA evaluation on the whole test set):
//   MNIST, N = 2 and N = 8 emulated workers: fp32 and TernGrad each >= 99.0%, and TernGrad within
//     0.25 points of fp32 at the same N (the paper's range is -0.22 ... +0.15);
//   Fashion-MNIST, N = 4: TernGrad with error feedback within 0.5 points of fp32's recorded
//   accuracy
//     (past the paper: paper/beyond.md; TernGrad as published is about a point below).
// Each pair runs concurrently, one thread per run (ctest gives these tests both cores:
// PROCESSORS 2 in tests/CMakeLists.txt). The runs are deterministic for a given thread count, so
// a failure here is a real change in what the engine computes, not noise. Label `accuracy`:
// `ctest -L accuracy` runs just these (about half an hour on 2 cores), `-LE accuracy` skips them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/cmd/cli_util.h"
#include "train/json.h"

namespace tg::testing {
namespace {

struct Run {
  double accuracy = 0;
  json::Value summary;
};

// Trains `config` with N workers and each method ("none", "terngrad") at the same time, one
// thread each; returns the runs in that order.
std::vector<Run> run_pair(const std::string& config, const std::string& data_path, int workers) {
  TempDir dir;
  const std::vector<std::string> methods = {"none", "terngrad"};
  std::vector<pid_t> pids;
  for (const auto& m : methods) {
    const std::vector<std::string> args = {
        "train",    "--no-progress",
        "--config", std::string(TG_SOURCE_DIR) + "/paper/configs/" + config,
        "--set",    "data.path=" + data_path,
        "--set",    "workers.count=" + std::to_string(workers),
        "--set",    "compression.method=" + m,
        "--out",    dir / m};
    pids.push_back(spawn_cli(args, dir / (m + ".out"), dir / (m + ".err"),
                             {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"}));
  }
  std::vector<Run> runs;
  for (size_t i = 0; i < methods.size(); ++i) {
    const int code = wait_exit(pids[i]);
    EXPECT_EQ(code, 0) << config << " " << methods[i] << ":\n"
                       << read_text(dir / (methods[i] + ".err"));
    Run r;
    if (code == 0) {
      r.summary = json::parse(read_text(dir / (methods[i] + "/summary.json")));
      r.accuracy = r.summary["test_accuracy"].as_number();
      EXPECT_EQ(r.summary["iterations"].as_number(), 10000);
      EXPECT_EQ(r.summary["test_examples"].as_number(), 10000);
      EXPECT_EQ(r.summary["workers"].as_number(), workers);
      std::printf("%s N=%d %s: test accuracy %.2f%%, %.0f s, params_sha256 %s\n", config.c_str(),
                  workers, methods[i].c_str(), 100 * r.accuracy,
                  r.summary["wall_seconds"].as_number(),
                  r.summary["params_sha256"].as_string().substr(0, 16).c_str());
    }
    runs.push_back(r);
  }
  return runs;
}

const std::string kMnist = std::string(TG_SHARED_DATA_DIR) + "/mnist";
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

void check_mnist(int workers) {
  const auto runs = run_pair("lenet_mnist.toml", kMnist, workers);
  EXPECT_GE(runs[0].accuracy, 0.990) << "fp32, N = " << workers;
  EXPECT_GE(runs[1].accuracy, 0.990) << "TernGrad, N = " << workers;
  EXPECT_GE(runs[1].accuracy, runs[0].accuracy - 0.0025)
      << "TernGrad more than 0.25 points below fp32 at N = " << workers;
}

TEST(PaperAccuracy, LenetMnistTwoWorkersTernGradMatchesFp32) {
  check_mnist(2);
}

TEST(PaperAccuracy, LenetMnistEightWorkersTernGradMatchesFp32) {
  check_mnist(8);
}

// Past the paper (paper/beyond.md): on Fashion-MNIST at N = 4 TernGrad as published ends 0.9 to
// 1.2 points below fp32; TernGrad with error feedback (compression.error_feedback, the same wire
// bytes) ends within 0.3 points of it on average over two seeds. CI runs that variant at the
// config's seed and checks it against the fp32 accuracy recorded at that seed, N and recipe
// (paper/beyond.md, run fm_n4_s123_fp32): re-running fp32 beside it would not fit CI's time
// budget. The bar, 0.5 points, is the half-point bar TernGrad as published misses by 0.4 to 0.7
// points, with room for the run-to-run spread between machines and thread counts (fp32 at this
// seed: 92.70% on the Intel Xeon VM, 92.47% on the AMD EPYC VM). One run, both threads.
constexpr double kFashionFp32Seed123N4 = 0.9270;  // recorded, see paper/beyond.md

TEST(PaperAccuracy, LenetFashionMnistFourWorkersErrorFeedbackWithinHalfAPointOfFp32) {
  TempDir dir;
  const std::vector<std::string> args = {
      "train",    "--no-progress",
      "--config", std::string(TG_SOURCE_DIR) + "/paper/configs/lenet_fashion_mnist.toml",
      "--set",    "data.path=" + kFashion,
      "--set",    "workers.count=4",
      "--set",    "compression.method=terngrad",
      "--set",    "compression.error_feedback=true",
      "--out",    dir / "ef"};
  const int code = wait_exit(spawn_cli(args, dir / "ef.out", dir / "ef.err",
                                       {"OMP_NUM_THREADS=2", "OPENBLAS_NUM_THREADS=2"}));
  ASSERT_EQ(code, 0) << read_text(dir / "ef.err");
  const json::Value sum = json::parse(read_text(dir / "ef/summary.json"));
  const double acc = sum["test_accuracy"].as_number();
  EXPECT_EQ(sum["iterations"].as_number(), 10000);
  EXPECT_EQ(sum["test_examples"].as_number(), 10000);
  std::printf(
      "lenet_fashion_mnist.toml N=4 terngrad + error feedback: test accuracy %.2f%%, %.0f s, "
      "params_sha256 %s\n",
      100 * acc, sum["wall_seconds"].as_number(),
      sum["params_sha256"].as_string().substr(0, 16).c_str());
  EXPECT_GE(acc, kFashionFp32Seed123N4 - 0.0050)
      << "TernGrad with error feedback more than 0.5 points below fp32's recorded "
      << 100 * kFashionFp32Seed123N4 << "% on Fashion-MNIST at N = 4";
}

}  // namespace
}  // namespace tg::testing
