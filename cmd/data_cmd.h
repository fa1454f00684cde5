// `terngrad data fetch`: a dataset's official files downloaded, checked and extracted
// (datasets/fetch.h); the result as JSON on stdout, where to find it on stderr.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct DataArgs {
  std::string dataset, dir, mirror;
  bool force = false;
};

// Adds `data` and its `fetch` subcommand; returns `data fetch`.
CLI::App* add_data_command(CLI::App& app, DataArgs& args);
int run_data_fetch(const DataArgs& args);

}  // namespace tg::cli
