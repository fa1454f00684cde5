// `terngrad perf-model`: the paper's performance model (terngrad/analysis/perf_model.h) on the
// parameter counts of our own nets: Figure 5 of the paper (AlexNet, GoogLeNet, VGG-A; 1-512 GPUs;
// fp32 and TernGrad; Ethernet and InfiniBand clusters) as a table beside the paper's readings, or
// as JSON lines (--json: one object per network, cluster and GPU count). --calibrate measures this
// machine instead: compute and encode time per batch with the real training step
// (train/step.h TrainStep, one worker, TernGrad compressor), and loopback TCP bandwidth (or takes
// a given link), and runs the model on that "cluster" of one process per node.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cmd/perf_sim_cmd.h"
#include "terngrad/analysis/perf_model.h"

namespace tg::cli {

struct PerfModelArgs {
  std::vector<std::string> clusters;      // presets or TOML files; empty: ethernet, infiniband
  std::vector<std::string> networks;      // empty: alexnet, googlenet, vgg_a
  std::vector<int> gpus;                  // empty: 1, 2, 4, ..., 512 (calibrate: 1, 2, 4, 8)
  std::vector<std::string> batch;         // "B" (all networks) or "net=B"
  std::vector<std::string> compute_time;  // seconds: "T" or "net=T"
  std::vector<std::string> encode_time;   // seconds: "T" or "net=T"
  std::string topology = "ps";
  std::string down_bits = "ceil";  // ceil | exact
  bool json = false;
  bool calibrate = false;
  double link_gbit = 0;     // calibrate: the link to model (Gbit/s); 0 = measure loopback TCP
  int calibrate_steps = 2;  // calibrate: timed steps per network (after one warm-up)
  bool simulate = false;    // replay the exchange on SimGrid instead of the model's arithmetic
  PerfSimArgs sim;
};

// Adds the `perf-model` subcommand with its options bound to `args`; returns it.
CLI::App* add_perf_model_command(CLI::App& app, PerfModelArgs& args);

// Runs it: prints the table (or JSON lines) on stdout, progress of --calibrate on stderr.
// Returns the exit code; throws tg::Error on bad input (unknown network or cluster, a cluster
// file error naming the file and the key, a malformed override).
int run_perf_model(const PerfModelArgs& args);

}  // namespace tg::cli
