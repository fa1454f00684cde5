// `terngrad perf-model --simulate` (see perf_model_cmd.h): the exchange of one iteration replayed
// on SimGrid (terngrad/analysis/sim/simulate.h) for each network, cluster, GPU count and method.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "terngrad/analysis/perf_model.h"

namespace tg::cli {

struct PerfSimArgs {
  std::vector<std::string> methods;       // empty: fp32, terngrad (auto)
  double oversubscription = 1;            // the core of a two-level tree; 1 = non-blocking
  std::string platform;                   // a SimGrid platform file (hosts rank-0 ..) instead
  double per_message_us = 0;              // sender CPU per message
  double per_phase_us = 0;                // a wait per phase (round trips, scheduling)
  double encode_ns = -1, decode_ns = -1;  // per element; < 0: half of the workload's T_enc each
  std::string timeline;                   // CSV per-rank timeline (one simulation only)
  double bucket_mb = 25, first_bucket_mb = 1;  // the Reducer's caps; 0: one bucket (bench_comm)
  double chunk_mb = 2;                         // TernGrad: AggregateOptions::chunk_bytes
  int shared_cores = 0;        // > 0: all ranks share this many cores (the validation lab)
  std::string model = "auto";  // flow | phase | auto (terngrad/analysis/sim/simulate.h)
  int parallel = 0;            // simulations at once; 0: one per core
};

// Adds --simulate and its options to the perf-model subcommand.
void add_simulate_options(CLI::App* cmd, bool& simulate, PerfSimArgs& args);

// Prints one line per (GPU count, method): a table, or JSON objects with `json`. Throws
// tg::Error on bad input or when SimGrid is not built in (the line says how to get it).
void print_simulation(const perf::Cluster& cluster, const perf::Workload& workload,
                      const std::vector<int>& gpus, const PerfSimArgs& args, bool json);

}  // namespace tg::cli
