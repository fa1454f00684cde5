// The `terngrad` command line: one subcommand per module of cmd/ (<name>_cmd.h: its arguments,
// add_<name>_command, run_<name>), dispatched by run() as Caffe's tools/caffe.cpp dispatches its
// actions. main() is run(); the test driver of tests/testing/faulty_main.cpp runs it too, after
// injecting faults.
//
// Exit status (also at the end of `terngrad --help`): 0 success; 1 any error: bad input (a
// config, --set value, flag or argument CLI11 refuses, data file, checkpoint, cluster file), out
// of memory, a failed run; 2 convergence-check found a claim that does not hold; 130 interrupted
// by SIGINT/SIGTERM (checkpoint saved); with --nproc, the status of the rank that failed first
// (128 + N when it was killed by signal N). Library errors are tg::Error: one line, and with
// TG_DEBUG=1 the source location that raised it.
#pragma once

namespace tg::cli {

// The status of a run that SIGINT/SIGTERM stopped after saving its checkpoint (above).
inline constexpr int kExitInterrupted = 130;

int run(int argc, char** argv);

}  // namespace tg::cli
