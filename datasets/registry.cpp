// The one name -> factory table of datasets, and where their files are found without data.path.
// A new dataset kind adds its opener to loaders.h and one row here.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/fetch.h"
#include "datasets/loaders.h"
#include "nn/core/error.h"

namespace tg::data {
namespace {

using Opener = std::unique_ptr<Dataset> (*)(const DataOptions&, Split);

struct Entry {
  const char* name;
  Opener open;
  // Where the files are looked for without data.path (see locate_dataset): the files whose
  // presence marks a directory (any one of them), and the system locations of installed
  // packages, each with its package. data/<name> counts for the datasets `data fetch` knows.
  std::vector<const char*> probes;
  std::vector<std::pair<const char*, const char*>> system;  // {directory, package}
  const char* expected;  // what data.path must hold, for the error
};

const std::vector<Entry>& datasets() {
  static const std::vector<Entry> kDatasets = {
      {"mnist",
       detail::open_mnist,
       {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"},
       {},
       "the directory with train-images-idx3-ubyte[.gz] etc."},
      {"fashion-mnist",
       detail::open_fashion_mnist,
       {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"},
       {{"/usr/share/datasets/fashion-mnist", "dataset-fashion-mnist"}},
       "the directory with train-images-idx3-ubyte[.gz] etc."},
      {"cifar10",
       detail::open_cifar10,
       {"data_batch_1.bin", "cifar-10-batches-bin/data_batch_1.bin"},
       {},
       "the directory with data_batch_1..5.bin and test_batch.bin, or its parent holding "
       "cifar-10-batches-bin"},
      {"image-folder",
       detail::open_image_folder,
       {},
       {},
       "a directory with train/<class>/*.jpg and val/<class>/*.jpg"},
      {"synthetic", detail::open_synthetic, {}, {}, nullptr},
  };
  return kDatasets;
}

const Entry& entry_of(const std::string& name) {
  for (const Entry& e : datasets()) {
    if (name == e.name) return e;
  }
  std::string known;
  for (const Entry& e : datasets()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  TG_THROW("unknown dataset '", name, "' (known: ", known, ")");
}

bool fetchable(const Entry& e) {
  const std::vector<std::string> names = fetchable_datasets();
  return std::find(names.begin(), names.end(), e.name) != names.end();
}

bool holds(const Entry& e, const std::string& dir) {
  for (const char* probe : e.probes) {
    if (detail::file_exists(detail::join_path(dir, probe))) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const Entry& e : datasets()) names.emplace_back(e.name);
  return names;
}

std::optional<DataLocation> find_dataset(const DataOptions& options) {
  const Entry& e = entry_of(options.name);
  if (!options.path.empty()) return DataLocation{options.path, "data.path"};
  if (e.expected == nullptr) return DataLocation{"", "generated"};  // no files
  if (fetchable(e)) {
    const std::string local = default_fetch_dir(e.name);
    if (holds(e, local)) return DataLocation{local, local};
  }
  for (const auto& [dir, package] : e.system) {
    if (holds(e, dir)) return DataLocation{dir, std::string("installed package ") + package};
  }
  return std::nullopt;
}

DataLocation locate_dataset(const DataOptions& options) {
  if (auto found = find_dataset(options)) return *found;
  const Entry& e = entry_of(options.name);
  if (!fetchable(e)) {
    TG_THROW(e.name, ": no data.path given (expected ", e.expected, ")");
  }
  std::string looked = default_fetch_dir(e.name);
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  if (!ec) looked += " (in " + cwd.string() + ")";
  std::string install;
  for (const auto& [dir, package] : e.system) {
    looked += std::string(", ") + dir;
    install += std::string(install.empty() ? "" : ", ") + "apt-get install " + package;
  }
  TG_THROW(e.name, ": no data.path given and no copy found in ", looked,
           ": run 'terngrad data fetch ", e.name, "'",
           install.empty() ? "" : " (or " + install + ")", ", or set data.path to ", e.expected);
}

std::unique_ptr<Dataset> open_dataset(const DataOptions& options, Split split) {
  const Entry& e = entry_of(options.name);
  if (!options.path.empty() || e.expected == nullptr) return e.open(options, split);
  DataOptions resolved = options;
  resolved.path = locate_dataset(options).path;
  return e.open(resolved, split);
}

}  // namespace tg::data
