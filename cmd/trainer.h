// Single-process training and evaluation driven by a Config: the loop behind `terngrad train`
// and `terngrad eval`.
//
// One iteration (digest §1.10) is cmd/step.h's TrainStep: each of the `workers.count` emulated
// workers computes the gradient of its slice of the global batch (weight decay included), the
// compressor of `[compression]` aggregates them (shared scalers, packed codes, exact sums), and
// one optimizer step and EMA update follow.
// Every random choice (data order, augmentation, dropout) is keyed by (seed, step, ...) and every
// piece of state (optimizer slots, EMA, batch-norm statistics, each worker's compressor state such
// as 1-bit SGD's residual) is checkpointed, so a run resumed from a checkpoint ends bit-identical
// to an uninterrupted one.
//
// Output directory (optional): metrics.jsonl (one JSON object per logged step, per evaluation),
// checkpoint.tgckpt (every train.checkpoint_every iterations and at the end, atomic),
// summary.json (at the end, atomic), config.toml (the resolved config).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "cmd/config.h"
#include "cmd/launch.h"
#include "cmd/step.h"
#include "datasets/dataset.h"
#include "nn/nets/net.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"

namespace tg::cli {

struct TrainOptions {
  std::string out_dir;  // "" = write nothing, print the summary only
  bool resume = false;  // continue from out_dir/checkpoint.tgckpt
  int progress = -1;    // live progress line: 1 on, 0 off, -1 = when stderr is a terminal
  // This process's place in a multi-process run (cmd/launch.h discover_rank); the default is a
  // world of one. In a world of P, this rank hosts workers.count / P of the workers; rank 0 alone
  // writes out_dir and prints; every rank reads out_dir's checkpoint on --resume.
  RankEnv rank;
  std::string job_id = "run";  // the rendezvous store's key prefix (cmd/distributed.h)
  int threads = 0;             // --threads: CPU threads of this process; 0 = the thread policy
  // Sees every local worker's gradient of every step (TrainStep::set_gradient_hook).
  TrainStep::GradientHook gradient_hook;
};

struct EvalResult {
  double accuracy = 0.0;       // fraction in [0, 1]
  double top5_accuracy = 0.0;  // fraction; meaningful when num_classes > 5
  double loss = 0.0;           // mean softmax cross-entropy
  int64_t examples = 0;
  int64_t correct = 0, correct5 = 0;  // the counts behind the fractions
  double loss_sum = 0.0;              // sum of per-example losses
};

// Runs training (one rank of a multi-process run when options.rank says so); returns the summary as a JSON object string (also written to
// out_dir/summary.json). Returns normally after SIGINT/SIGTERM too, having saved a checkpoint;
// then `interrupted` is set and the summary has "interrupted": true.
std::string run_train(const Config& config, const TrainOptions& options, bool* interrupted = nullptr);

// Evaluates `net` (in inference mode) on the first `limit` examples (0 = all) of `dataset`, or on
// shard `shard` of `shards` of them: the evaluation batches b with b % shards == shard (the
// shards' counts add up to the whole evaluation's).
EvalResult evaluate(Net& net, const data::Dataset& dataset, int64_t batch_size, int64_t limit = 0,
                    int shard = 0, int shards = 1);

// `terngrad eval`: loads the checkpoint, rebuilds the net from the checkpoint's config (with
// `overrides` applied, e.g. data.path), evaluates on the test split with the EMA weights when
// the run kept them (raw weights when use_raw), and returns the result as a JSON object string.
std::string run_eval(const std::string& checkpoint_path, const std::string& config_path,
                     const std::vector<std::string>& overrides, bool use_raw);

// Network, dataset and compression options as the config resolves them.
NetOptions net_options(const Config& c);
data::DataOptions data_options(const Config& c);
tern::CompressionOptions compression_options(const Config& c, int64_t train_size);
OptimizerOptions optimizer_options(const Config& c);
// One compressor slot per parameter tensor of the net, in arena order.
std::vector<tern::GradSlot> grad_layout(const Net& net);

}  // namespace tg::cli
