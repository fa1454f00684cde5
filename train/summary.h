// What a training run reports: TrainSummary, written as out_dir/summary.json and printed by
// `terngrad train` (JSON only here, at the edge: the library hands back the struct).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/topology.h"
#include "config/config.h"
#include "nn/core/cpu_env.h"
#include "nn/core/json.h"
#include "train/evaluate.h"

namespace tg::train {

using config::Config;

// Per worker and iteration, averaged over a stretch of steps: what the processes sent and received
// (bytes summed over ranks / (steps * N workers); 0 in one process, whose workers are emulated),
// and where the time went (seconds averaged over ranks): compute (transfer, forward, backward,
// update), compression (the compressor's own work), communication (the collectives, waiting for
// peers included), and comm_exposed: how long the step waited for the gradient reduction after
// backward (what overlapping it with backward did not hide, compression included; 0 in one
// process). Compression and communication may run during backward, so a step's wall time is
// compute + comm_exposed in a group, compute + compression in one process.
struct IterationCost {
  double wire_sent = 0, wire_received = 0;
  bool timed = false;  // the seconds below were measured (not every step is timed on a GPU)
  double compute_s = 0, compression_s = 0, communication_s = 0, comm_exposed_s = 0;
  // With ranks on two or more nodes: of the wire bytes, those to and from other nodes (the
  // slow links; the rest stayed inside a node).
  bool across_nodes = false;
  double inter_sent = 0, inter_received = 0;
};

struct TrainSummary {
  bool interrupted = false;        // stopped by a signal; a checkpoint was saved
  std::optional<EvalResult> test;  // the final evaluation (absent when interrupted)
  std::string eval_weights;        // "ema" or "raw"
  int64_t num_classes = 0;         // top-5 accuracy is reported when > 5
  int64_t iterations = 0, start_iteration = 0;
  int64_t restarts = 0;   // times the run was restarted after a failure (TrainOptions::restarts)
  double train_loss = 0;  // mean over the last logged window (NaN before the first)
  double images_per_sec = 0, train_seconds = 0, wall_seconds = 0;
  int64_t workers = 0, processes = 1, workers_per_process = 0, threads_per_process = 1;
  std::string compression, threads_from;
  int64_t loader_threads = 1;  // the input pipeline's (datasets/pipeline.h)
  std::string loader_threads_from;
  bool distributed = false;  // the fields below are set
  std::string comm_backend, comm_algorithm, rendezvous;
  bool comm_authenticated = false;  // a job secret authenticated the rendezvous and headers
  bool sched_batch = false;         // the rank's threads ran under SCHED_BATCH (comm.sched_batch)
  int64_t buckets = 0;              // the reducer's gradient buckets
  bool overlap = false;             // exchanged while backward runs
  comm::NodeLayout nodes;           // which node each rank ran on, and where that came from
  std::string nodes_from;
  // Per bucket of the last step, how it travelled: its ternary route (the cost model's pick under
  // auto), else the path of its slots ("reduce-scatter", "ring", "message").
  std::vector<std::string> bucket_routes;
  uint64_t payload_bytes_per_worker_per_iter = 0, fp32_bytes_per_worker_per_iter = 0;
  IterationCost per_iter;
  std::string device, device_name, model;
  CpuNumerics cpu;  // what decides a CPU run's bits beyond the config (nn/core/cpu_env.h)
  // On a GPU: each convolution pass's algorithm (pass key, name), in first-use order.
  std::vector<std::pair<std::string, std::string>> conv_algorithms;
  int64_t num_params = 0;
  double peak_rss_mb = 0;
  double planned_peak_mb = 0;  // the memory plan's peak (train/memory_plan.h); 0 on a GPU
  std::string params_sha256, ema_sha256;  // ema_sha256: "" without an EMA
  // data.skip_bad_files: examples served by another image (all ranks), and the unreadable files
  // rank 0 met, with why.
  bool skip_bad_files = false;
  int64_t bad_files_replaced = 0;
  std::vector<std::pair<std::string, std::string>> bad_files;
  Config config;

  double compression_ratio() const {
    return static_cast<double>(fp32_bytes_per_worker_per_iter) /
           static_cast<double>(payload_bytes_per_worker_per_iter);
  }
};

// summary.json: one JSON object.
std::string to_json(const TrainSummary& s);

// The IterationCost keys and values (wire bytes always, seconds when timed), as summary.json and
// each metrics.jsonl train record carry them (and the record's TensorBoard scalars).
std::vector<std::pair<const char*, double>> iteration_cost_fields(const IterationCost& c);
void add_iteration_cost(json::Object& o, const IterationCost& c);

}  // namespace tg::train
