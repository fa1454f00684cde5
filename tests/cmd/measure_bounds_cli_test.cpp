// `terngrad measure-bounds` end to end on a quick synthetic LeNet run: --help, the rows of
// bounds.jsonl (required fields, every sampled iteration, four combinations, bound_ratio >= 1,
// the model row under one unclipped scaler equal to ||g||_inf ||g||_1 / ||g||^2), the table, the
// training run beside it, --checkpoint, excluded tensors, and the errors (bad flags, an existing
// output, a worker out of range).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;

// bound_ratio and inf_l1_ratio of the model under one unclipped scaler are the same quotient
// of double sums (the scaler max|g| is an exact float): equal up to double rounding.
constexpr double kSameQuotient = 1e-9;

// measure-bounds on the synthetic dataset: batch 16, `iterations` iterations.
std::vector<std::string> bounds_args(const std::string& out, int iterations, int every,
                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"measure-bounds", "--no-progress",
                                "--set",          "data.name=synthetic",
                                "--set",          "data.synthetic_size=512",
                                "--set",          "data.eval_batch_size=128",
                                "--set",          "train.batch_size=16",
                                "--set",          "train.iterations=" + std::to_string(iterations),
                                "--set",          "train.log_every=5",
                                "--set",          "train.checkpoint_every=0",
                                "--set",          "compression.method=terngrad",
                                "--every",        std::to_string(every)};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("--out");
  a.push_back(out);
  return a;
}

TEST(MeasureBoundsCli, Help) {
  const CliResult r = run_cli({"measure-bounds", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--config", "--set", "--every", "--out", "--worker", "--checkpoint",
                           "bound_ratio", "bounds.jsonl"})
    EXPECT_TRUE(contains(r.out, flag)) << flag;
  const CliResult top = run_cli({"--help"});
  EXPECT_TRUE(contains(top.out, "measure-bounds"));
}

