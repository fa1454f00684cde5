// The run configuration: TOML file + `--set section.key=value` overrides -> a validated Config.
// Every key, its type, default, allowed range and one-line doc live in ONE table in
// config/config.cpp; `terngrad config --reference` prints it (Markdown) and the README copies it.
// A categorical key's allowed names come from the library that owns the option (its enum's name
// table, e.g. tern::kMethods, or its registry, e.g. net_names()), and library limits such as
// tern::kMaxQsgdLevels bound the ranges; train/options.cpp parses the names into the enums once.
//
// Errors (all tg::Error, message names the file and key): TOML syntax error (with line and
// column), unknown section or key (with the known keys of that section), wrong type
// ("train.lr: expected a float, got string"), out-of-range value ("train.batch_size: must be
// >= 1, got 0"), malformed --set ("expected section.key=value").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg::config {

struct ModelConfig {
  std::string name = "lenet";
  int64_t num_classes = 0;  // 0 = the net's default
  double dropout = -1.0;    // fraction dropped; < 0 = the net's default

  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  std::string name = "mnist";
  std::string path = "";  // "" = the dataset's default location where one exists
  bool augment = true;
  std::string preprocess = "alexnet";
  int64_t image_size = 0;
  int64_t label_offset = 0;
  int64_t synthetic_size = 1024;
  int64_t synthetic_channels = 1;
  int64_t synthetic_classes = 10;
  int64_t eval_batch_size = 500;
  int64_t eval_limit = 0;  // evaluate on the first N test examples only; 0 = all
  int64_t prefetch = 2;    // batches loaded ahead by a background thread; 0 = none

  bool operator==(const DataConfig&) const = default;
};

struct TrainConfig {
  int64_t iterations = 10000;
  int64_t batch_size = 64;             // the total (global) batch over all workers
  std::string optimizer = "momentum";  // sgd | momentum | adam
  double lr = 0.01;
  std::string lr_policy = "polynomial";  // constant | polynomial | exponential | step
  double lr_power = 0.5;                 // polynomial
  double lr_end = 0.0;                   // polynomial
  int64_t lr_decay_steps = 0;            // polynomial T (0 = iterations); exponential D
  double lr_decay_epochs = 0.0;  // exponential: D = int(train_size / batch_size * epochs) if > 0
  double lr_decay_rate = 0.1;    // exponential, step
  bool lr_staircase = true;      // exponential
  std::vector<int64_t> lr_boundaries;  // step
  double momentum = 0.9;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double weight_decay = 5e-4;  // L2 coefficient on the net's decayed weights
  int64_t seed = 123;
  int64_t log_every = 100;          // metrics.jsonl "train" record every N iterations
  int64_t eval_every = 0;           // test-set evaluation every N iterations; 0 = only at the end
  double ema_decay = 0.9999;        // 0 = no EMA; evaluation then uses the raw weights
  int64_t checkpoint_every = 1000;  // 0 = only the final checkpoint
  bool tensorboard = true;          // TensorBoard event files beside metrics.jsonl

  bool operator==(const TrainConfig&) const = default;
};

// [workers]: data-parallel workers. In one process they are emulated: each takes its disjoint
// slice of the global batch (train.batch_size % count == 0) and computes its own gradient and
// message; all replicas apply the same aggregate.
struct WorkersConfig {
  int64_t count = 1;
  bool operator==(const WorkersConfig&) const = default;
};

// [compression]: how each worker's gradient goes on the wire (terngrad/compressor.h).
struct CompressionConfig {
  std::string method = "none";         // none | fp16 | terngrad | qsgd | onebit
  double clip = 2.5;                   // terngrad: scaler c * sigma; 0 = max|g| (no clipping)
  int64_t min_size = 1;                // terngrad: tensors with fewer elements stay fp32
  bool quantize_logits = true;         // terngrad: false keeps the classifier's w, b in fp32
  int64_t floating_grad_epoch = 0;     // terngrad: F > 0 sends epochs e % F == F - 1 in fp32
  std::string scaler_sharing = "max";  // terngrad: max (shared) | none (ablation)
  std::string pack = "two_bit";        // terngrad: two_bit (2 bits/elt) | base3 (1.6 bits/elt)
  bool error_feedback = false;         // terngrad: carry what ternarization dropped to next step
  int64_t levels = 3;                  // terngrad: grid levels, 3 (ternary), 4 or 5
  bool rescale = false;                // terngrad: undo clipping's shortening per tensor
  int64_t qsgd_levels = 4;             // qsgd: s
  int64_t qsgd_bucket = 512;           // qsgd: elements per bucket
  bool operator==(const CompressionConfig&) const = default;
};

// [comm]: how processes talk when the workers are spread over several (`terngrad train --nproc`,
// --rank/--world-size, Slurm, Open MPI; comm/communicator.h). These keys never change the
// numbers a run computes (every algorithm is exact), so they may differ on --resume.
struct CommConfig {
  std::string backend = "auto";    // auto | gloo | nccl
  std::string algorithm = "auto";  // auto | ps | allgather | packed-allreduce | ring
  double bucket_mb = 25.0;         // gradient bucket size (MB of f32), as PyTorch DDP
  bool overlap = true;             // exchange buckets while backward runs
  double timeout = 45.0;           // seconds a collective or the rendezvous waits for a peer
  std::string interface = "";      // gloo: network interface to use ("" = by hostname)
  bool operator==(const CommConfig&) const = default;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  WorkersConfig workers;
  CompressionConfig compression;
  CommConfig comm;
  std::string device = "cpu";  // top-level key: "cpu", "cuda", "cuda:N"

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
// never the numbers it computes: device, data.path, data.prefetch, data.eval_batch_size,
// train.log_every, train.eval_every, train.checkpoint_every, train.tensorboard and every [comm]
// key.
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
