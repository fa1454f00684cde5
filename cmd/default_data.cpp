#include "cmd/default_data.h"

#include "datasets/dataset.h"
#include "train/options.h"

namespace tg::cli {

void choose_default_data(config::Config& cfg, const std::string& config_path,
                         const std::vector<std::string>& overrides) {
  if (!config_path.empty()) return;
  for (const std::string& o : overrides) {
    if (o.rfind("data.name=", 0) == 0 || o.rfind("data.path=", 0) == 0) return;
  }
  for (const char* name : {"mnist", "fashion-mnist"}) {
    data::DataOptions d = train::data_options(cfg);
    d.name = name;
    if (data::find_dataset(d)) {
      cfg.data.dataset.name = name;
      return;
    }
  }
}

}  // namespace tg::cli
