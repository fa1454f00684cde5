// The dataset name table: every kind is listed and an unknown name lists the known ones.
#include <gtest/gtest.h>

#include <algorithm>

#include "datasets/dataset.h"
#include "tests/testing/errors.h"

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

}  // namespace
}  // namespace tg::data
