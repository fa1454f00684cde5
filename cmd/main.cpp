// terngrad: the command-line entry point. Subcommands:
//   train    train a network from a TOML config (+ --set overrides), optionally into --out DIR
//   eval     evaluate a checkpoint on the test split
//   data     data fetch: download a dataset's official archives (with checksum verification)
//   config   print the config key reference or a resolved config
//   perf-model  the paper's performance model (Figure 5), cmd/perf_model_cmd.h
//   convergence-check  the paper's convergence claims, checked, cmd/convergence_check_cmd.h
//   measure-bounds  TernGrad's bound quantities while training, cmd/measure_bounds_cmd.h
// Library errors are tg::Error; main prints one line plus a hint and exits non-zero.
//
// Exit status (also in `terngrad --help`): 0 success; 1 any error: bad input (a config, --set
// value, flag or argument CLI11 refuses, data file, checkpoint, cluster file), out of memory, a
// failed run; 2 convergence-check found a claim that does not hold; 130 interrupted by
// SIGINT/SIGTERM (checkpoint saved); with --nproc, the status of the rank that failed first
// (128 + N when it was killed by signal N).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "cmd/convergence_check_cmd.h"
#include "cmd/measure_bounds_cmd.h"
#include "cmd/perf_model_cmd.h"
#include "cmd/progress.h"
#include "comm/launch.h"
#include "comm/process_group.h"
#include "config/config.h"
#include "datasets/fetch.h"
#include "nn/core/cpu_env.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "train/evaluate.h"
#include "train/options.h"
#include "train/trainer.h"

