// `terngrad data fetch` end to end: the CLI wiring onto datasets/fetch (whose download, checksum
// and extraction paths are tested in tests/datasets/fetch_test.cpp through a local HTTP server).
// Here the mirror is a local directory holding the official MNIST files (../shared/data/mnist),
// so the real MD5 table is checked.
#include <gtest/gtest.h>

#include <filesystem>

#include "nn/core/hash.h"
#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"

namespace tg::testing {
namespace {

const std::string kMnist = std::string(TG_SHARED_DATA_DIR) + "/mnist";

TEST(DataFetchCli, FetchesVerifiesAndTheResultTrains) {
  TempDir dir;
  const std::string dest = dir / "mnist";
  CliResult r = run_cli({"data", "fetch", "mnist", "--dir", dest, "--mirror", kMnist});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["path"].as_string(), dest);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    EXPECT_EQ(md5_file(dest + "/" + f), md5_file(kMnist + "/" + f)) << f;
  EXPECT_NE(r.err.find("data.path=" + dest), std::string::npos) << r.err;

  // Fetching again verifies and skips.
  r = run_cli({"data", "fetch", "mnist", "--dir", dest, "--mirror", kMnist});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("already present"), std::string::npos) << r.err;

  // The fetched directory is a working data.path.
  r = run_cli({"train", "--no-progress", "--set", "data.path=" + dest, "--set",
               "train.iterations=3", "--set", "train.batch_size=8", "--set",
               "data.eval_limit=100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["test_examples"].as_number(), 100);
}

TEST(DataFetchCli, ErrorsNameTheProblem) {
  TempDir dir;
  CliResult r = run_cli({"data", "fetch", "imagenet", "--dir", dir / "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("mnist"), std::string::npos) << r.err;  // lists the known datasets

  // A mirror with a corrupted file: refused, naming the file; nothing left under its name.
  const std::string bad = dir / "bad";
  std::filesystem::create_directories(bad);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    std::filesystem::copy_file(kMnist + "/" + f, bad + "/" + f);
  std::string bytes = read_text(bad + "/t10k-labels-idx1-ubyte.gz");
  bytes[bytes.size() / 2] ^= 1;
  std::filesystem::permissions(bad + "/t10k-labels-idx1-ubyte.gz",
                               std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  write_text(bad + "/t10k-labels-idx1-ubyte.gz", bytes);
  r = run_cli({"data", "fetch", "mnist", "--dir", dir / "out", "--mirror", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ec29112dd5afa0611ce80d1b7f02629c"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out/t10k-labels-idx1-ubyte.gz"));

  r = run_cli({"data", "fetch"});
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace tg::testing
