#include "cmd/train_cmd.h"

#include <algorithm>
#include <cstdio>

#include "cmd/cli.h"
#include "cmd/progress.h"
#include "comm/launch.h"
#include "comm/process_group.h"
#include "config/config.h"
#include "nn/core/error.h"
#include "train/trainer.h"

namespace tg::cli {

namespace {

void print_result(const train::TrainSummary& s) {
  if (!s.test) return;
  std::fprintf(
      stderr,
      "%s on %s: test accuracy %s (%s weights), loss %.4f; %lld iterations, %.0f img/s, %s\n",
      s.model.c_str(), s.device.c_str(), format_percent(s.test->accuracy).c_str(),
      s.eval_weights.c_str(), s.test->loss, static_cast<long long>(s.iterations), s.images_per_sec,
      format_duration(s.wall_seconds).c_str());
}

// --nproc P: this process starts the P ranks and waits for them.
int launch(const TrainArgs& a, const config::Config& cfg, const std::vector<std::string>& argv) {
  TG_CHECK(!a.rank && !a.world_size && !a.rendezvous,
           "--nproc starts the ranks itself; it cannot be combined with --rank, --world-size or "
           "--rendezvous");
  TG_CHECK(cfg.workers.count % a.nproc == 0, "--nproc ", a.nproc,
           ": workers.count = ", cfg.workers.count,
           " cannot be spread over the processes (each hosts workers.count / P workers; set "
           "--set workers.count=",
           a.nproc, " or a multiple)");
  comm::resolve_backend(cfg.comm.group.backend, parse_device(cfg.device));
  comm::LaunchOptions lo;
  lo.plain_stdout_rank = 0;
  if (cfg.comm.max_restarts > 0) {
    TG_CHECK(!a.out_dir.empty(), "comm.max_restarts = ", cfg.comm.max_restarts,
             " needs --out: restarted ranks continue from the checkpoints written there");
    lo.max_restarts = static_cast<int>(cfg.comm.max_restarts);
    lo.restart_args = {"--resume"};
  }
  return comm::launch_local(a.nproc, comm::worker_argv(argv, {"--nproc", "--max-restarts"}), lo);
}

// TG_RESTARTS: how many times the launcher (or a Slurm/Open MPI loop) restarted this run.
int64_t restarts_from(const comm::EnvMap& env) {
  auto it = env.find("TG_RESTARTS");
  if (it == env.end() || it->second.empty()) return 0;
  const std::string& v = it->second;
  const bool digits =
      v.size() <= 9 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  TG_CHECK(digits, "TG_RESTARTS='", v,
           "' is not a non-negative integer (the restarts before this start: 0, 1, 2, ...)");
  return std::stoll(v);
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainArgs& a) {
  auto* train = app.add_subcommand("train", "Train a network, in one process or several");
  train->footer(
      "In this process, or as P processes (--nproc P on this machine; --rank/--world-size/"
      "--rendezvous, Slurm or Open MPI across nodes), workers.count / P workers each. "
      "TensorBoard: every number of metrics.jsonl (loss, lr, img/s, wire bytes, compute/"
      "compression/communication seconds, test accuracy) also goes to "
      "OUT/events.out.tfevents.* as the scalar <type>/<key>, e.g. train/loss; view with "
      "tensorboard --logdir OUT (set train.tensorboard = false to turn it off).");
  train
      ->add_option("-c,--config", a.config_path,
                   "TOML config file (default: built-in defaults, "
                   "the LeNet/MNIST recipe)")
      ->check(CLI::ExistingFile);
  train->add_option("--set", a.overrides, "Override a config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  train->add_option(
      "-o,--out", a.out_dir,
      "Output directory: metrics.jsonl, checkpoint.tgckpt, summary.json, config.toml, "
      "events.out.tfevents.* (TensorBoard)");
  train->add_flag("--resume", a.resume,
                  "Continue the run in --out from its newest intact checkpoint (none yet: start "
                  "it), as a restart loop under Slurm or Open MPI needs");
  train->add_option("--device", a.device, "Shortcut for --set device=... (cpu, cuda, cuda:N)");
  train->add_flag("--progress", a.progress_on, "Force the live progress line");
  train->add_flag("--no-progress", a.progress_off, "Plain log lines even on a terminal");
  train
      ->add_option("--threads", a.threads,
                   "CPU threads per process (default: OMP_NUM_THREADS if set, else the CPUs this "
                   "process may use divided among the ranks sharing them); results do not "
                   "depend on it")
      ->check(CLI::Range(1, 4096));
  train
      ->add_option("--nproc", a.nproc,
                   "Start P worker processes of this binary on this machine (Gloo over loopback, "
                   "or NCCL with one GPU each); their output is prefixed by rank, stdout is rank "
                   "0's")
      ->check(CLI::Range(1, 1024));
  train
      ->add_option("--max-restarts", a.max_restarts,
                   "With --nproc: when a rank fails (dies, exits non-zero, loses a peer or hangs "
                   "past comm.timeout), restart every rank from the newest intact checkpoint in "
                   "--out, up to N times; shortcut for --set comm.max_restarts=N")
      ->check(CLI::Range(0, 1000));
  train->add_option("--rank", a.rank, "This process's rank, 0 .. world size - 1 (multi-node)")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--world-size", a.world_size, "Number of processes in the run (multi-node)")
      ->check(CLI::PositiveNumber);
  train->add_option("--rendezvous", a.rendezvous,
                    "Where the processes meet: file://DIR (shared by all nodes) or "
                    "redis://HOST:PORT");
  train->add_option("--job-id", a.job_id,
                    "Key prefix of this run in the rendezvous store (default: $TG_JOB_ID, else "
                    "\"run\"); change it to reuse a store");
  return train;
}

int run_train(const TrainArgs& a, const std::vector<std::string>& argv) {
  std::vector<std::string> overrides = a.overrides;
  if (!a.device.empty()) overrides.push_back("device=" + a.device);
  if (a.max_restarts) {
    TG_CHECK(a.nproc >= 1,
             "--max-restarts needs --nproc: only the local launcher restarts ranks "
             "(under Slurm or Open MPI, loop with --resume; see the README)");
    overrides.push_back("comm.max_restarts=" + std::to_string(*a.max_restarts));
  }
  const config::Config cfg = a.config_path.empty()
                                 ? config::default_config(overrides)
                                 : config::load_config_file(a.config_path, overrides);
  if (a.nproc > 1 || (a.nproc == 1 && cfg.comm.max_restarts > 0)) return launch(a, cfg, argv);

  train::TrainOptions opt;
  opt.out_dir = a.out_dir;
  opt.resume = a.resume;
  opt.threads = a.threads;
  ProgressListener progress(cfg.train.iterations, a.progress_on ? 1 : a.progress_off ? 0 : -1);
  opt.listener = &progress;
  opt.rank = comm::discover_rank({a.rank, a.world_size, a.rendezvous});
  const comm::EnvMap env = comm::current_environment();
  opt.restarts = restarts_from(env);
  if (cfg.comm.max_restarts > 0 && !env.count("TG_RESTARTS") && opt.rank.rank == 0)
    progress.message("comm.max_restarts = " + std::to_string(cfg.comm.max_restarts) +
                     " has no effect without --nproc (under Slurm or Open MPI, loop with "
                     "--resume; see the README)");
  if (!a.job_id.empty())
    opt.job_id = a.job_id;
  else if (env.count("TG_JOB_ID") && !env.at("TG_JOB_ID").empty())
    opt.job_id = env.at("TG_JOB_ID");
  const train::TrainSummary summary = train::Trainer(cfg, opt).run();
  if (opt.rank.rank == 0) {
    if (summary.interrupted)
      progress.message("interrupted after iteration " + std::to_string(summary.iterations) +
                       (a.out_dir.empty() ? std::string(" (no --out: nothing saved)")
                                          : "; checkpoint saved, continue with --resume"));
    std::printf("%s\n", to_json(summary).c_str());
    std::fflush(stdout);
    print_result(summary);
  }
  return summary.interrupted ? kExitInterrupted : 0;
}

}  // namespace tg::cli
