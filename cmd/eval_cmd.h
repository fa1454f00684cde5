// `terngrad eval`: a checkpoint evaluated on the test split (train/evaluate.h), as JSON on stdout.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct EvalArgs {
  std::string checkpoint, config_path;
  std::vector<std::string> overrides;
  bool raw = false;  // the raw weights even when the run kept an EMA
};

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args);
int run_eval(const EvalArgs& args);

}  // namespace tg::cli
