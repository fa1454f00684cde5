// `terngrad train`: the flags become a Config (--config, --set, --device) and TrainOptions (--out,
// --resume, --threads, the rank from --rank/--world-size/--rendezvous, Slurm, Open MPI or the
// launcher), then train::Trainer runs (train/trainer.h); with --nproc P this process is the
// launcher of P ranks (comm/launch.h). Prints the summary JSON on stdout, progress on stderr.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct TrainArgs {
  std::string config_path, out_dir, device;
  std::vector<std::string> overrides;
  bool resume = false, progress_on = false, progress_off = false;
  int threads = 0;  // 0 = the thread policy
  int nproc = 0;    // > 1 (or >= 1 with restarts): launch that many ranks of this binary
  std::optional<int> max_restarts;  // --max-restarts: comm.max_restarts
  std::optional<int> rank, world_size;
  std::optional<std::string> rendezvous;
  std::string job_id;  // "" = $TG_JOB_ID, else "run"
};

// Adds the `train` subcommand with its options bound to `args`; returns it.
CLI::App* add_train_command(CLI::App& app, TrainArgs& args);

// Runs it. argv: this process's command line (the launcher re-executes it for each rank).
// Returns the exit code (0, 130 after an interruption, or the launcher's); throws tg::Error on
// bad input.
int run_train(const TrainArgs& args, const std::vector<std::string>& argv);

}  // namespace tg::cli