// With no config, data or --out: the first of MNIST and Fashion-MNIST found (here data/mnist in
// the working directory, as `terngrad data fetch mnist` leaves it) and a new runs/ folder.
TEST(MeasureBoundsCli, RunsWithoutDataOrOutFlags) {
  const fs::path shared = fs::path(TG_SHARED_DATA_DIR) / "mnist";
  if (!fs::exists(shared / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << shared << " is absent";
  TempDir cwd, io;
  fs::create_directories(cwd / "data");
  fs::create_directory_symlink(fs::absolute(shared), fs::path(cwd / "data") / "mnist");
  const std::vector<std::string> args = {
      "measure-bounds", "--no-progress",      "--every", "1",
      "--set",          "train.iterations=2", "--set",   "train.batch_size=16",
      "--set",          "data.eval_limit=16"};
  const int code = wait_exit(spawn_cli(args, io / "out", io / "err", {}, cwd.str()));
  const std::string err = read_text(io / "err");
  ASSERT_EQ(code, 0) << err;
  EXPECT_TRUE(contains(err, "data: mnist from data/mnist")) << err;
  EXPECT_TRUE(contains(err, "no --out: writing to runs/measure-bounds-")) << err;
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(cwd / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].filename().string().rfind("measure-bounds-", 0), 0u) << runs[0];
  const auto rows = json_lines(read_text(runs[0] / "bounds.jsonl"));
  EXPECT_FALSE(rows.empty());
}

TEST(MeasureBoundsCli, RowsTableAndRun) {
  TempDir tmp;
  const std::string out = tmp / "b";
  const CliResult r = run_cli(bounds_args(out, 12, 5));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(fs::path(out) / "bounds.jsonl"));
  const auto rows = json_lines(read_text(fs::path(out) / "bounds.jsonl"));
  // Iterations 0, 5, 10; per iteration 4 combinations x (tensors + model).
  std::set<int> iterations;
  std::map<std::string, int> per_tensor;
  std::set<std::pair<std::string, double>> combos;
  for (const auto& o : rows) {
    for (const char* key : {"iteration", "tensor", "scaling", "clip", "bound_ratio", "numel",
                            "inf_l1_ratio", "g_sq", "inf_l1", "variance", "sparsity",
                            "realized_sparsity", "clipped_fraction", "length_ratio", "angle_deg"})
      ASSERT_TRUE(o.has(key)) << key;
    iterations.insert(static_cast<int>(o["iteration"].as_number()));
    per_tensor[o["tensor"].as_string()]++;
    const std::string scaling = o["scaling"].as_string();
    EXPECT_TRUE(scaling == "layer" || scaling == "model") << scaling;
    const double clip = o["clip"].as_number();
    EXPECT_TRUE(clip == 0.0 || clip == 2.5) << clip;
    combos.insert({scaling, clip});
    // s >= |h_i| for every element of the (clipped) gradient h: the ratio is >= 1.
    EXPECT_GE(o["bound_ratio"].as_number(), 1.0) << o["tensor"].as_string();
    EXPECT_GE(o["sparsity"].as_number(), 0.0);
    EXPECT_LE(o["sparsity"].as_number(), 1.0);
    if (clip == 0.0) {
      EXPECT_EQ(o["clipped_fraction"].as_number(), 0.0);
    }
    if (o["tensor"].as_string() == "model" && scaling == "model" && clip == 0.0) {
      EXPECT_NEAR(o["bound_ratio"].as_number(), o["inf_l1_ratio"].as_number(),
                  kSameQuotient * o["inf_l1_ratio"].as_number());
    }
  }
  EXPECT_EQ(iterations, (std::set<int>{0, 5, 10}));
  EXPECT_EQ(combos.size(), 4u);
  ASSERT_TRUE(per_tensor.count("model"));
  const size_t tensors = per_tensor.size();  // LeNet's parameter tensors + "model"
  EXPECT_GE(tensors, 5u);
  for (const auto& [name, n] : per_tensor) EXPECT_EQ(n, 3 * 4) << name;
  EXPECT_EQ(rows.size(), 3 * 4 * tensors);
  // The table: on stdout and in bounds.txt; the run beside it.
  EXPECT_TRUE(contains(r.out, "bound_ratio")) << r.out;
  EXPECT_TRUE(contains(r.out, "layer c=2.5"));
  EXPECT_TRUE(contains(r.out, "model c=0"));
  EXPECT_EQ(read_text(fs::path(out) / "bounds.txt"), r.out);
  EXPECT_TRUE(fs::exists(fs::path(out) / "train" / "summary.json"));
  EXPECT_TRUE(contains(r.err, "3 sampled iterations"));

  // Never overwritten: a second run into the same directory is refused, the rows kept.
  const CliResult again = run_cli(bounds_args(out, 2, 1));
  EXPECT_NE(again.exit_code, 0);
  EXPECT_TRUE(contains(again.err, "bounds.jsonl")) << again.err;
  EXPECT_TRUE(contains(again.err, "already exists")) << again.err;
  EXPECT_EQ(json_lines(read_text(fs::path(out) / "bounds.jsonl")).size(), rows.size());

  // --checkpoint: one sample at the checkpoint's step (12), nothing of the scratch run left.
  const std::string ck_out = tmp / "ck";
  const CliResult ck =
      run_cli({"measure-bounds", "--no-progress", "--checkpoint",
               (fs::path(out) / "train" / "checkpoint.tgckpt").string(), "--out", ck_out});
  ASSERT_EQ(ck.exit_code, 0) << ck.err;
  const auto ck_rows = json_lines(read_text(fs::path(ck_out) / "bounds.jsonl"));
  EXPECT_EQ(ck_rows.size(), 4 * tensors);
  for (const auto& o : ck_rows) EXPECT_EQ(o["iteration"].as_number(), 12);
  EXPECT_FALSE(fs::exists(fs::path(ck_out) / "checkpoint_step"));
  EXPECT_FALSE(fs::exists(fs::path(ck_out) / "train"));
}

