// Unreadable images in an image folder (issue 32 item 5), as a user meets them: a truncated JPEG,
// a corrupt one, a text file named .jpg, an empty file, a file deleted while the run reads the
// folder. By default the run stops with one error naming the file, exit 1, its checkpoints
// intact; with data.skip_bad_files the image is replaced by the split's next readable one,
// counted in metrics.jsonl and summary.json, and the run ends with the parameters of a folder
// where that file is a copy of its replacement.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "datasets/synthetic_folder.h"
#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"
#include "tests/testing/files.h"
#include "train/checkpoint.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;

// 3 classes x 8 training images (and 2 validation ones) of about 72 x 56.
void write_folder(const std::string& root) {
  data::SyntheticFolderOptions o;
  o.classes = 3;
  o.train_per_class = 8;
  o.val_per_class = 2;
  o.width = 72;
  o.height = 56;
  data::write_synthetic_folder(root, o);
}

const char* kBad = "train/class0001/img0000003.jpg";
const char* kNext = "train/class0001/img0000004.jpg";  // what replaces it

// CifarNet on 24 x 24 crops, batch 4: an epoch of the 24 images is 6 iterations.
std::vector<std::string> run_args(const std::string& folder, const std::string& out, int iterations,
                                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"train", "--no-progress",
                                "--set", "model.name=cifarnet",
                                "--set", "data.name=image-folder",
                                "--set", "data.path=" + folder,
                                "--set", "data.image_size=24",
                                "--set", "train.batch_size=4",
                                "--set", "train.iterations=" + std::to_string(iterations),
                                "--set", "train.log_every=1",
                                "--set", "train.checkpoint_every=2",
                                "--set", "data.eval_batch_size=6",
                                "--out", out};
  a.insert(a.end() - 2, extra.begin(), extra.end());
  return a;
}

// Every checkpoint the run left loads whole.
void expect_checkpoints_intact(const std::string& out) {
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("checkpoint", 0) == 0 && name.size() > 7 &&
        name.substr(name.size() - 7) == ".tgckpt") {
      EXPECT_NO_THROW(train::load_checkpoint(e.path().string())) << name;
    }
  }
}

struct Damage {
  std::string label;
  std::function<std::string(const std::string& good)> bytes;
};

TEST(BadFiles, EachKindStopsTheRunOrIsReplacedWhenAskedTo) {
  TempDir dir;
  write_folder(dir / "clean");
  // The reference for a replaced file: the folder with that file a copy of its replacement.
  fs::copy(dir / "clean", dir / "copied", fs::copy_options::recursive);
  fs::copy_file(dir / ("clean/" + std::string(kNext)), dir / ("copied/" + std::string(kBad)),
                fs::copy_options::overwrite_existing);
  const CliResult ref = run_cli(run_args(dir / "copied", dir / "ref", 12));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string want = json::parse(ref.out)["params_sha256"].as_string();

  const std::vector<Damage> damages = {
      {"truncated", [](const std::string& g) { return g.substr(0, g.size() / 2); }},
      {"corrupt header",
       [](const std::string& g) {
         std::string b = g;
         for (size_t i = 2; i < 60; ++i) b[i] = static_cast<char>(0xa5);
         return b;
       }},
      {"not a JPEG", [](const std::string&) { return std::string("<html>404</html>\n"); }},
      {"empty", [](const std::string&) { return std::string(); }},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.label);
    const std::string folder = dir / ("f-" + std::to_string(&d - damages.data()));
    fs::copy(dir / "clean", folder, fs::copy_options::recursive);
    const std::string bad = folder + "/" + kBad;
    write_text(bad, d.bytes(read_text(bad)));

    const std::string out = folder + "-stop";
    const CliResult stop = run_cli(run_args(folder, out, 12));
    EXPECT_EQ(stop.exit_code, 1) << stop.err;
    const auto lines = error_lines(stop.err);
    ASSERT_EQ(lines.size(), 1u) << stop.err;
    EXPECT_TRUE(contains(lines[0], bad)) << lines[0];
    EXPECT_TRUE(contains(lines[0], "data.skip_bad_files = true")) << lines[0];
    EXPECT_FALSE(fs::exists(out + "/summary.json"));
    expect_checkpoints_intact(out);

    const std::string skip_out = folder + "-skip";
    const CliResult skip =
        run_cli(run_args(folder, skip_out, 12, {"--set", "data.skip_bad_files=true"}));
    ASSERT_EQ(skip.exit_code, 0) << skip.err;
    const json::Value s = json::parse(skip.out);
    // Two epochs: the bad file was drawn twice, and replaced each time.
    EXPECT_EQ(s["bad_files_replaced"].as_number(), 2);
    ASSERT_EQ(s["bad_files"].arr.size(), 1u);
    EXPECT_EQ(s["bad_files"].arr[0]["file"].as_string(), bad);
    EXPECT_EQ(s["params_sha256"].as_string(), want);
    EXPECT_TRUE(contains(skip.err, "data: replacing unreadable " + bad)) << skip.err;
    bool counted = false;
    for (const json::Value& v : json_lines(read_text(skip_out + "/metrics.jsonl")))
      counted = counted || (v.has("bad_files_replaced") && v["bad_files_replaced"].as_number() > 0);
    EXPECT_TRUE(counted) << "metrics.jsonl counts the replacements";
  }
}

TEST(BadFiles, AFileDeletedDuringTheRunIsNamed) {
  TempDir dir;
  write_folder(dir / "f");
  const std::string out = dir / "run";
  const pid_t p = spawn_cli(run_args(dir / "f", out, 100000), dir / "o", dir / "e");
  ASSERT_TRUE(wait_for_line(out + "/metrics.jsonl", "\"step\":3", std::chrono::seconds(60), p))
      << read_text(dir / "e");
  const std::string gone = dir / ("f/" + std::string(kBad));
  fs::remove(gone);
  const int code = wait_exit_within(p, 120);
  const std::string err = read_text(dir / "e");
  EXPECT_EQ(code, 1) << err;
  const auto lines = error_lines(err);
  ASSERT_EQ(lines.size(), 1u) << err;
  EXPECT_TRUE(contains(lines[0], gone + ": cannot open (No such file or directory)")) << lines[0];
  expect_checkpoints_intact(out);
}

}  // namespace
}  // namespace tg::testing
