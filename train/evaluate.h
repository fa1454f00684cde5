// Evaluation: a net's accuracy and loss on a dataset's test split, sharded over the ranks of a
// group, and `terngrad eval`'s evaluation of a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "nn/nets/net.h"

namespace tg::train {

struct EvalResult {
  double accuracy = 0.0;       // fraction in [0, 1]
  double top5_accuracy = 0.0;  // fraction; meaningful when num_classes > 5
  double loss = 0.0;           // mean softmax cross-entropy
  int64_t examples = 0;
  int64_t correct = 0, correct5 = 0;  // the counts behind the fractions
  double loss_sum = 0.0;              // sum of per-example losses

  // Recomputes the fractions from the counts (after the counts were summed over ranks).
  void finish();
};

// Evaluates `net` (in inference mode) on the first `limit` examples (0 = all) of `dataset`, or on
// shard `shard` of `shards` of them: the evaluation batches b with b % shards == shard (the
// shards' counts add up to the whole evaluation's).
EvalResult evaluate(Net& net, const data::Dataset& dataset, int64_t batch_size, int64_t limit = 0,
                    int shard = 0, int shards = 1);

// A checkpoint's evaluation (`terngrad eval`).
struct CheckpointEval {
  std::string checkpoint;
  int64_t step = 0;
  std::string model, device, weights;  // weights: "ema" or "raw"
  int64_t num_classes = 0;
  EvalResult result;
  double seconds = 0.0;
};

// Loads the checkpoint, rebuilds the net from the checkpoint's config (or `config_path`'s, with
// `overrides` applied, e.g. data.path), and evaluates it on the test split with the EMA weights
// when the run kept them (raw weights when use_raw).
CheckpointEval evaluate_checkpoint(const std::string& checkpoint_path,
                                   const std::string& config_path,
                                   const std::vector<std::string>& overrides, bool use_raw);

// `terngrad eval`'s output: one JSON object.
std::string to_json(const CheckpointEval& e);

}  // namespace tg::train
