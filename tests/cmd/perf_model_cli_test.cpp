// `terngrad perf-model` end to end: --help, the table, --json lines (parsed, fields, the
// paper's readings beside ours), cluster files and their errors (each names the key), overrides,
// and --calibrate on a small net with a given link and with the loopback link measured.
#include <gtest/gtest.h>

#include <cstdio>

#include <sstream>
#include <string>
#include <vector>

#include "nn/core/json.h"
#include "terngrad/analysis/sim/simulate.h"
#include "tests/cmd/cli_util.h"

namespace tg::testing {
namespace {

TEST(PerfModelCli, Help) {
  const CliResult r = run_cli({"perf-model", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--cluster", "--json", "--networks", "--gpus", "--batch",
                           "--compute-time", "--calibrate", "--topology"})
    EXPECT_TRUE(contains(r.out, flag)) << flag;
}

// GoogLeNet is the cheapest Figure 5 net to build (6.6 M parameters).
TEST(PerfModelCli, JsonLinesWithThePapersReadings) {
  const CliResult r = run_cli({"perf-model", "--json", "--networks", "googlenet", "--cluster",
                               "ethernet,infiniband", "--gpus", "1,8,32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  for (const auto& o : lines) {
    EXPECT_EQ(o["network"].as_string(), "googlenet");
    EXPECT_EQ(o["params"].as_number(), 6618649);
    const double fp32 = o["fp32_images_per_sec"].as_number();
    const double tern = o["terngrad_images_per_sec"].as_number();
    EXPECT_GT(fp32, 0);
    EXPECT_NEAR(o["speedup"].as_number(), tern / fp32, 1e-9 * tern / fp32);
    EXPECT_EQ(o["batch_per_gpu"].as_number(), 64);
  }
  EXPECT_EQ(lines[0]["cluster"].as_string(), "ethernet");
  EXPECT_EQ(lines[0]["gpus"].as_number(), 1);
  // One GPU: the paper's reading is the input (T_c = b / R1).
  EXPECT_NEAR(lines[0]["fp32_images_per_sec"].as_number(), 170, 1e-6);
  EXPECT_EQ(lines[1]["paper_terngrad_images_per_sec"].as_number(), 1233);
  EXPECT_EQ(lines[1]["nodes"].as_number(), 2);
  EXPECT_EQ(lines[1]["terngrad_down_bits"].as_number(), 5);  // ceil(log2 17)
  EXPECT_EQ(lines[3]["cluster"].as_string(), "infiniband");
  EXPECT_FALSE(lines[5].has("paper_fp32_images_per_sec"));  // Figure 5 has no 32-GPU reading on (b)
}

// The 10 Gbit/s Ethernet preset is not one of the paper's: our model with the GTX 1080's compute
// times, no readings beside it, faster than the 1 Gbit/s cluster across nodes and the same
// inside one node; it is not in the default list.
TEST(PerfModelCli, TenGigabitPresetHasNoPaperReadings) {
  const CliResult r = run_cli({"perf-model", "--json", "--networks", "googlenet", "--cluster",
                               "ethernet,ethernet10g", "--gpus", "4,64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[2]["cluster"].as_string(), "ethernet10g");
  EXPECT_TRUE(lines[1].has("paper_fp32_images_per_sec"));
  for (size_t i : {2, 3}) EXPECT_FALSE(lines[i].has("paper_fp32_images_per_sec")) << i;
  EXPECT_NEAR(lines[2]["fp32_images_per_sec"].as_number(),
              lines[0]["fp32_images_per_sec"].as_number(), 1e-9);
  EXPECT_GT(lines[3]["fp32_images_per_sec"].as_number(),
            1.3 * lines[1]["fp32_images_per_sec"].as_number());  // 1.45x, compute-bound
  const CliResult d = run_cli({"perf-model", "--json", "--networks", "googlenet", "--gpus", "8"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_FALSE(contains(d.out, "ethernet10g"));
}

// --simulate: one JSON object per (GPU count, method) with the fields; TernGrad's
// exchange takes less time than fp32's across 1 Gbit/s nodes. Without SimGrid: one line saying
// how to get it, exit 1.
TEST(PerfModelCli, SimulateJsonLines) {
  const std::vector<std::string> args = {
      "perf-model", "--simulate", "--json",
      "--networks", "lenet",      "--batch",
      "64",         "--cluster",  "ethernet",
      "--gpus",     "2,8",        "--compute-time",
      "0.01",       "--methods",  "fp32:ring,terngrad:sharded,terngrad"};
  const CliResult r = run_cli(args);
  if (!sim::simulator_available()) {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "libsimgrid-dev")) << r.err;
    GTEST_SKIP() << "no SimGrid in this build";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  for (const auto& o : lines) {
    for (const char* k : {"method", "route", "gpus", "exchange_seconds", "iteration_seconds"})
      EXPECT_TRUE(o.has(k)) << k;
    EXPECT_GT(o["exchange_seconds"].as_number(), 0);
    EXPECT_GE(o["iteration_seconds"].as_number(), 0.01);
  }
  EXPECT_EQ(lines[0]["method"].as_string(), "fp32");
  EXPECT_EQ(lines[0]["route"].as_string(), "ring");
  EXPECT_EQ(lines[4]["route"].as_string(), "sharded");
  EXPECT_EQ(lines[5]["route"].as_string(), "auto");
  // At 8 GPUs (2 nodes over 1 Gbit/s) TernGrad's exchange beats the fp32 ring by far.
  EXPECT_LT(lines[5]["exchange_seconds"].as_number(),
            0.5 * lines[3]["exchange_seconds"].as_number());
}

TEST(PerfModelCli, TableShowsOursBesideThePaper) {
  const CliResult r =
      run_cli({"perf-model", "--networks", "googlenet", "--cluster", "ethernet", "--gpus", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "cluster ethernet")) << r.out;
  EXPECT_TRUE(contains(r.out, "6,618,649 parameters")) << r.out;
  EXPECT_TRUE(contains(r.out, "paper fp32")) << r.out;
  EXPECT_TRUE(contains(r.out, "852.0")) << r.out;  // the paper's fp32 reading at 8 GPUs
}

TEST(PerfModelCli, ClusterFile) {
  TempDir dir;
  const std::string f = dir / "lab.toml";
  write_text(f,
             "name = \"lab\"\n"
             "gpus_per_node = 2\n"
             "gpu = \"gtx1080\"\n"
             "full_duplex = false\n"
             "[intra]\nbandwidth_gbit = 100\nlatency_us = 5\n"
             "[inter]\nbandwidth_gbit = 10\n");
  const CliResult r = run_cli({"perf-model", "--json", "--networks", "googlenet", "--cluster", f,
                               "--gpus", "4", "--topology", "ring"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["cluster"].as_string(), "lab");
  EXPECT_EQ(lines[0]["nodes"].as_number(), 2);
  EXPECT_EQ(lines[0]["topology"].as_string(), "ring");
  // Ring, half duplex, M = 2: 2 * 2 (M - 1) / M * 4 P bytes at 10 Gbit/s; no latency given.
  EXPECT_NEAR(lines[0]["fp32_inter_s"].as_number(), 2.0 * 4 * 6618649 / 1.25e9, 1e-9);
}

// Each broken file: its error names the file and the key.
TEST(PerfModelCli, ClusterFileErrorsNameTheKey) {
  TempDir dir;
  struct Case {
    const char* text;
    const char* key;
  };
  const Case cases[] = {
      {"gpus_per_node = 4\n[intra]\nbandwidth_gbit = 100\n[inter]\nlatency_us = 5\n",
       "'inter.bandwidth_gbit' is missing"},
      {"gpus_per_node = \"four\"\n[intra]\nbandwidth_gbit = 1\n[inter]\nbandwidth_gbit = 1\n",
       "'gpus_per_node'"},
      {"gpus_per_node = 4\n[intra]\nbandwith_gbit = 1\n[inter]\nbandwidth_gbit = 1\n",
       "unknown key 'intra.bandwith_gbit'"},
      {"gpus_per_node = 4\n[intra]\nbandwidth_gbit = 1\n[inter]\nbandwidth_gbit = -1\n",
       "'inter.bandwidth_gbit' is -1"},
      {"gpus_per_node = 4\n[intra]\nbandwidth_gbit = 1\n", "[inter] is missing"},
      {"gpus_per_node = 4\ngpu = \"v100\"\n[intra]\nbandwidth_gbit = 1\n[inter]\nbandwidth_gbit = "
       "1\n",
       "'gpu'"},
      {"gpus_per_node = = 4\n", "TOML syntax error"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string f = dir / (std::to_string(i++) + "_cluster.toml");
    write_text(f, c.text);
    const CliResult r = run_cli({"perf-model", "--networks", "googlenet", "--cluster", f});
    EXPECT_EQ(r.exit_code, 1) << c.text;
    EXPECT_TRUE(contains(r.err, c.key)) << c.key << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, f)) << r.err;
  }
}

TEST(PerfModelCli, BadArguments) {
  CliResult r = run_cli({"perf-model", "--networks", "googlenet", "--cluster", "myrinet"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "ethernet, infiniband")) << r.err;

  r = run_cli({"perf-model", "--networks", "resnet50"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "known nets")) << r.err;

  // LeNet is not in Figure 5: it needs a batch and a compute time.
  r = run_cli({"perf-model", "--networks", "lenet", "--cluster", "ethernet"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--batch lenet=B")) << r.err;
  r = run_cli({"perf-model", "--networks", "lenet", "--cluster", "ethernet", "--batch", "64"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--compute-time lenet=SECONDS")) << r.err;
  r = run_cli(
      {"perf-model", "--networks", "lenet", "--batch", "64", "--compute-time", "lenet=abc"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--compute-time 'lenet=abc'")) << r.err;

  r = run_cli({"perf-model", "--json", "--networks", "lenet", "--cluster", "ethernet", "--batch",
               "64", "--compute-time", "0.016", "--gpus", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["params"].as_number(), 1256080);  // our LeNet (nn/nets/lenet.cpp)
  EXPECT_EQ(lines[0]["compute_s"].as_number(), 0.016);
}

TEST(PerfModelCli, CalibrateMeasuresThisMachine) {
  // A given link: only the training step is timed.
  CliResult r = run_cli({"perf-model", "--calibrate", "--json", "--networks", "lenet", "--batch",
                         "16", "--link-gbit", "0.957", "--calibrate-steps", "1", "--gpus", "1,2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0]["cluster"].as_string(), "this-machine");
  EXPECT_EQ(lines[0]["gpus_per_node"].as_number(), 1);
  EXPECT_GT(lines[0]["compute_s"].as_number(), 0);
  EXPECT_GT(lines[0]["encode_s"].as_number(), 0);
  EXPECT_EQ(lines[1]["nodes"].as_number(), 2);
  // P = 2: ps moves (P - 1) / P of the larger direction: 4 P bytes at 0.957 Gbit/s.
  EXPECT_NEAR(lines[1]["fp32_inter_s"].as_number(), 0.5 * 4 * 1256080 / (0.957e9 / 8), 1e-9);

  // The loopback link measured through the Gloo transport (two ranks in the process): a positive
  // bandwidth and latency in the cluster's description.
  r = run_cli({"perf-model", "--calibrate", "--networks", "lenet", "--batch", "16",
               "--calibrate-steps", "1", "--gpus", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("loopback through Gloo (measured ");
  ASSERT_NE(at, std::string::npos) << r.out;
  double gbit = 0, us = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "loopback through Gloo (measured %lf Gbit/s, %lf us)",
                        &gbit, &us),
            2)
      << r.out;
  EXPECT_GT(gbit, 0) << r.out;
  EXPECT_GT(us, 0) << r.out;

  r = run_cli({"perf-model", "--calibrate", "--cluster", "ethernet"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "cannot be combined with --cluster")) << r.err;
}

}  // namespace
}  // namespace tg::testing
