// The run configuration: TOML file + `--set section.key=value` overrides -> a validated Config.
//
// One options schema. A Config is made of the libraries' own option structs (nn's NetOptions,
// OptimizerOptions and LrScheduleOptions, datasets' DataOptions, terngrad's CompressionOptions
// and AggregateOptions, comm's GroupOptions and ReducerOptions) plus, for the Solver above this
// floor, the few options that are the run's own (the Section structs below: the place Caffe's
// caffe.proto gives SolverParameter). So each option's type and default are declared once, in
// its struct. The one table in config/config.cpp binds each key to its field and adds the rest
// once: the rule a value must satisfy (categorical keys take the names of the owning library's
// enum table, e.g. tern::kMethods, or registry, e.g. net_names(); library limits such as
// tern::kMaxQsgdLevels bound the ranges) and a one-line doc. Parsing, --set overrides,
// validation, to_toml, to_json and `terngrad config --reference` (which the README's key table
// copies) all walk that table. Fields of the structs that are not keys (a net's image size, the
// compressor's seed, ...) are set by the run (train/options.h).
//
// Errors (all tg::Error, message names the file and key): TOML syntax error (with line and
// column), unknown section or key (with the known keys of that section), wrong type
// ("train.lr: expected a float, got string"), out-of-range value ("train.batch_size: must be
// >= 1, got 0"), malformed --set ("expected section.key=value").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/reducer.h"
#include "datasets/dataset.h"
#include "nn/nets/net.h"
#include "nn/ops/cuda_options.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::config {

// [model]: the network by registry name, and its options.
struct ModelSection {
  std::string name = "lenet";
  NetOptions net;  // num_classes, dropout_ratio
  bool operator==(const ModelSection&) const = default;
};

// [data]: the dataset's options, and how the run reads it.
struct DataSection {
  data::DataOptions dataset;  // name, path, augment, preprocess, image_size, label_offset, ...
  int64_t eval_batch_size = 500;
  int64_t eval_limit = 0;      // evaluate on the first N test examples only; 0 = all
  int64_t prefetch = 2;        // steps of batches loaded ahead (datasets/pipeline.h); 0 = none
  int64_t loader_threads = 0;  // threads that load them; 0 = the CPUs this rank may use
  bool pin_memory = true;      // CUDA: pinned batches copied on a copy stream a step ahead
  bool operator==(const DataSection&) const = default;
};

// [train]: the optimizer's and the schedule's options, and the Solver's own.
struct TrainSection {
  int64_t iterations = 10000;
  int64_t batch_size = 64;       // the total (global) batch over all workers
  OptimizerOptions optimizer;    // name, momentum, adam beta1, beta2, epsilon
  LrScheduleOptions schedule;    // policy, lr, end_lr, power, decay_steps, decay_rate, ...
  double lr_decay_epochs = 0.0;  // exponential: D = int(train_size / batch_size * epochs) if > 0
  double weight_decay = 5e-4;    // L2 coefficient on the net's decayed weights
  int64_t seed = 123;
  int64_t log_every = 100;          // metrics.jsonl "train" record every N iterations
  int64_t eval_every = 0;           // test-set evaluation every N iterations; 0 = only at the end
  double ema_decay = 0.9999;        // 0 = no EMA; evaluation then uses the raw weights
  int64_t checkpoint_every = 1000;  // 0 = only the final checkpoint
  double checkpoint_minutes = 0.0;  // also when this much time has passed (rank 0's clock); 0 = off
  int64_t keep_checkpoints = 2;     // checkpoint.tgckpt + older ones, checkpoint-<step>.tgckpt
  bool tensorboard = true;          // TensorBoard event files beside metrics.jsonl
  bool operator==(const TrainSection&) const = default;
};

// [workers]: data-parallel workers. In one process they are emulated: each takes its disjoint
// slice of the global batch (train.batch_size % count == 0) and computes its own gradient and
// message; all replicas apply the same aggregate.
struct WorkersSection {
  int64_t count = 1;
  bool operator==(const WorkersSection&) const = default;
};

// [comm]: how processes meet and talk, how gradients are bucketed and how buckets travel
// (`terngrad train --nproc`, --rank/--world-size, Slurm, Open MPI). These keys never change the
// numbers a run computes (every algorithm but ring is exact), so they may differ on --resume.
struct CommSection {
  comm::GroupOptions group;         // backend, timeout, interface
  comm::ReducerOptions reducer;     // bucket_mb, overlap
  tern::AggregateOptions exchange;  // algorithm
  int64_t max_restarts = 0;         // --nproc: restarts of every rank after one fails
  bool operator==(const CommSection&) const = default;
};

struct Config {
  std::string device = "cpu";  // top-level key: "cpu", "cuda", "cuda:N"
  CudaOptions cuda;            // [cuda]: conv_algo, conv_algorithms, tf32
  ModelSection model;
  DataSection data;
  TrainSection train;
  WorkersSection workers;
  tern::CompressionOptions compression;  // [compression]: how each worker's gradient is sent
  CommSection comm;

  bool operator==(const Config&) const = default;
};

// Parses `toml_text` (`source` names it in errors, e.g. the file path), then applies each
// override "section.key=value" (value in TOML syntax; bare words are taken as strings), then
// validates. Throws tg::Error as described above.
Config parse_config(const std::string& toml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {});
// Reads the file (throws naming it if unreadable) and calls parse_config.
Config load_config_file(const std::string& path, const std::vector<std::string>& overrides = {});
// Defaults + overrides only (no file).
Config default_config(const std::vector<std::string>& overrides = {});

// The fully resolved config, every key, as TOML text (parse_config(to_toml(c)) == c) and as a
// JSON object (for summary.json).
std::string to_toml(const Config& c);
std::string to_json(const Config& c);

// `c` with the keys that may differ between a run and the checkpoint it resumes from (and between
// the ranks of one run) taken from `from`: they change where and how a run reports or talks,
// never the numbers it computes: device, every [cuda] key (they change a GPU run's last bits
// as the device does), data.path, data.prefetch, data.loader_threads, data.pin_memory,
// data.skip_bad_files (a run that stopped on a bad file may continue skipping it),
// data.eval_batch_size,
// train.log_every, train.eval_every, train.checkpoint_every, train.checkpoint_minutes,
// train.keep_checkpoints, train.tensorboard and every [comm] key.
Config with_report_keys_of(Config c, const Config& from);

// The lines of TOML text `a` missing from `b` (labelled a_label) and of `b` missing from `a`
// (b_label), each "\n    <label>[section] key = value", for error messages.
std::string config_diff(const std::string& a, const std::string& b, const std::string& a_label,
                        const std::string& b_label);

// The key reference as a Markdown table: key, type, default, meaning.
std::string reference_markdown();

// Every key of the reference, in its order, with values its rule accepts as TOML text: a range's
// ends and a value inside it, every allowed name, both booleans, an empty and a two-element list;
// free-form strings (paths, the network interface) their default only. For the test that checks
// the libraries accept every value the config accepts (tests/train/options_schema_test.cpp).
struct KeySamples {
  std::string key;  // "section.key", or "device"
  std::vector<std::string> accepted;
};
std::vector<KeySamples> key_samples();

}  // namespace tg::config
