// The CI accuracy regression of the paper's LeNet claims (issue 6 §5; the paper's Figure 3), on the
// real data, with the paper recipe (paper/configs/lenet_mnist.toml and lenet_fashion_mnist.toml:
// momentum 0.9, LR 0.01 polynomial power 0.5 to zero, weight decay 5e-4, global batch 64, 10,000
// iterations, EMA evaluation on the whole test set):
//   MNIST: TernGrad at N = 2 and at N = 8 emulated workers each >= 99.0% and within 0.25 points
//     of fp32 (the paper's range is -0.22 ... +0.15);
//   Fashion-MNIST, N = 4: TernGrad with error feedback within 0.5 points of fp32's recorded
//     accuracy (past the paper: paper/beyond.md; TernGrad as published is about a point below).
// fp32 is the recorded baseline, not re-run (issue 44 item 7: the test command must fit a 2x
// slower machine, and this test is most of its time): N workers averaging exact fp32 gradients
// of equal shards of the global batch take the same steps as one worker on the whole batch, up
// to rounding (LeNet has no batch norm), so fp32's accuracy does not depend on N, and the
// recorded runs agree: 99.21, 99.24, 99.23, 99.27, 99.28 and 99.25% at N = 2 ... 64
// (paper/figure3.md; 99.28% at N = 2 in this test's last live fp32 run, 2026-11-29). The bar is
// the lowest of them. fp32 training itself is checked bit for bit against one process by the
// distributed tests, and the engine both methods share is the one trained here.
// The test command (scripts/test.sh) runs N = 2 and Fashion-MNIST: N = 8 carries ctest's label
// `extended` (tests/CMakeLists.txt), as its claim is N = 2's with more workers and costs 40% more
// (each worker's passes over the gradient; issue 44 item 7); `ctest -L accuracy` runs all three.
// Each training is a test of its own, one thread, so ctest packs them beside the other tests on
// its -j slots (tests/CMakeLists.txt gives each PROCESSORS 1 and a COST that starts the longest
// first); run as one test with two slots of its own, the three held both cores for ~15 min while
// the rest of ctest waited. The runs are deterministic and their bits do not depend on the
// thread count, so a failure here is a real change in what the engine computes, not noise. Label
// `accuracy`: `ctest -L accuracy` runs just these (643, 506 and 375 s, one thread each, on the
// 2-core Intel Xeon VM, 2026-11-29), `-LE accuracy` skips them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"

namespace tg::testing {
namespace {

const std::string kMnist = std::string(TG_SHARED_DATA_DIR) + "/mnist";
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST fp32 at N = 4, the config's seed and recipe: recorded (paper/beyond.md, run
// fm_n4_s123_fp32), not re-run: it would not fit CI's time budget. The bar, 0.5 points, is the
// half-point bar TernGrad as published misses by 0.4 to 0.7 points, with room for the run-to-run
// spread between machines (fp32 at this seed: 92.70% on the Intel Xeon VM, 92.47% on the AMD
// EPYC VM).
constexpr double kFashionFp32Seed123N4 = 0.9270;
// MNIST fp32, the lowest of the recorded runs at N = 2 ... 64 (paper/figure3.md, above).
constexpr double kMnistFp32Lowest = 0.9921;

struct Job {
  std::string name, config, data;
  int workers = 1;
  std::vector<std::string> sets;  // --set values beyond data.path and workers.count
};

// Trains `job` to the end in `dir`, one thread; the test accuracy of its summary, or nothing
// (with the failure reported) when the run failed.
std::optional<double> train(const Job& j, const TempDir& dir) {
  std::vector<std::string> args = {
      "train",    "--no-progress",
      "--config", std::string(TG_SOURCE_DIR) + "/paper/configs/" + j.config,
      "--set",    "data.path=" + j.data,
      "--set",    "workers.count=" + std::to_string(j.workers),
      "--out",    dir / j.name};
  // The test reads the accuracy at the end only: no evaluations (~2 s of one core each) or
  // checkpoints on the way, which change nothing the training computes (the same params_sha256
  // with both every 50 iterations or every 200).
  for (const char* kv : {"train.eval_every=10000", "train.checkpoint_every=10000"}) {
    args.push_back("--set");
    args.push_back(kv);
  }
  for (const auto& kv : j.sets) {
    args.push_back("--set");
    args.push_back(kv);
  }
  const pid_t pid = spawn_cli(args, dir / (j.name + ".out"), dir / (j.name + ".err"),
                              {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"});
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) {
    ADD_FAILURE() << j.name << ": waitpid failed";
    return std::nullopt;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  EXPECT_EQ(code, 0) << j.name << ":\n" << read_text(dir / (j.name + ".err"));
  if (code != 0) return std::nullopt;
  const json::Value sum = json::parse(read_text(dir / (j.name + "/summary.json")));
  EXPECT_EQ(sum["iterations"].as_number(), 10000) << j.name;
  EXPECT_EQ(sum["test_examples"].as_number(), 10000) << j.name;
  EXPECT_EQ(sum["workers"].as_number(), j.workers) << j.name;
  const double accuracy = sum["test_accuracy"].as_number();
  std::printf("%-28s N=%d: test accuracy %.2f%%, %.0f s, params_sha256 %s\n", j.name.c_str(),
              j.workers, 100 * accuracy, sum["wall_seconds"].as_number(),
              sum["params_sha256"].as_string().substr(0, 16).c_str());
  return accuracy;
}

// The paper's claim for MNIST: TernGrad at N workers >= 99.0% and within 0.25 points of fp32.
void expect_mnist_terngrad(int workers) {
  TempDir dir;
  const Job job{"mnist_n" + std::to_string(workers) + "_terngrad",
                "lenet_mnist.toml",
                kMnist,
                workers,
                {"compression.method=terngrad"}};
  const std::optional<double> accuracy = train(job, dir);
  if (!accuracy) return;
  EXPECT_GE(*accuracy, 0.990) << job.name << " below 99.0%";
  EXPECT_GE(*accuracy, kMnistFp32Lowest - 0.0025)
      << job.name << " more than 0.25 points below fp32's recorded " << 100 * kMnistFp32Lowest
      << "%";
}

TEST(PaperAccuracy, LenetMnistTernGradEightWorkers) {
  expect_mnist_terngrad(8);
}

TEST(PaperAccuracy, LenetMnistTernGradTwoWorkers) {
  expect_mnist_terngrad(2);
}

TEST(PaperAccuracy, LenetFashionMnistTernGradErrorFeedbackFourWorkers) {
  TempDir dir;
  const Job job{"fashion_n4_terngrad_ef",
                "lenet_fashion_mnist.toml",
                kFashion,
                4,
                {"compression.method=terngrad", "compression.error_feedback=true"}};
  const std::optional<double> accuracy = train(job, dir);
  if (!accuracy) return;
  EXPECT_GE(*accuracy, kFashionFp32Seed123N4 - 0.0050)
      << "TernGrad with error feedback more than 0.5 points below fp32's recorded "
      << 100 * kFashionFp32Seed123N4 << "% on Fashion-MNIST at N = 4";
}

}  // namespace
}  // namespace tg::testing
