#include "cmd/cli.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "cmd/config_cmd.h"
#include "cmd/convergence_check_cmd.h"
#include "cmd/data_cmd.h"
#include "cmd/eval_cmd.h"
#include "cmd/help_format.h"
#include "cmd/measure_bounds_cmd.h"
#include "cmd/perf_model_cmd.h"
#include "cmd/train_cmd.h"
#include "nn/core/cpu_env.h"
#include "nn/core/error.h"

namespace tg::cli {

namespace {

constexpr int kExitError = 1;

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

// The arguments of every subcommand, bound to the parser.
struct Args {
  TrainArgs train;
  EvalArgs eval;
  DataArgs data;
  ConfigArgs config;
  PerfModelArgs perf_model;
  ConvergenceCheckArgs convergence_check;
  MeasureBoundsArgs measure_bounds;
};

// A subcommand on the command line, and what runs it.
struct Action {
  CLI::App* command;
  std::function<int()> run;
};

std::vector<Action> add_commands(CLI::App& app, Args& a, const std::vector<std::string>& argv) {
  CLI::App* train = add_train_command(app, a.train);
  CLI::App* eval = add_eval_command(app, a.eval);
  const DataCommands data = add_data_command(app, a.data);
  return {
      {train, [&a, argv] { return run_train(a.train, argv); }},
      {eval, [&a] { return run_eval(a.eval); }},
      {data.fetch, [&a] { return run_data_fetch(a.data); }},
      {data.synth_folder, [&a] { return run_data_synth_folder(a.data); }},
      {add_config_command(app, a.config), [&a] { return run_config(a.config); }},
      {add_perf_model_command(app, a.perf_model), [&a] { return run_perf_model(a.perf_model); }},
      {add_convergence_check_command(app, a.convergence_check),
       [&a] { return run_convergence_check(a.convergence_check); }},
      {add_measure_bounds_command(app, a.measure_bounds),
       [&a] { return run_measure_bounds(a.measure_bounds); }},
  };
}

// "terngrad train", ...: the deepest subcommand given, for a usage hint.
std::string usage_of(const CLI::App& app) {
  std::string cmd = "terngrad";
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands()[0];
    cmd += " " + at->get_name();
  }
  return cmd;
}

// Runs the action; every error becomes one line on stderr and exit status 1.
int run_reporting_errors(const std::function<int()>& action) {
  try {
    return action();
  } catch (const tg::Error& e) {
    // What is wrong and where in the input; the source location of the throw is for developers.
    const char* debug = std::getenv("TG_DEBUG");
    const bool with_location = debug != nullptr && std::string(debug) == "1";
    std::fprintf(stderr, "terngrad: error: %s\n", with_location ? e.describe().c_str() : e.what());
  } catch (const std::bad_alloc&) {
    // Allocations sized by input are checked where they happen (tg::Error naming what was
    // being allocated); this is the fallback for any other.
    std::fprintf(stderr,
                 "terngrad: error: out of memory (an allocation failed; the run needs more "
                 "memory than this machine or its limits give it)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terngrad: error: %s\n", e.what());
  }
  return kExitError;
}

}  // namespace

int run(int argc, char** argv) {
  std::set_terminate(on_terminate);
  apply_cpu_defaults(argv);
  CLI::App app{
      "terngrad: TernGrad (NIPS 2017) ternary-gradient training, a C++20/CUDA research toolkit.\n"
      "Configs are TOML; `terngrad config --reference` lists every key with its default."};
  app.formatter(std::make_shared<WrappingFormatter>());
  app.require_subcommand(1);
  app.set_version_flag("--version", "terngrad 0.1.0");
  app.footer(
      "Exit status: 0 success; 1 error (bad input: config, --set value, flag, data file, "
      "checkpoint, cluster file; out of memory; a failed run); 2 convergence-check: a claim does "
      "not hold; 130 interrupted (SIGINT/SIGTERM; checkpoint saved); --nproc: the status of the "
      "rank that failed first (128 + N if killed by signal N), in the last start when "
      "--max-restarts restarted it.");
  Args args;
  const std::vector<Action> actions =
      add_commands(app, args, std::vector<std::string>(argv, argv + argc));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with status 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // Everything else is a usage error: one line and exit 1 like any bad input, not CLI11's
    // own statuses (105 for a missing --config file, ...).
    std::fprintf(stderr, "terngrad: error: %s (run `%s --help` for usage)\n", e.what(),
                 usage_of(app).c_str());
    return kExitError;
  }
  for (const Action& a : actions)
    if (*a.command) return run_reporting_errors(a.run);
  return 0;
}

}  // namespace tg::cli
