// `terngrad config`: the key reference (--reference, Markdown: the README's table) or a config
// fully resolved, as TOML (config/config.h).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct ConfigArgs {
  bool reference = false;
  std::string config_path;
  std::vector<std::string> overrides;
};

CLI::App* add_config_command(CLI::App& app, ConfigArgs& args);
int run_config(const ConfigArgs& args);

}  // namespace tg::cli
