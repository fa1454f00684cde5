// `terngrad data synth-folder` (datasets/synthetic_folder.h): the ImageNet layout with the asked
// counts, the same bytes for the same options, other bytes for another seed, sizes within +-25% of
// the mean, a folder the image-folder loader trains from, and bad options as one-line errors.
#include <gtest/gtest.h>

#include <jpeglib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"
#include "tests/testing/files.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;

// path (relative to root) -> bytes, for every file under root.
std::map<std::string, std::vector<uint8_t>> tree(const std::string& root) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file())
      out[fs::relative(e.path(), root).string()] = read_bytes(e.path().string());
  return out;
}

// Width and height from a JPEG's header.
std::pair<int, int> jpeg_size(const std::vector<uint8_t>& bytes) {
  jpeg_decompress_struct d;
  jpeg_error_mgr err;
  d.err = jpeg_std_error(&err);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, bytes.data(), bytes.size());
  jpeg_read_header(&d, TRUE);
  const std::pair<int, int> wh{static_cast<int>(d.image_width), static_cast<int>(d.image_height)};
  jpeg_destroy_decompress(&d);
  return wh;
}

TEST(DataSynthFolderCli, WritesTheLayoutDeterministically) {
  TempDir dir;
  const std::vector<std::string> args = {
      "data", "synth-folder", dir / "a", "--classes", "3", "--train", "4", "--val",
      "2",    "--width",      "80",      "--height",  "60"};
  const CliResult r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value v = json::parse(r.out);
  EXPECT_EQ(v["images"].as_number(), 18);
  const auto a = tree(dir / "a");
  ASSERT_EQ(a.size(), 18u);
  EXPECT_TRUE(a.count("train/class0002/img0000003.jpg"));
  EXPECT_TRUE(a.count("val/class0000/img0000001.jpg"));
  double bytes = 0;
  for (const auto& [name, b] : a) {
    bytes += static_cast<double>(b.size());
    const auto [w, h] = jpeg_size(b);
    EXPECT_TRUE(w >= 60 && w <= 100 && h >= 45 && h <= 75) << name << ": " << w << " x " << h;
  }
  EXPECT_EQ(v["bytes"].as_number(), bytes);
  // The same options, the same bytes; another seed, other images.
  std::vector<std::string> again = args;
  again[2] = dir / "b";
  ASSERT_EQ(run_cli(again).exit_code, 0);
  EXPECT_EQ(tree(dir / "b"), a);
  again[2] = dir / "c";
  again.insert(again.end(), {"--seed", "2"});
  ASSERT_EQ(run_cli(again).exit_code, 0);
  EXPECT_NE(tree(dir / "c").at("train/class0000/img0000000.jpg"),
            a.at("train/class0000/img0000000.jpg"));

  // The image-folder loader trains from it (CifarNet on 24 x 24 crops of the RGB images).
  const CliResult t = run_cli({"train", "--no-progress", "--set", "model.name=cifarnet", "--set",
                               "data.name=image-folder", "--set", "data.path=" + (dir / "a"),
                               "--set", "data.image_size=24", "--set", "train.batch_size=4",
                               "--set", "train.iterations=3", "--set", "data.eval_batch_size=6"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const json::Value s = json::parse(t.out);
  EXPECT_EQ(s["test_examples"].as_number(), 6);
  EXPECT_EQ(s["iterations"].as_number(), 3);
}

TEST(DataSynthFolderCli, BadOptionsAreOneLineErrors) {
  TempDir dir;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--classes", "0"}, {"--width", "4"}, {"--quality", "101"}}) {
    std::vector<std::string> args = {"data", "synth-folder", dir / "x"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << extra[0];
    EXPECT_TRUE(contains(r.err, extra[0])) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // A directory that cannot be made.
  write_text(dir / "file", "x");
  const CliResult r = run_cli({"data", "synth-folder", dir / "file/sub"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "cannot create " + (dir / "file/sub"))) << r.err;
}

}  // namespace
}  // namespace tg::testing