// quantize_logits = false: the classifier's two tensors are sent in fp32, so they get no rows;
// with compression.clip = 0 there are only the two unclipped combinations.
TEST(MeasureBoundsCli, ExcludedTensorsAndNoClip) {
  TempDir tmp;
  const CliResult r = run_cli(
      bounds_args(tmp / "b", 1, 1,
                  {"--set", "compression.quantize_logits=false", "--set", "compression.clip=0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = json_lines(read_text(tmp / "b/bounds.jsonl"));
  std::set<std::string> tensors;
  for (const auto& o : rows) {
    tensors.insert(o["tensor"].as_string());
    EXPECT_EQ(o["clip"].as_number(), 0.0);
  }
  EXPECT_EQ(rows.size(), 2 * tensors.size());
  // LeNet: conv1, conv2, fc1 (w, b each) ternarized; fc2 (w, b) not.
  EXPECT_EQ(tensors.size(), 6u + 1u) << r.out;
}

// With N >= 2 workers, rows {"record": "sharing"} give every worker's own layer scaler, the shared
// one (the max over the workers, which every worker ternarizes with) and their ratio, for every
// sampled iteration and ternarized tensor; bounds.txt summarizes the ratios.
TEST(MeasureBoundsCli, SharingRowsGiveEachWorkersOwnAndTheSharedScaler) {
  TempDir tmp;
  const std::string out = tmp / "s";
  const CliResult r = run_cli(bounds_args(out, 6, 5, {"--set", "workers.count=4"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::pair<int, std::string>, double> worker0;  // worker 0's layer c=2.5 scaler
  std::map<std::pair<int, std::string>, std::vector<json::Value>> sharing;
  for (const auto& o : json_lines(read_text(fs::path(out) / "bounds.jsonl"))) {
    const std::pair<int, std::string> key{static_cast<int>(o["iteration"].as_number()),
                                          o["tensor"].as_string()};
    if (o.has("record")) {
      EXPECT_EQ(o["record"].as_string(), "sharing");
      sharing[key].push_back(o);
    } else if (o["scaling"].as_string() == "layer" && o["clip"].as_number() == 2.5) {
      worker0[key] = o["scaler"].as_number();
    }
  }
  ASSERT_FALSE(sharing.empty());
  for (const auto& [key, rows] : sharing) {
    SCOPED_TRACE(key.second + " at iteration " + std::to_string(key.first));
    EXPECT_TRUE(key.first == 0 || key.first == 5);
    ASSERT_EQ(rows.size(), 4u);  // one per worker
    double shared = 0, largest_own = 0;
    std::set<int> workers;
    for (const auto& o : rows) {
      workers.insert(static_cast<int>(o["worker"].as_number()));
      const double own = o["own_scaler"].as_number();
      shared = o["shared_scaler"].as_number();
      largest_own = std::max(largest_own, own);
      ASSERT_GT(own, 0.0);
      EXPECT_EQ(o["shared_to_own"].as_number(), shared / own);
      EXPECT_GE(o["shared_to_own"].as_number(), 1.0);
      // A larger scaler keeps fewer codes.
      EXPECT_GE(o["shared_sparsity"].as_number(), o["own_sparsity"].as_number());
      EXPECT_LE(o["shared_sparsity"].as_number(), 1.0);
      if (o["worker"].as_number() == 0) {
        ASSERT_TRUE(worker0.count(key));
        EXPECT_EQ(own, worker0[key]);  // the same c * sigma as its bound row
      }
    }
    EXPECT_EQ(workers, (std::set<int>{0, 1, 2, 3}));
    EXPECT_EQ(shared, largest_own);  // the max over the workers, exactly
  }
  size_t tensor_rows = 0;  // worker 0's bound rows of single tensors (not "model")
  for (const auto& [key, s] : worker0) tensor_rows += key.second != "model";
  EXPECT_EQ(sharing.size(), tensor_rows);
  const std::string table = read_text(fs::path(out) / "bounds.txt");
  EXPECT_TRUE(contains(table, "scaler sharing (layer c=2.5)")) << table;
  EXPECT_TRUE(contains(table, "shared scaler / a worker's own")) << table;
}

// --histograms: four panels per chosen tensor and sampled iteration, each accounting for every
// element; the ternary panel on {-s, 0, s} and the averaged one on (s/N){-N..N}, with s the
// shared scaler: the max over the workers of each one's c*sigma, so >= worker 0's own scaler
// (its bounds.jsonl row under layer scaling and the config's clip).
TEST(MeasureBoundsCli, Histograms) {
  TempDir tmp;
  const std::string out = tmp / "h";
  const CliResult r = run_cli(bounds_args(
      out, 6, 5, {"--set", "workers.count=2", "--histograms", "conv2/w,conv1/b", "--bins", "33"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "16 histogram rows")) << r.err;
  std::map<std::pair<int, std::string>, double> own;  // (iteration, tensor) -> worker 0's s
  for (const auto& o : json_lines(read_text(fs::path(out) / "bounds.jsonl")))
    if (!o.has("record") && o["scaling"].as_string() == "layer" && o["clip"].as_number() == 2.5)
      own[{static_cast<int>(o["iteration"].as_number()), o["tensor"].as_string()}] =
          o["scaler"].as_number();
  const auto rows = json_lines(read_text(fs::path(out) / "histograms.jsonl"));
  ASSERT_EQ(rows.size(), 2u * 2u * 4u);  // iterations 0, 5 x 2 tensors x 4 panels
  std::map<std::string, int> panels;
  std::set<std::string> tensors;
  for (const auto& o : rows) {
    const std::string panel = o["panel"].as_string(), tensor = o["tensor"].as_string();
    const int it = static_cast<int>(o["iteration"].as_number());
    panels[panel]++;
    tensors.insert(tensor);
    EXPECT_EQ(o["workers"].as_number(), 2);
    const double s = o["scaler"].as_number();
    const auto mine = own.find({it, tensor});
    ASSERT_NE(mine, own.end()) << tensor;
    EXPECT_GE(s, mine->second) << tensor << " at " << it;
    double n = 0;
    for (const auto& c : o["counts"].arr) n += c.as_number();
    EXPECT_EQ(n, o["numel"].as_number()) << panel << " " << tensor;
    if (panel == "original" || panel == "clipped") {
      EXPECT_EQ(o["counts"].arr.size(), 33u);
      EXPECT_EQ(o["lo"].as_number(), -o["hi"].as_number());
      if (panel == "clipped") {
        EXPECT_EQ(o["hi"].as_number(), s);
      }
    } else {
      const int kmax = panel == "ternary" ? 1 : 2;
      EXPECT_EQ(o["kmax"].as_number(), kmax);
      ASSERT_EQ(o["levels"].arr.size(), static_cast<size_t>(2 * kmax + 1));
      EXPECT_NEAR(o["levels"].arr.back().as_number(), s, 1e-6 * s);
      EXPECT_NEAR(o["step"].as_number(), s / kmax, 1e-6 * s);
    }
  }
  EXPECT_EQ(tensors, (std::set<std::string>{"conv1/b", "conv2/w"}));
  for (const char* p : {"original", "clipped", "ternary", "averaged"}) EXPECT_EQ(panels[p], 4) << p;

  // An unknown or excluded tensor is refused before training, listing the ternarized ones.
  const CliResult bad = run_cli(bounds_args(tmp / "x", 2, 1, {"--histograms", "conv9/w"}));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(contains(bad.err, "'conv9/w' is not a tensor")) << bad.err;
  EXPECT_TRUE(contains(bad.err, "conv2/w")) << bad.err;
  EXPECT_FALSE(fs::exists(tmp / "x/bounds.jsonl"));
  const CliResult off = run_cli(bounds_args(
      tmp / "y", 2, 1, {"--set", "compression.quantize_logits=false", "--histograms", "logits/w"}));
  EXPECT_NE(off.exit_code, 0);
  EXPECT_TRUE(contains(off.err, "not ternarized")) << off.err;
}

TEST(MeasureBoundsCli, BadArguments) {
  TempDir tmp;
  // --every and --bins must be positive (refused before anything runs).
  EXPECT_NE(run_cli(bounds_args(tmp / "a", 2, 0)).exit_code, 0);
  EXPECT_NE(run_cli({"measure-bounds", "--every", "3", "--bins", "0"}).exit_code, 0);
  // A worker the config does not have.
  const CliResult w = run_cli(bounds_args(tmp / "w", 2, 1, {"--worker", "3"}));
  EXPECT_NE(w.exit_code, 0);
  EXPECT_TRUE(contains(w.err, "--worker 3")) << w.err;
  EXPECT_TRUE(contains(w.err, "workers.count = 1")) << w.err;
  EXPECT_FALSE(fs::exists(tmp / "w/bounds.jsonl"));
  // A config error names the key.
  const CliResult k = run_cli(bounds_args(tmp / "k", 2, 1, {"--set", "train.nonsense=1"}));
  EXPECT_NE(k.exit_code, 0);
  EXPECT_TRUE(contains(k.err, "nonsense")) << k.err;
  // A checkpoint that is not one.
  write_text(tmp / "junk.tgckpt", "not a checkpoint");
  const CliResult c =
      run_cli({"measure-bounds", "--checkpoint", tmp / "junk.tgckpt", "--out", tmp / "c"});
  EXPECT_NE(c.exit_code, 0);
  EXPECT_TRUE(contains(c.err, "junk.tgckpt")) << c.err;
}

}  // namespace
}  // namespace tg::testing