namespace {

using namespace tg;
using namespace tg::cli;
using namespace tg::train;
using namespace tg::config;
using namespace tg::comm;

constexpr int kExitError = 1;
constexpr int kExitInterrupted = 130;

void print_train_result(const train::TrainSummary& s) {
  if (!s.test) return;
  std::fprintf(
      stderr,
      "%s on %s: test accuracy %s (%s weights), loss %.4f; %lld iterations, %.0f img/s, %s\n",
      s.model.c_str(), s.device.c_str(), format_percent(s.test->accuracy).c_str(),
      s.eval_weights.c_str(), s.test->loss, static_cast<long long>(s.iterations), s.images_per_sec,
      format_duration(s.wall_seconds).c_str());
}

// An exception nobody catches ends the process through std::terminate. The one place that
// happens by design of a library is Gloo's transport thread, which throws on bytes it cannot
// parse: a misbehaving peer, or a stranger connected to a rank's listening port (RELIABILITY.md).
// Say that in one line and exit 1 instead of aborting with a core dump; the other ranks then see
// this rank as lost.
[[noreturn]] void on_terminate() {
  std::string what = "unknown exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  }
  for (char& c : what)
    if (c == '\n') c = ' ';
  std::fprintf(stderr,
               "terngrad: error: a background thread failed: %s (in the Gloo transport this means "
               "a peer or a stranger sent bytes it cannot parse: the transport is for trusted "
               "networks only)\n",
               what.c_str());
  std::fflush(stderr);
  ::_exit(kExitError);
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  tg::apply_cpu_defaults(argv);
  CLI::App app{
      "terngrad: TernGrad (NIPS 2017) ternary-gradient training, a C++20/CUDA research toolkit.\n"
      "Configs are TOML; `terngrad config --reference` lists every key with its default."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "terngrad 0.1.0");
  app.footer(
      "Exit status: 0 success; 1 error (bad input: config, --set value, flag, data file, "
      "checkpoint, cluster file; out of memory; a failed run); 2 convergence-check: a claim does "
      "not hold; 130 interrupted (SIGINT/SIGTERM; checkpoint saved); --nproc: the status of the "
      "rank that failed first (128 + N if killed by signal N).");

  // ---- train ---------------------------------------------------------------------------------
  auto* train = app.add_subcommand("train", "Train a network, in one process or several");
  train->footer(
      "In this process, or as P processes (--nproc P on this machine; --rank/--world-size/"
      "--rendezvous, Slurm or Open MPI across nodes), workers.count / P workers each. "
      "TensorBoard: every number of metrics.jsonl (loss, lr, img/s, wire bytes, compute/"
      "compression/communication seconds, test accuracy) also goes to "
      "OUT/events.out.tfevents.* as the scalar <type>/<key>, e.g. train/loss; view with "
      "tensorboard --logdir OUT (set train.tensorboard = false to turn it off).");
  std::string config_path, out_dir, device_flag;
  std::vector<std::string> overrides;
  bool resume = false, progress_on = false, progress_off = false;
  train
      ->add_option("-c,--config", config_path,
                   "TOML config file (default: built-in defaults, "
                   "the LeNet/MNIST recipe)")
      ->check(CLI::ExistingFile);
  train->add_option("--set", overrides, "Override a config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  train->add_option(
      "-o,--out", out_dir,
      "Output directory: metrics.jsonl, checkpoint.tgckpt, summary.json, config.toml, "
      "events.out.tfevents.* (TensorBoard)");
  train->add_flag("--resume", resume, "Continue the run in --out from its last checkpoint");
  train->add_option("--device", device_flag, "Shortcut for --set device=... (cpu, cuda, cuda:N)");
  train->add_flag("--progress", progress_on, "Force the live progress line");
  train->add_flag("--no-progress", progress_off, "Plain log lines even on a terminal");
  int threads_flag = 0;
  train
      ->add_option("--threads", threads_flag,
                   "CPU threads per process (default: OMP_NUM_THREADS if set, else the CPUs this "
                   "process may use divided among the ranks sharing them); results do not "
                   "depend on it")
      ->check(CLI::Range(1, 4096));
  int nproc = 0;
  std::optional<int> rank_flag, world_flag;
  std::optional<std::string> rendezvous_flag;
  std::string job_id;
  train
      ->add_option("--nproc", nproc,
                   "Start P worker processes of this binary on this machine (Gloo over loopback, "
                   "or NCCL with one GPU each); their output is prefixed by rank, stdout is rank "
                   "0's")
      ->check(CLI::Range(1, 1024));
  train->add_option("--rank", rank_flag, "This process's rank, 0 .. world size - 1 (multi-node)")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--world-size", world_flag, "Number of processes in the run (multi-node)")
      ->check(CLI::PositiveNumber);
  train->add_option("--rendezvous", rendezvous_flag,
                    "Where the processes meet: file://DIR (shared by all nodes) or "
                    "redis://HOST:PORT");
  train->add_option("--job-id", job_id,
                    "Key prefix of this run in the rendezvous store (default: $TG_JOB_ID, else "
                    "\"run\"); change it to reuse a store");

  // ---- eval ----------------------------------------------------------------------------------
  auto* eval = app.add_subcommand("eval", "Evaluate a checkpoint on the test split (prints JSON)");
  std::string ckpt_path, eval_config;
  std::vector<std::string> eval_overrides;
  bool eval_raw = false;
  eval->add_option("--checkpoint", ckpt_path, "Checkpoint file (checkpoint.tgckpt of a run)")
      ->required()
      ->check(CLI::ExistingFile);
  eval->add_option("-c,--config", eval_config,
                   "Config (default: the one embedded in the checkpoint)")
      ->check(CLI::ExistingFile);
  eval->add_option("--set", eval_overrides,
                   "Override a config key, e.g. data.path=DIR (repeatable)")
      ->allow_extra_args(false);
  eval->add_flag("--raw", eval_raw, "Use the raw weights even when the run kept an EMA");

  // ---- data fetch ----------------------------------------------------------------------------
  auto* data_cmd = app.add_subcommand("data", "Dataset utilities");
  data_cmd->require_subcommand(1);
  auto* fetch = data_cmd->add_subcommand(
      "fetch", "Download a dataset's official files and verify their checksums");
  std::string fetch_name, fetch_dir, fetch_mirror;
  bool fetch_force = false;
  fetch->add_option("dataset", fetch_name, "mnist | fashion-mnist | cifar10")->required();
  fetch->add_option("--dir", fetch_dir, "Destination directory (default: data/<dataset>)");
  fetch->add_option("--mirror", fetch_mirror,
                    "Base URL to fetch the same files from instead of the official site");
  fetch->add_flag("--force", fetch_force, "Download again even if verified files are present");

  // ---- config --------------------------------------------------------------------------------
  auto* config_cmd =
      app.add_subcommand("config", "Print the config reference or a resolved config");
  bool reference = false;
  std::string show_path;
  std::vector<std::string> show_overrides;
  config_cmd->add_flag("--reference", reference,
                       "Every key with its type, default and meaning (Markdown)");
  config_cmd->add_option("-c,--config", show_path, "Print this config fully resolved (TOML)")
      ->check(CLI::ExistingFile);
  config_cmd->add_option("--set", show_overrides, "Override a key before printing")
      ->allow_extra_args(false);

  // ---- perf-model ----------------------------------------------------------------------------
  PerfModelArgs perf_args;
  auto* perf_cmd = add_perf_model_command(app, perf_args);
  ConvergenceCheckArgs conv_args;
  auto* conv_cmd = add_convergence_check_command(app, conv_args);
  MeasureBoundsArgs bounds_args;
  auto* bounds_cmd = add_measure_bounds_command(app, bounds_args);

  // The subcommand a usage hint names: the deepest one given on the command line.
  const auto usage_of = [&app]() {
    std::string cmd = "terngrad";
    const CLI::App* at = &app;
    while (!at->get_subcommands().empty()) {
      at = at->get_subcommands()[0];
      cmd += " " + at->get_name();
    }
    return cmd;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with status 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // Everything else is a usage error: one line and exit 1 like any bad input, not CLI11's
    // own statuses (105 for a missing --config file, ...).
    std::fprintf(stderr, "terngrad: error: %s (run `%s --help` for usage)\n", e.what(),
                 usage_of().c_str());
    return kExitError;
  }

  try {
    if (*train) {
      if (!device_flag.empty()) overrides.push_back("device=" + device_flag);
      const Config cfg = config_path.empty() ? default_config(overrides)
                                             : load_config_file(config_path, overrides);
      if (nproc > 1) {
        TG_CHECK(!rank_flag && !world_flag && !rendezvous_flag,
                 "--nproc starts the ranks itself; it cannot be combined with --rank, "
                 "--world-size or --rendezvous");
        TG_CHECK(cfg.workers.count % nproc == 0, "--nproc ", nproc,
                 ": workers.count = ", cfg.workers.count,
                 " cannot be spread over the processes (each hosts workers.count / P workers; "
                 "set --set workers.count=",
                 nproc, " or a multiple)");
        resolve_backend(cfg.comm.group.backend, parse_device(cfg.device));
        LaunchOptions lo;
        lo.plain_stdout_rank = 0;
        return launch_local(nproc, worker_argv(std::vector<std::string>(argv, argv + argc)), lo);
      }
      TrainOptions opt;
      opt.out_dir = out_dir;
      opt.resume = resume;
      opt.threads = threads_flag;
      ProgressListener progress(cfg.train.iterations, progress_on ? 1 : progress_off ? 0 : -1);
      opt.listener = &progress;
      RankFlags rf;
      rf.rank = rank_flag;
      rf.world_size = world_flag;
      rf.rendezvous = rendezvous_flag;
      opt.rank = discover_rank(rf);
      const EnvMap env = current_environment();
      if (!job_id.empty())
        opt.job_id = job_id;
      else if (env.count("TG_JOB_ID") && !env.at("TG_JOB_ID").empty())
        opt.job_id = env.at("TG_JOB_ID");
      const TrainSummary summary = Trainer(cfg, opt).run();
      if (opt.rank.rank == 0) {
        if (summary.interrupted)
          progress.message("interrupted after iteration " + std::to_string(summary.iterations) +
                           (out_dir.empty() ? std::string(" (no --out: nothing saved)")
                                            : "; checkpoint saved, continue with --resume"));
        std::printf("%s\n", to_json(summary).c_str());
        std::fflush(stdout);
        print_train_result(summary);
      }
      return summary.interrupted ? kExitInterrupted : 0;
    }
    if (*eval) {
      std::printf(
          "%s\n",
          to_json(evaluate_checkpoint(ckpt_path, eval_config, eval_overrides, eval_raw)).c_str());
      return 0;
    }
    if (*fetch) {
      data::FetchOptions fo;
      fo.dataset = fetch_name;
      fo.dir = fetch_dir.empty() ? data::default_fetch_dir(fetch_name) : fetch_dir;
      fo.mirror = fetch_mirror;
      fo.force = fetch_force;
      fo.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
      const std::string where = data::fetch_dataset(fo);
      if (fetch_dir.empty())  // data/<name>: found there without data.path
        std::fprintf(stderr,
                     "%s is ready in %s: runs started from this directory find it without "
                     "data.path\n",
                     fetch_name.c_str(), where.c_str());
      else
        std::fprintf(stderr, "%s is ready: pass --set data.path=%s\n", fetch_name.c_str(),
                     where.c_str());
      std::printf("%s\n",
                  json::Object().add("dataset", fetch_name).add("path", where).str().c_str());
      return 0;
    }
    if (*perf_cmd) return run_perf_model(perf_args);
    if (*conv_cmd) return run_convergence_check(conv_args);
    if (*bounds_cmd) return run_measure_bounds(bounds_args);
    if (*config_cmd) {
      if (reference) {
        std::printf("%s", reference_markdown().c_str());
      } else {
        const Config cfg = show_path.empty() ? default_config(show_overrides)
                                             : load_config_file(show_path, show_overrides);
        std::printf("%s", to_toml(cfg).c_str());
      }
      return 0;
    }
  } catch (const tg::Error& e) {
    // One line, what is wrong and where in the input; the source location of the throw is for
    // developers (TG_DEBUG=1 adds it).
    const char* debug = std::getenv("TG_DEBUG");
    const bool with_location = debug != nullptr && std::string(debug) == "1";
    std::fprintf(stderr, "terngrad: error: %s\n", with_location ? e.describe().c_str() : e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    // Allocations sized by input are checked where they happen (tg::Error naming what was
    // being allocated); this is the fallback for any other.
    std::fprintf(stderr,
                 "terngrad: error: out of memory (an allocation failed; the run needs more "
                 "memory than this machine or its limits give it)\n");
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terngrad: error: %s\n", e.what());
    return kExitError;
  }
  return 0;
}
