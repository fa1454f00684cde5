// The dataset name table: every kind is listed and an unknown name lists the known ones; where a
// dataset's files are found without data.path (data/<name>, then an installed package).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "datasets/dataset.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::data {
namespace {

TEST(DatasetRegistry, ListsEveryKind) {
  const std::vector<std::string> names = dataset_names();
  for (const char* n : {"mnist", "fashion-mnist", "cifar10", "image-folder", "synthetic"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST(DatasetRegistry, UnknownNameListsTheKnownOnes) {
  DataOptions o;
  o.name = "imagenet";
  tg::testing::expect_error_with([&] { open_dataset(o, Split::train); },
                                 {"unknown dataset 'imagenet'", "mnist", "cifar10", "synthetic"});
}

TEST(DatasetRegistry, OpensByName) {
  DataOptions o;
  o.name = "synthetic";
  o.synthetic_size = 8;
  auto ds = open_dataset(o, Split::test);
  EXPECT_EQ(ds->info().name, "synthetic");
  EXPECT_EQ(ds->info().size, 8);
  EXPECT_EQ(ds->info().split, Split::test);
}

namespace fs = std::filesystem;

// Runs the test body in `dir` as the working directory, and restores the previous one.
class InDirectory {
 public:
  explicit InDirectory(const fs::path& dir) : previous_(fs::current_path()) {
    fs::current_path(dir);
  }
  ~InDirectory() { fs::current_path(previous_); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  fs::path previous_;
};

DataOptions named(const std::string& name, const std::string& path = "") {
  DataOptions o;
  o.name = name;
  o.path = path;
  return o;
}

TEST(DatasetLocation, DataPathWinsOverEveryDefault) {
  tg::testing::TempDir dir;
  InDirectory cwd(dir.path());
  fs::create_directories("data/mnist");
  std::ofstream("data/mnist/train-images-idx3-ubyte.gz").put('x');
  const DataLocation at = locate_dataset(named("mnist", "/elsewhere"));
  EXPECT_EQ(at.path, "/elsewhere");
  EXPECT_EQ(at.source, "data.path");
}

TEST(DatasetLocation, FetchedCopyInDataNameIsFound) {
  tg::testing::TempDir dir;
  InDirectory cwd(dir.path());
  EXPECT_FALSE(find_dataset(named("mnist")).has_value());
  fs::create_directories("data/mnist");
  std::ofstream("data/mnist/train-images-idx3-ubyte.gz").put('x');
  const DataLocation at = locate_dataset(named("mnist"));
  EXPECT_EQ(at.path, "data/mnist");
  EXPECT_EQ(at.source, "data/mnist");
  // CIFAR-10 as `data fetch cifar10` leaves it: the archive's folder inside data/cifar10.
  fs::create_directories("data/cifar10/cifar-10-batches-bin");
  std::ofstream("data/cifar10/cifar-10-batches-bin/data_batch_1.bin").put('x');
  EXPECT_EQ(locate_dataset(named("cifar10")).path, "data/cifar10");
}

TEST(DatasetLocation, RealMnistOpensFromDataMnist) {
  const fs::path shared = fs::path(TG_SHARED_DATA_DIR) / "mnist";
  if (!fs::exists(shared / "t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << shared << " is absent";
  tg::testing::TempDir dir;
  InDirectory cwd(dir.path());
  fs::create_directories("data");
  fs::create_directory_symlink(fs::absolute(shared), "data/mnist");
  auto test = open_dataset(named("mnist"), Split::test);  // no data.path
  EXPECT_EQ(test->info().path, "data/mnist");
  EXPECT_EQ(test->info().size, 10000);
}

TEST(DatasetLocation, NothingFoundNamesThePlacesAndTheFetchCommand) {
  tg::testing::TempDir dir;
  InDirectory cwd(dir.path());
  fs::create_directories("data/mnist");  // present but empty: not a copy
  tg::testing::expect_error_with(
      [] { locate_dataset(named("mnist")); },
      {"mnist: no data.path given", "data/mnist", "terngrad data fetch mnist", "data.path"});
  tg::testing::expect_error_with([] { open_dataset(named("cifar10"), Split::train); },
                                 {"cifar10", "data/cifar10", "terngrad data fetch cifar10"});
  // No default location for a folder of images; nothing to fetch.
  tg::testing::expect_error_with([] { locate_dataset(named("image-folder")); },
                                 {"image-folder: no data.path given", "train/<class>"});
  // Generated data needs no files.
  EXPECT_EQ(locate_dataset(named("synthetic")).path, "");
}

TEST(DatasetLocation, InstalledFashionMnistIsTheFallback) {
  const std::string system_dir = "/usr/share/datasets/fashion-mnist";
  tg::testing::TempDir dir;
  InDirectory cwd(dir.path());
  if (!fs::exists(system_dir + "/train-images-idx3-ubyte.gz") &&
      !fs::exists(system_dir + "/train-images-idx3-ubyte")) {
    tg::testing::expect_error_with(
        [] { locate_dataset(named("fashion-mnist")); },
        {"terngrad data fetch fashion-mnist", "apt-get install dataset-fashion-mnist", system_dir});
    GTEST_SKIP() << system_dir << " is absent (the error was checked instead)";
  }
  DataLocation at = locate_dataset(named("fashion-mnist"));
  EXPECT_EQ(at.path, system_dir);
  EXPECT_EQ(at.source, "installed package dataset-fashion-mnist");
  // A fetched copy comes first.
  fs::create_directories("data/fashion-mnist");
  std::ofstream("data/fashion-mnist/train-images-idx3-ubyte").put('x');
  EXPECT_EQ(locate_dataset(named("fashion-mnist")).path, "data/fashion-mnist");
}

}  // namespace
}  // namespace tg::data
