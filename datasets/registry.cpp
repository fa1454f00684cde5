// The one name -> factory table of datasets. A new dataset kind adds its opener to loaders.h and
// one row here.
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/loaders.h"
#include "nn/core/error.h"

namespace tg::data {
namespace {

using Opener = std::unique_ptr<Dataset> (*)(const DataOptions&, Split);

struct Entry {
  const char* name;
  Opener open;
};

constexpr Entry kDatasets[] = {
    {"mnist", detail::open_mnist},         {"fashion-mnist", detail::open_fashion_mnist},
    {"cifar10", detail::open_cifar10},     {"image-folder", detail::open_image_folder},
    {"synthetic", detail::open_synthetic},
};

}  // namespace

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const Entry& e : kDatasets) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Dataset> open_dataset(const DataOptions& options, Split split) {
  for (const Entry& e : kDatasets) {
    if (options.name == e.name) return e.open(options, split);
  }
  std::string known;
  for (const Entry& e : kDatasets) known += (known.empty() ? "" : ", ") + std::string(e.name);
  TG_THROW("unknown dataset '", options.name, "' (known: ", known, ")");
}

}  // namespace tg::data
