#include "cmd/eval_cmd.h"

#include <cstdio>

#include "train/evaluate.h"

namespace tg::cli {

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  auto* eval = app.add_subcommand("eval", "Evaluate a checkpoint on the test split (prints JSON)");
  eval->add_option("--checkpoint", a.checkpoint, "Checkpoint file (checkpoint.tgckpt of a run)")
      ->required()
      ->check(CLI::ExistingFile);
  eval->add_option("-c,--config", a.config_path,
                   "Config (default: the one embedded in the checkpoint)")
      ->check(CLI::ExistingFile);
  eval->add_option("--set", a.overrides, "Override a config key, e.g. data.path=DIR (repeatable)")
      ->allow_extra_args(false);
  eval->add_flag("--raw", a.raw, "Use the raw weights even when the run kept an EMA");
  return eval;
}

int run_eval(const EvalArgs& a) {
  const train::CheckpointEval e =
      train::evaluate_checkpoint(a.checkpoint, a.config_path, a.overrides, a.raw);
  std::printf("%s\n", to_json(e).c_str());
  return 0;
}

}  // namespace tg::cli
