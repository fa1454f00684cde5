// `terngrad data fetch`: a dataset's official files downloaded, checked and extracted
// (datasets/fetch.h); the result as JSON on stdout, where to find it on stderr.
// `terngrad data synth-folder DIR`: a deterministic ImageNet-layout JPEG folder
// (datasets/synthetic_folder.h), for trying and benchmarking the image-folder loader.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct DataArgs {
  std::string dataset, dir, mirror;
  bool force = false;
  std::string synth_dir;
  int classes = 10, train_per_class = 50, val_per_class = 10, width = 500, height = 375;
  int quality = 90;
  uint64_t seed = 1;
};

struct DataCommands {
  CLI::App* fetch = nullptr;
  CLI::App* synth_folder = nullptr;
};

// Adds `data` and its subcommands.
DataCommands add_data_command(CLI::App& app, DataArgs& args);
int run_data_fetch(const DataArgs& args);
int run_data_synth_folder(const DataArgs& args);

}  // namespace tg::cli
