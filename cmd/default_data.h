// The data `convergence-check` and `measure-bounds` use when they are run with no config and no
// data.name or data.path override: the first of MNIST and Fashion-MNIST that datasets/dataset.h
// locate_dataset() finds (data/mnist, data/fashion-mnist, the installed dataset-fashion-mnist
// package that the set-up command brings), so both commands run with no flags at all on a freshly
// set-up machine.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace tg::cli {

// Switches cfg.data.name to the first dataset found when `config_path` is empty and no override
// names a data.* key; otherwise leaves `cfg` as it is (an explicit choice is never replaced). When
// neither is found `cfg` keeps MNIST, whose error names the fetch command.
void choose_default_data(config::Config& cfg, const std::string& config_path,
                         const std::vector<std::string>& overrides);

}  // namespace tg::cli
