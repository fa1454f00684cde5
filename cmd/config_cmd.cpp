#include "cmd/config_cmd.h"

#include <cstdio>

#include "config/config.h"

namespace tg::cli {

CLI::App* add_config_command(CLI::App& app, ConfigArgs& a) {
  auto* cmd = app.add_subcommand("config", "Print the config reference or a resolved config");
  cmd->add_flag("--reference", a.reference,
                "Every key with its type, default and meaning (Markdown)");
  cmd->add_option("-c,--config", a.config_path, "Print this config fully resolved (TOML)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", a.overrides, "Override a key before printing")->allow_extra_args(false);
  return cmd;
}

int run_config(const ConfigArgs& a) {
  if (a.reference) {
    std::printf("%s", config::reference_markdown().c_str());
    return 0;
  }
  const config::Config cfg = a.config_path.empty()
                                 ? config::default_config(a.overrides)
                                 : config::load_config_file(a.config_path, a.overrides);
  std::printf("%s", config::to_toml(cfg).c_str());
  return 0;
}

}  // namespace tg::cli
