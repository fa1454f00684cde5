// `terngrad convergence-check` end to end (the real binary): a quick configuration passes with
// exit 0 and one verdict line per check, --json gives one parseable object per check, a
// deliberately biased ternarizer fails with exit 2 naming the failed checks, and --help documents
// the options. The computations themselves are tested in
// tests/terngrad/analysis/convergence_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"

namespace tg::testing {
namespace {

// A fast run: ridge with 20000 iterations x 4 repeats; a synthetic LeNet run of 3 iterations with
// 2 workers, 128 ternarizations of two sampled gradients.
std::vector<std::string> quick_args(const std::vector<std::string>& extra = {},
                                    const std::string& sample_steps = "0,2") {
  std::vector<std::string> a = {"convergence-check",
                                "--iterations",
                                "20000",
                                "--repeats",
                                "4",
                                "--draws",
                                "128",
                                "--sample-steps",
                                sample_steps,
                                "--set",
                                "data.name=synthetic",
                                "--set",
                                "data.synthetic_size=256",
                                "--set",
                                "data.eval_batch_size=64",
                                "--set",
                                "train.batch_size=16",
                                "--set",
                                "workers.count=2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

int count_prefix(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (const auto& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0) ++n;
  return n;
}

TEST(ConvergenceCheckCli, QuickRunPassesWithOneVerdictPerCheck) {
  const CliResult r = run_cli(quick_args());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // ridge-sgd, ridge-terngrad, unbiased@0, variance@0, unbiased@2, variance@2.
  EXPECT_EQ(count_prefix(r.out, "PASS "), 6) << r.out;
  EXPECT_EQ(count_prefix(r.out, "FAIL "), 0) << r.out;
  for (const char* c : {"PASS ridge-sgd:", "PASS ridge-terngrad:", "PASS unbiased@0:",
                        "PASS variance@0:", "PASS unbiased@2:", "PASS variance@2:"})
    EXPECT_NE(r.out.find(c), std::string::npos) << c << "\n" << r.out;
  EXPECT_NE(r.out.find("convergence-check: all 6 checks passed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fitted rate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("conv1"), std::string::npos) << r.out;  // a LeNet tensor in the table
}

// With no config and no data given, in a directory without data/: the installed Fashion-MNIST
// package (the set-up command's), named in the log and the JSON.
TEST(ConvergenceCheckCli, WithoutDataFlagsUsesTheInstalledFashionMnist) {
  const std::string system_dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(system_dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << system_dir << " is absent";
  TempDir cwd, io;
  const std::vector<std::string> args = {"convergence-check",
                                         "--checks",
                                         "real",
                                         "--json",
                                         "--draws",
                                         "64",
                                         "--sample-steps",
                                         "0",
                                         "--set",
                                         "train.batch_size=16",
                                         "--set",
                                         "data.eval_limit=16"};
  const int code = wait_exit(spawn_cli(args, io / "out", io / "err", {}, cwd.str()));
  const std::string out = read_text(io / "out"), err = read_text(io / "err");
  ASSERT_EQ(code, 0) << err;
  EXPECT_TRUE(contains(err, "data: fashion-mnist from " + system_dir)) << err;
  EXPECT_TRUE(contains(err, "installed package dataset-fashion-mnist")) << err;
  EXPECT_TRUE(contains(out, "\"dataset\":\"fashion-mnist\"")) << out;
}

TEST(ConvergenceCheckCli, JsonGivesOneObjectPerCheck) {
  const CliResult r = run_cli(quick_args({"--json", "--checks", "ridge,real"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  int ridge = 0, unbiased = 0, variance = 0;
  for (const auto& l : lines) {
    const json::Value v = json::parse(l);
    EXPECT_TRUE(v["pass"].b) << l;
    const std::string check = v["check"].as_string();
    if (check.rfind("ridge-", 0) == 0) {
      ++ridge;
      EXPECT_EQ(v["t"].arr.size(), v["error"].arr.size());
      EXPECT_LT(v["rate"].as_number(), -0.5);
      EXPECT_LT(v["rel_error"].as_number(), 1e-3);
    } else {
      EXPECT_EQ(v["draws"].as_number(), 128);
      EXPECT_EQ(v["workers"].as_number(), 2);
      EXPECT_FALSE(v["tensors"].arr.empty());
      (v["kind"].as_string() == "unbiased" ? unbiased : variance)++;
    }
  }
  EXPECT_EQ(ridge, 2);
  EXPECT_EQ(unbiased, 2);
  EXPECT_EQ(variance, 2);
  // Verdict lines still come, on stderr.
  EXPECT_NE(r.err.find("PASS ridge-terngrad:"), std::string::npos) << r.err;
}

TEST(ConvergenceCheckCli, ABiasedTernarizerFailsWithExitTwo) {
  const CliResult r =
      run_cli(quick_args({"--ternarizer", "half-keep", "--checks", "real"}, /*sample_steps=*/"1"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL unbiased@1:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL variance@1:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("convergence-check: FAILED 2 of 2 checks: unbiased@1, variance@1"),
            std::string::npos)
      << r.out;

  const CliResult c = run_cli(quick_args({"--ternarizer", "no-abs", "--checks", "ridge"}));
  EXPECT_EQ(c.exit_code, 2) << c.out << c.err;
  EXPECT_NE(c.out.find("PASS ridge-sgd:"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("FAIL ridge-terngrad:"), std::string::npos) << c.out;
}

TEST(ConvergenceCheckCli, HelpAndBadInput) {
  const CliResult h = run_cli({"convergence-check", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  for (const char* opt : {"--config", "--set", "--iterations", "--draws", "--json", "--seed",
                          "--ternarizer", "--sample-steps", "--checks"})
    EXPECT_NE(h.out.find(opt), std::string::npos) << opt << "\n" << h.out;

  const CliResult bad =
      run_cli({"convergence-check", "--checks", "real", "--set", "model.name=nope"});
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("nope"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tg::testing
