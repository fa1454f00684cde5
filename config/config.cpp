// The run configuration (see config.h). Everything about a key but its type and default lives in
// ONE table, key_specs(): its section, name, the Config field it reads and writes (a chain of
// member pointers into the owning library's option struct, which fixes its type and holds its
// default), the rule its value must satisfy and a one-line doc. Parsing, --set overrides,
// validation, to_toml, to_json and reference_markdown all walk that table, so adding a key means
// adding one row (and the field, with its default, to its library's struct; defaults are read
// from a default-constructed Config).
#include "config/config.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "comm/communicator.h"
#include "config/toml_limits.h"
#include "config/toml_read.h"
#include "datasets/dataset.h"
#include "nn/core/enum_names.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/nets/net.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::config {
namespace {

// A value of one key, as TOML has it; the alternative a field takes is the key's type.
using FieldValue = std::variant<std::string, int64_t, double, bool, std::vector<int64_t>>;
// The alternatives' indices: a key's type.
enum KeyType : size_t { kString = 0, kInteger = 1, kFloat = 2, kBoolean = 3, kIntArray = 4 };
static_assert(
    std::is_same_v<std::variant_alternative_t<kIntArray, FieldValue>, std::vector<int64_t>>);

// What a key's value must satisfy (float keys must also be finite).
struct Rule {
  enum class Kind {
    any,
    non_empty,
    at_least,
    above,
    below,
    between,
    unit,
    one_of,
    device,
    increasing
  };
  Kind kind = Kind::any;
  double bound = 0.0;                // at_least, above, below; between: the lower end
  std::vector<std::string> allowed;  // one_of
  double upper = 0.0;                // between: the upper end (inclusive)
  // between as a sanity limit (more than any run needs; past it sizes overflow or exhaust
  // memory), not a library's range: key_samples keeps to the small end.
  bool limit = false;
};
Rule any() {
  return {};
}
Rule at_least(double b) {
  return {Rule::Kind::at_least, b, {}};
}
Rule above(double b) {
  return {Rule::Kind::above, b, {}};
}
Rule below(double b) {
  return {Rule::Kind::below, b, {}};
}
// [lo, hi], both ends included.
Rule between(double lo, double hi) {
  return {Rule::Kind::between, lo, {}, hi};
}
// [lo, hi] as a sanity limit (see Rule::limit).
Rule limit(double lo, double hi) {
  return {Rule::Kind::between, lo, {}, hi, true};
}
// [0, 1)
Rule unit() {
  return {Rule::Kind::unit, 0.0, {}};
}
Rule one_of(std::vector<std::string> allowed) {
  return {Rule::Kind::one_of, 0.0, std::move(allowed)};
}
// The names of a library's enum table (nn/core/enum_names.h).
Rule one_of_names(const std::vector<std::string_view>& names) {
  return one_of(std::vector<std::string>(names.begin(), names.end()));
}
Rule device_rule() {
  return {Rule::Kind::device, 0.0, {}};
}
// Strictly increasing, each >= 0.
Rule increasing() {
  return {Rule::Kind::increasing, 0.0, {}};
}

// The member at the end of a chain of member pointers: member_at<&Config::comm,
// &CommSection::group, &comm::GroupOptions::timeout>(c) is c.comm.group.timeout.
template <auto M, auto... Ms, class T>
auto& member_at(T& obj) {
  if constexpr (sizeof...(Ms) == 0)
    return obj.*M;
  else
    return member_at<Ms...>(obj.*M);
}

// One key's field of a Config and the rule its values must satisfy. Fields hold the libraries'
// own types: std::string, int64_t or int, double, bool, std::vector<int64_t>, or an enum with a
// name table, read and written by name.
struct Field {
  KeyType type = kString;
  std::function<FieldValue(const Config&)> get;
  // Writes v (of this field's type). False, and nothing written, when the field cannot hold it
  // (an int out of int's range, a name not in an enum's table).
  std::function<bool(Config&, const FieldValue&)> set;
  Rule rule;
};

template <class T>
constexpr KeyType key_type() {
  if constexpr (std::is_same_v<T, std::string>) {
    return kString;
  } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) {
    return kInteger;
  } else if constexpr (std::is_same_v<T, double>) {
    return kFloat;
  } else if constexpr (std::is_same_v<T, bool>) {
    return kBoolean;
  } else {
    static_assert(std::is_same_v<T, std::vector<int64_t>>, "a config field of an unknown type");
    return kIntArray;
  }
}

// The field at Path, whose values must satisfy `rule`.
template <auto... Path>
Field field(Rule rule) {
  using T = std::remove_cvref_t<decltype(member_at<Path...>(std::declval<Config&>()))>;
  Field f;
  f.type = key_type<T>();
  f.rule = std::move(rule);
  f.get = [](const Config& c) -> FieldValue {
    const T& v = member_at<Path...>(c);
    if constexpr (std::is_same_v<T, int>)
      return static_cast<int64_t>(v);
    else
      return v;
  };
  f.set = [](Config& c, const FieldValue& v) {
    T& dst = member_at<Path...>(c);
    if constexpr (std::is_same_v<T, int>) {
      const int64_t x = std::get<int64_t>(v);
      if (!std::in_range<int>(x)) return false;
      dst = static_cast<int>(x);
    } else {
      dst = std::get<T>(v);
    }
    return true;
  };
  return f;
}

// The enum field at Path: a string key whose values are the names of `table`.
template <auto... Path, class E, size_t N>
Field field(const EnumTable<E, N>& table) {
  Field f;
  f.type = kString;
  f.rule = one_of_names(enum_names(table));
  f.get = [&table](const Config& c) -> FieldValue {
    return std::string(enum_name(table, member_at<Path...>(c)));
  };
  f.set = [&table](Config& c, const FieldValue& v) {
    for (const auto& e : table)
      if (e.name == std::get<std::string>(v)) {
        member_at<Path...>(c) = e.value;
        return true;
      }
    return false;
  };
  return f;
}

struct KeySpec {
  std::string_view section;  // "" = top level
  std::string_view key;
  Field field;
  std::string_view doc;
};

// The one table. Order = the order of to_toml, to_json and the reference; top-level keys first
// (TOML needs them before the first [section]).
const std::vector<KeySpec>& key_specs() {
  using C = Config;
  using M = ModelSection;
  using D = DataSection;
  using T = TrainSection;
  using W = WorkersSection;
  using K = CommSection;
  using Z = tern::CompressionOptions;
  using Net = NetOptions;
  using Ds = data::DataOptions;
  using Opt = OptimizerOptions;
  using Lr = LrScheduleOptions;
  using G = comm::GroupOptions;
  using R = comm::ReducerOptions;
  using A = tern::AggregateOptions;
  using Cu = CudaOptions;
  static const std::vector<KeySpec> specs = {
      {"", "device", field<&C::device>(device_rule()), "Compute device of the run"},

      {"cuda", "conv_algo",
       field<&C::cuda, &Cu::conv_algo>(one_of({"im2col", "igemm", "autotune"})),
       "GPU convolutions: im2col (+ cuBLAS), igemm (implicit GEMM, tile by a fixed rule) or "
       "autotune (time each candidate once per shape and pass, keep the fastest); the choices "
       "are logged and in summary.json"},
      {"cuda", "conv_algorithms", field<&C::cuda, &Cu::conv_algorithms>(any()),
       "Pinned GPU convolution algorithms, '<pass key>=<algorithm>; ...' as summary.json's "
       "conv_algorithms_pins gives them: redoes a run's choices bit for bit"},
      {"cuda", "tf32", field<&C::cuda, &Cu::tf32>(any()),
       "TF32 tensor-core math for the GPU's fp32 GEMMs and implicit-GEMM convolutions (faster, "
       "10-bit mantissa inputs); false = strict fp32, as the paper"},

      {"model", "name", field<&C::model, &M::name>(one_of(net_names())),
       "Network to train, by registry name"},
      {"model", "num_classes", field<&C::model, &M::net, &Net::num_classes>(limit(0, 1 << 20)),
       "Output classes; 0 = the net's default"},
      {"model", "dropout", field<&C::model, &M::net, &Net::dropout_ratio>(below(1)),
       "Dropout fraction; < 0 = the net's default"},

      {"data", "name", field<&C::data, &D::dataset, &Ds::name>(one_of(data::dataset_names())),
       "Dataset"},
      {"data", "path", field<&C::data, &D::dataset, &Ds::path>(any()),
       "Directory with the dataset's files; empty = data/<name> (where `terngrad data fetch` "
       "puts it), then an installed package (fashion-mnist: /usr/share/datasets/fashion-mnist)"},
      {"data", "augment", field<&C::data, &D::dataset, &Ds::augment>(any()),
       "Apply the dataset's training augmentation to the train split"},
      {"data", "preprocess", field<&C::data, &D::dataset, &Ds::preprocess>(data::kPreprocesses),
       "image-folder preprocessing recipe"},
      {"data", "image_size", field<&C::data, &D::dataset, &Ds::image_size>(limit(0, 1 << 16)),
       "Output image side H = W; 0 = the dataset's default"},
      {"data", "skip_bad_files", field<&C::data, &D::dataset, &Ds::skip_bad_files>(any()),
       "image-folder: an unreadable image (truncated, corrupt, not a JPEG, empty, gone) is "
       "replaced by the next readable one and counted (summary.json bad_files) instead of "
       "stopping the run"},
      {"data", "fast_decode", field<&C::data, &D::dataset, &Ds::fast_decode>(any()),
       "image-folder: decode each JPEG at the smallest DCT scale (1/8, 1/4, 1/2, 1) that keeps the "
       "crop at or above the output resolution; faster on images much larger than the output, "
       "pixels differ from the full decode (bench/README)"},
      {"data", "label_offset", field<&C::data, &D::dataset, &Ds::label_offset>(limit(0, 1 << 20)),
       "Added to image-folder class indices; 1 for 1001-class ImageNet nets"},
      {"data", "synthetic_size",
       field<&C::data, &D::dataset, &Ds::synthetic_size>(limit(1, 1 << 30)),
       "synthetic: examples per split"},
      {"data", "synthetic_channels",
       field<&C::data, &D::dataset, &Ds::synthetic_channels>(limit(1, 1 << 16)),
       "synthetic: image channels"},
      {"data", "synthetic_classes",
       field<&C::data, &D::dataset, &Ds::synthetic_classes>(limit(1, 1 << 20)),
       "synthetic: number of classes"},
      {"data", "eval_batch_size", field<&C::data, &D::eval_batch_size>(limit(1, 1 << 24)),
       "Batch size of test-set evaluation"},
      {"data", "eval_limit", field<&C::data, &D::eval_limit>(at_least(0)),
       "Evaluate on the first N test examples only; 0 = all"},
      {"data", "prefetch", field<&C::data, &D::prefetch>(limit(0, 1024)),
       "Steps of batches loaded ahead while a step computes (memory: that many batches more); 0 "
       "= each step's when it starts"},
      {"data", "loader_threads", field<&C::data, &D::loader_threads>(limit(0, 1024)),
       "Threads that decode and augment the batches; 0 = the CPUs this process may use, divided "
       "among the ranks sharing them; the batches do not depend on it"},
      {"data", "pin_memory", field<&C::data, &D::pin_memory>(any()),
       "CUDA runs: load batches into page-locked memory and copy each step's to the GPU on a copy "
       "stream while the previous step computes (PyTorch's pin_memory); false = copy each when "
       "its step starts, on the compute stream"},

      {"train", "iterations", field<&C::train, &T::iterations>(at_least(1)),
       "Training iterations, i.e. global steps"},
      {"train", "batch_size", field<&C::train, &T::batch_size>(limit(1, 1 << 24)),
       "Global batch size, summed over all workers"},
      {"train", "optimizer", field<&C::train, &T::optimizer, &Opt::name>(one_of(optimizer_names())),
       "Optimizer, with TensorFlow semantics"},
      {"train", "lr", field<&C::train, &T::schedule, &Lr::lr>(at_least(0)), "Base learning rate"},
      {"train", "lr_policy", field<&C::train, &T::schedule, &Lr::policy>(kLrPolicies),
       "Learning-rate schedule"},
      {"train", "lr_power", field<&C::train, &T::schedule, &Lr::power>(above(0)),
       "polynomial: power"},
      {"train", "lr_end", field<&C::train, &T::schedule, &Lr::end_lr>(at_least(0)),
       "polynomial: final learning rate"},
      {"train", "lr_decay_steps", field<&C::train, &T::schedule, &Lr::decay_steps>(at_least(0)),
       "polynomial: T, 0 = iterations; exponential: decay period D"},
      {"train", "lr_decay_epochs", field<&C::train, &T::lr_decay_epochs>(at_least(0)),
       "exponential: if > 0, D = int(train_size / batch_size * lr_decay_epochs)"},
      {"train", "lr_decay_rate", field<&C::train, &T::schedule, &Lr::decay_rate>(above(0)),
       "exponential, step: decay factor"},
      {"train", "lr_staircase", field<&C::train, &T::schedule, &Lr::staircase>(any()),
       "exponential: decay in whole periods, rate^floor(step / D)"},
      {"train", "lr_boundaries", field<&C::train, &T::schedule, &Lr::boundaries>(increasing()),
       "step: iterations from which lr is multiplied by another lr_decay_rate"},
      {"train", "momentum", field<&C::train, &T::optimizer, &Opt::momentum>(unit()),
       "Momentum coefficient of the momentum optimizer"},
      {"train", "adam_beta1", field<&C::train, &T::optimizer, &Opt::beta1>(unit()), "Adam beta1"},
      {"train", "adam_beta2", field<&C::train, &T::optimizer, &Opt::beta2>(unit()), "Adam beta2"},
      {"train", "adam_epsilon", field<&C::train, &T::optimizer, &Opt::epsilon>(above(0)),
       "Adam epsilon"},
      {"train", "weight_decay", field<&C::train, &T::weight_decay>(at_least(0)),
       "L2 coefficient on the net's decayed weights"},
      {"train", "seed", field<&C::train, &T::seed>(at_least(0)),
       "Seed of initial weights, data order, augmentation, dropout and ternarization"},
      {"train", "log_every", field<&C::train, &T::log_every>(at_least(1)),
       "Write a metrics.jsonl train record every N iterations"},
      {"train", "eval_every", field<&C::train, &T::eval_every>(at_least(0)),
       "Evaluate on the test set every N iterations; 0 = only at the end"},
      {"train", "ema_decay", field<&C::train, &T::ema_decay>(unit()),
       "Decay of the parameters' moving average; 0 = no EMA, evaluate the raw weights"},
      {"train", "checkpoint_every", field<&C::train, &T::checkpoint_every>(at_least(0)),
       "Write a checkpoint every N iterations; 0 = only the final one"},
      {"train", "checkpoint_minutes", field<&C::train, &T::checkpoint_minutes>(at_least(0)),
       "Also write one when this many minutes have passed since the last (rank 0's clock decides "
       "for every rank); 0 = by iterations only"},
      {"train", "keep_checkpoints", field<&C::train, &T::keep_checkpoints>(limit(1, 1000)),
       "Checkpoints kept: the newest as OUT/checkpoint.tgckpt, older ones as "
       "checkpoint-<iteration>.tgckpt; --resume takes the newest intact one"},
      {"train", "tensorboard", field<&C::train, &T::tensorboard>(any()),
       "Also write metrics.jsonl's numbers as TensorBoard scalars to "
       "OUT/events.out.tfevents.* (view: tensorboard --logdir OUT); false = metrics.jsonl only"},

      {"workers", "count", field<&C::workers, &W::count>(limit(1, 1 << 20)),
       "Data-parallel workers N in all, spread evenly over the processes (each hosts N / P, "
       "emulated); train.batch_size must be a multiple of N"},

      {"compression", "method", field<&C::compression, &Z::method>(tern::kMethods),
       "How each worker's gradient goes on the wire; none = fp32"},
      {"compression", "clip", field<&C::compression, &Z::clip>(at_least(0)),
       "terngrad: scaler = clip * the tensor's gradient std (gradient clipping); 0 = no "
       "clipping, scaler = max|g|"},
      {"compression", "min_size", field<&C::compression, &Z::min_size>(at_least(0)),
       "terngrad: tensors with fewer elements are sent in fp32"},
      {"compression", "quantize_logits", field<&C::compression, &Z::quantize_logits>(any()),
       "terngrad: false sends the classifier's weights and bias in fp32"},
      {"compression", "floating_grad_epoch",
       field<&C::compression, &Z::floating_grad_epoch>(at_least(0)),
       "terngrad: F > 0 sends epochs e with e % F == F - 1 in fp32; 0 = never"},
      {"compression", "scaler_sharing",
       field<&C::compression, &Z::scaler_sharing>(tern::kScalerSharings),
       "terngrad: max = all workers share the largest scaler; none = each its own (ablation)"},
      {"compression", "pack", field<&C::compression, &Z::pack>(tern::kPackFormats),
       "terngrad: wire format, two_bit = 2 bits per element, base3 = 5 per byte (1.6 bits)"},
      {"compression", "error_feedback", field<&C::compression, &Z::error_feedback>(any()),
       "terngrad: each worker adds to its gradient what ternarization dropped from its last "
       "one (a per-worker residual, checkpointed); same wire bytes"},
      {"compression", "levels",
       field<&C::compression, &Z::levels>(between(tern::kMinLevels, tern::kMaxLevels)),
       "terngrad: levels of the grid spanning [-s, s]; 3 = TernGrad's {-1, 0, 1}, 4 = {-3, -1, "
       "1, 3}/3 (2 bits, every state used), 5 = {-2..2}/2 (2.67 bits); exact integer sums"},
      {"compression", "rescale", field<&C::compression, &Z::rescale>(any()),
       "terngrad: multiply each tensor's aggregate by 1 / the largest ||clip(g)|| / ||g|| over "
       "the workers (norm-preserving; needs scaler_sharing = max)"},
      {"compression", "qsgd_levels",
       field<&C::compression, &Z::qsgd_levels>(between(1, tern::kMaxQsgdLevels)),
       "qsgd: quantization levels s"},
      {"compression", "qsgd_bucket", field<&C::compression, &Z::qsgd_bucket>(at_least(1)),
       "qsgd: elements per bucket, each with its own norm"},

      {"comm", "backend", field<&C::comm, &K::group, &G::backend>(comm::kBackends),
       "Multi-process runs: auto = nccl for CUDA training with one GPU per rank, else gloo (TCP)"},
      {"comm", "algorithm", field<&C::comm, &K::exchange, &A::algorithm>(tern::kAlgorithms),
       "How ranks sum gradients. terngrad's ternary codes (all exact): auto = per bucket by a "
       "byte-count cost model (fewest bytes between nodes, then on the busiest rank), ps, "
       "allgather, packed-allreduce, sharded (each shard's codes to its owner, sums back), "
       "hierarchical (sharded, summed inside each node first). ring: fp32 gradients by a plain "
       "ring allreduce (faster, not bit-identical to one process; codes as auto)"},
      {"comm", "bucket_mb", field<&C::comm, &K::reducer, &R::bucket_mb>(above(0)),
       "Gradient bucket size in MB (f32 bytes; the first bucket at most 1 MB): each bucket is "
       "exchanged as soon as backward has produced it (PyTorch DDP's bucket_cap_mb)"},
      {"comm", "overlap", field<&C::comm, &K::reducer, &R::overlap>(any()),
       "Exchange buckets while backward runs (gloo: a thread; nccl: a side stream); false = after "
       "it"},
      {"comm", "timeout", field<&C::comm, &K::group, &G::timeout>(above(0)),
       "Seconds a collective or the rendezvous waits for a peer before the run fails"},
      {"comm", "interface", field<&C::comm, &K::group, &G::interface>(any()),
       "gloo: network interface to bind, e.g. eth0; empty = the address of the hostname"},
      {"comm", "ranks_per_node", field<&C::comm, &K::group, &G::ranks_per_node>(limit(0, 1 << 20)),
       "Ranks per node for the hierarchical exchange and the cost model: 0 = from Slurm's node "
       "index, else the host name; G > 0 = rank r on node r / G (tests, labs)"},
      {"comm", "secret_file", field<&C::comm, &K::group, &G::secret_file>(any()),
       "A file of 16+ random bytes only its owner can read (chmod 600), the same on every rank: "
       "rendezvous entries and message headers are authenticated with it, so ranks without it "
       "are refused; empty = TG_SECRET_FILE from the environment, else none"},
      {"comm", "sched_batch", field<&C::comm, &K::group, &G::sched_batch>(any()),
       "gloo: run each rank's threads under Linux's SCHED_BATCH (a woken thread waits for the "
       "next tick instead of preempting): with more threads than cores Gloo's event loop "
       "otherwise spins while a preempted thread holds a connection's lock (8 ranks on 2 cores: "
       "LeNet trains 28-41% faster); false = the default policy"},
      {"comm", "max_restarts", field<&C::comm, &K::max_restarts>(limit(0, 1000)),
       "--nproc: when a rank fails, restart every rank from the newest intact checkpoint, up to "
       "N times (needs --out; torchrun's --max-restarts)"},
  };
  return specs;
}

std::string qualified(const KeySpec& s) {
  return s.section.empty() ? std::string(s.key) : std::string(s.section) + "." + std::string(s.key);
}

// Section names in table order, without the top level.
std::vector<std::string_view> section_names() {
  std::vector<std::string_view> out;
  for (const auto& s : key_specs()) {
    if (s.section.empty()) continue;
    bool seen = false;
    for (auto n : out) seen = seen || n == s.section;
    if (!seen) out.push_back(s.section);
  }
  return out;
}

std::string known_keys(std::string_view section) {
  std::string out;
  for (const auto& s : key_specs()) {
    if (s.section != section) continue;
    if (!out.empty()) out += ", ";
    out += s.key;
  }
  return out;
}

std::string known_sections() {
  std::string out;
  for (auto n : section_names()) {
    if (!out.empty()) out += ", ";
    out += "[" + std::string(n) + "]";
  }
  return out;
}

std::string known_top_level() {
  std::string out = known_keys("");
  return out + (out.empty() ? "" : ", ") + known_sections();
}

const KeySpec* find_spec(std::string_view section, std::string_view key) {
  for (const auto& s : key_specs()) {
    if (s.section == section && s.key == key) return &s;
  }
  return nullptr;
}

bool is_section(std::string_view name) {
  for (auto n : section_names()) {
    if (n == name) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Formatting values as TOML text (also used in error messages and the reference)

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest text that parses back to the same double (round trip of to_toml).
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s = json::trim_exponent(std::string(buf, res.ptr));
  // TOML needs a '.' or an exponent to read a float back as a float.
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string: JSON's escapes are valid TOML; TOML additionally forbids a raw DEL.
std::string toml_quote(std::string_view s) {
  std::string out = json::quote(s);
  for (size_t p = 0; (p = out.find('\x7f', p)) != std::string::npos;) out.replace(p, 1, "\\u007F");
  return out;
}

std::string int_array_text(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

std::string toml_text(const FieldValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) {
          return toml_quote(x);
        } else if constexpr (std::is_same_v<X, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<X, double>) {
          return format_double(x);
        } else if constexpr (std::is_same_v<X, bool>) {
          return x ? "true" : "false";
        } else {
          return int_array_text(x);
        }
      },
      v);
}

std::string json_text(const FieldValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) {
          return json::quote(x);
        } else if constexpr (std::is_same_v<X, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<X, double>) {
          return json::number(x);
        } else if constexpr (std::is_same_v<X, bool>) {
          return x ? "true" : "false";
        } else {
          std::string out = "[";
          for (size_t i = 0; i < x.size(); ++i) {
            if (i) out += ',';
            out += std::to_string(x[i]);
          }
          return out + "]";
        }
      },
      v);
}

const char* type_name(size_t type) {
  switch (type) {
    case kString:
      return "string";
    case kInteger:
      return "integer";
    case kFloat:
      return "float";
    case kBoolean:
      return "boolean";
    default:
      return "integer array";
  }
}

const char* expected_phrase(size_t type) {
  switch (type) {
    case kString:
      return "a string";
    case kInteger:
      return "an integer";
    case kFloat:
      return "a number";  // integers are accepted where floats are expected
    case kBoolean:
      return "a boolean";
    default:
      return "an array of integers";
  }
}

FieldValue get_value(const KeySpec& s, const Config& c) {
  return s.field.get(c);
}

// "string \"abc\"", "float 0.5", "table", ... for error messages.
std::string describe(const toml::node& n) {
  std::string out;
  switch (n.type()) {
    case toml::node_type::string:
      return "string " + toml_quote(n.as_string()->get());
    case toml::node_type::integer:
      return "integer " + std::to_string(n.as_integer()->get());
    case toml::node_type::floating_point:
      return "float " + format_double(n.as_floating_point()->get());
    case toml::node_type::boolean:
      return std::string("boolean ") + (n.as_boolean()->get() ? "true" : "false");
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      out = "array ";
      break;
    case toml::node_type::date:
      out = "date ";
      break;
    case toml::node_type::time:
      out = "time ";
      break;
    case toml::node_type::date_time:
      out = "date-time ";
      break;
    default:
      return "an unknown TOML value";
  }
  std::ostringstream os;
  n.visit([&](const auto& x) { os << x; });
  std::string text = os.str();
  // Keep one-line messages short for long arrays.
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return out + text;
}

std::string where(const std::string& source, const toml::source_region& r) {
  return toml_where(source, r);
}

// The key's type: the alternative of FieldValue its field takes.
size_t type_of(const KeySpec& s) {
  return s.field.type;
}

// Converts a TOML node to the key's type, or throws "<origin>: <key>: expected ..., got ...".
FieldValue convert(const KeySpec& s, const toml::node& n, const std::string& origin) {
  const std::string name = qualified(s);
  switch (type_of(s)) {
    case kString:
      if (auto* v = n.as_string()) return v->get();
      break;
    case kInteger:
      if (auto* v = n.as_integer()) return v->get();
      break;
    case kFloat:
      if (auto* v = n.as_floating_point()) return v->get();
      if (auto* v = n.as_integer()) return static_cast<double>(v->get());
      break;
    case kBoolean:
      if (auto* v = n.as_boolean()) return v->get();
      break;
    default:
      if (const auto* arr = n.as_array()) {
        std::vector<int64_t> out;
        for (size_t i = 0; i < arr->size(); ++i) {
          const auto* v = (*arr)[i].as_integer();
          TG_CHECK(v, origin, ": ", name, "[", i, "]: expected an integer, got ",
                   describe((*arr)[i]));
          out.push_back(v->get());
        }
        return out;
      }
  }
  TG_THROW(origin, ": ", name, ": expected ", expected_phrase(type_of(s)), ", got ", describe(n));
}

// The rule as a phrase completing "must be ...".
std::string rule_text(const Rule& r) {
  // A bound as written in a rule: "1", not "1.0".
  const auto num = [](double x) {
    const std::string s = format_double(x);
    return s.size() > 2 && s.ends_with(".0") ? s.substr(0, s.size() - 2) : s;
  };
  const auto b = [&]() { return num(r.bound); };
  switch (r.kind) {
    case Rule::Kind::any:
      return "";
    case Rule::Kind::non_empty:
      return "non-empty";
    case Rule::Kind::at_least:
      return ">= " + b();
    case Rule::Kind::above:
      return "> " + b();
    case Rule::Kind::below:
      return "< " + b();
    case Rule::Kind::between:
      return "in [" + b() + ", " + num(r.upper) + "]";
    case Rule::Kind::unit:
      return "in [0, 1)";
    case Rule::Kind::one_of: {
      std::string out = "one of ";
      for (size_t i = 0; i < r.allowed.size(); ++i) {
        if (i) out += ", ";
        out += r.allowed[i];
      }
      return out;
    }
    case Rule::Kind::device:
      return "cpu, cuda or cuda:N";
    case Rule::Kind::increasing:
      return "strictly increasing, each >= 0";
  }
  return "";
}

bool valid_device(const std::string& d) {
  if (d == "cpu" || d == "cuda") return true;
  if (!d.starts_with("cuda:") || d.size() == 5 || d.size() > 8) return false;
  for (size_t i = 5; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9') return false;
  }
  return true;
}

bool satisfies(const Rule& r, const FieldValue& v) {
  if (const auto* d = std::get_if<double>(&v); d && !std::isfinite(*d)) return false;
  double x = 0.0;
  if (const auto* i = std::get_if<int64_t>(&v)) x = static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) x = *d;
  const auto* s = std::get_if<std::string>(&v);
  switch (r.kind) {
    case Rule::Kind::any:
      return true;
    case Rule::Kind::non_empty:
      return s && !s->empty();
    case Rule::Kind::at_least:
      return x >= r.bound;
    case Rule::Kind::above:
      return x > r.bound;
    case Rule::Kind::below:
      return x < r.bound;
    case Rule::Kind::between:
      return x >= r.bound && x <= r.upper;
    case Rule::Kind::unit:
      return x >= 0.0 && x < 1.0;
    case Rule::Kind::one_of:
      for (auto a : r.allowed) {
        if (s && *s == a) return true;
      }
      return false;
    case Rule::Kind::device:
      return s && valid_device(*s);
    case Rule::Kind::increasing: {
      const auto& a = std::get<std::vector<int64_t>>(v);
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] < 0 || (i > 0 && a[i] <= a[i - 1])) return false;
      }
      return true;
    }
  }
  return false;
}

// Where each key's current value came from, for error messages: the file position, the --set
// override, or "<source> (default)". `order` says which of two keys was set last.
struct Origin {
  std::string text;
  int order = 0;
};

class Builder {
 public:
  explicit Builder(const std::string& source) : source_(source) {
    origins_.assign(key_specs().size(), Origin{source + " (default)", 0});
  }

  void apply_file(const std::string& text) {
    const toml::table root = parse_toml(text, source_);
    for (auto&& [k, node] : root) {
      const std::string_view name = k.str();
      if (const KeySpec* s = find_spec("", name)) {
        set(*s, convert(*s, node, where(source_, node.source())), where(source_, node.source()));
        continue;
      }
      if (!is_section(name)) {
        if (node.is_table()) {
          TG_THROW(where(source_, k.source()), ": unknown section [", name,
                   "]; known: ", known_top_level());
        }
        TG_THROW(where(source_, k.source()), ": unknown top-level key '", name,
                 "'; known: ", known_top_level());
      }
      const auto* section = node.as_table();
      TG_CHECK(section, where(source_, node.source()), ": ", name, ": expected a table [", name,
               "], got ", describe(node));
      for (auto&& [sk, snode] : *section) {
        const KeySpec* s = find_spec(name, sk.str());
        TG_CHECK(s, where(source_, sk.source()), ": unknown key '", sk.str(), "' in [", name,
                 "]; known keys: ", known_keys(name));
        const std::string at = where(source_, snode.source());
        set(*s, convert(*s, snode, at), at);
      }
    }
  }

  void apply_override(const std::string& o) {
    const std::string origin = "--set '" + o + "'";
    const size_t eq = o.find('=');
    TG_CHECK(eq != std::string::npos, origin, ": expected section.key=value (e.g. train.lr=0.1)");
    const std::string lhs = trim(o.substr(0, eq));
    const std::string raw = trim(o.substr(eq + 1));
    const size_t dot = lhs.find('.');
    const std::string section = dot == std::string::npos ? "" : lhs.substr(0, dot);
    const std::string key = dot == std::string::npos ? lhs : lhs.substr(dot + 1);
    TG_CHECK(!lhs.empty(), origin, ": expected section.key=value (e.g. train.lr=0.1)");
    TG_CHECK(section.empty() || is_section(section), origin, ": unknown section [", section,
             "]; known: ", known_sections());
    const KeySpec* s = find_spec(section, key);
    if (!s) {
      if (section.empty()) {
        TG_THROW(origin, ": unknown top-level key '", key, "'; known: ", known_top_level());
      }
      TG_THROW(origin, ": unknown key '", key, "' in [", section,
               "]; known keys: ", known_keys(section));
    }
    // The value is TOML (0.1, 100, true, "x", [1, 2]); text that is not a TOML value is taken
    // as a bare string (momentum, cpu, cuda:1, /data/mnist).
    toml::table parsed;
    bool is_toml = false;
    check_toml_limits(raw, origin);
    try {
      parsed = toml::parse("v = " + raw + "\n");
      is_toml = parsed.size() == 1 && parsed.get("v") != nullptr;
    } catch (const toml::parse_error&) {
      is_toml = false;
    }
    const bool wants_string = type_of(*s) == kString;
    if (!is_toml || (wants_string && !parsed.get("v")->is_string())) {
      toml::value<std::string> bare(raw);
      set(*s, convert(*s, bare, origin), origin);
    } else {
      set(*s, convert(*s, *parsed.get("v"), origin), origin);
    }
  }

  Config finish() {
    const auto& specs = key_specs();
    for (size_t i = 0; i < specs.size(); ++i) {
      const FieldValue v = get_value(specs[i], config_);
      TG_CHECK(satisfies(specs[i].field.rule, v), origins_[i].text, ": ", qualified(specs[i]),
               ": must be ", rule_text(specs[i].field.rule),
               std::holds_alternative<double>(v) ? " and finite" : "", ", got ", toml_text(v));
    }
    const TrainSection& t = config_.train;
    const LrScheduleOptions& lr = t.schedule;
    const int64_t workers = config_.workers.count;
    TG_CHECK(t.batch_size % workers == 0, latest("train.batch_size", "workers.count"),
             ": train.batch_size: must be a multiple of workers.count (", workers, "), got ",
             t.batch_size);
    TG_CHECK(lr.policy != LrPolicy::exponential || lr.decay_steps > 0 || t.lr_decay_epochs > 0,
             latest("train.lr_policy", "train.lr_decay_steps"),
             ": train.lr_policy = \"exponential\" needs train.lr_decay_steps > 0 or "
             "train.lr_decay_epochs > 0 (the decay period)");
    TG_CHECK(lr.policy != LrPolicy::step || !lr.boundaries.empty(),
             latest("train.lr_policy", "train.lr_boundaries"),
             ": train.lr_policy = \"step\" needs train.lr_boundaries (the iterations where the "
             "rate drops)");
    try {
      parse_conv2d_pins(config_.cuda.conv_algorithms);
    } catch (const Error& e) {
      TG_THROW(latest("cuda.conv_algorithms", "cuda.conv_algorithms"), ": ", e.what());
    }
    try {
      check_cuda_options(config_.cuda);  // the pins parse; a TF32 pin needs cuda.tf32
    } catch (const Error& e) {
      TG_THROW(latest("cuda.conv_algorithms", "cuda.tf32"), ": ", e.what());
    }
    return config_;
  }

 private:
  static std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
  }

  size_t index_of(const KeySpec& s) const { return static_cast<size_t>(&s - key_specs().data()); }

  // A value its field cannot hold (a name not in an enum's table, an int out of range) is
  // refused here, with the message finish() gives any value outside the key's rule.
  void set(const KeySpec& s, const FieldValue& v, const std::string& origin) {
    TG_CHECK(s.field.set(config_, v), origin, ": ", qualified(s), ": must be ",
             rule_text(s.field.rule), ", got ", toml_text(v));
    origins_[index_of(s)] = Origin{origin, ++counter_};
  }

  // The origin of whichever of the two keys ("section.key") was set last (the one that broke
  // the pair).
  const std::string& latest(std::string_view a, std::string_view b) {
    const Origin& oa = origins_[index_of(spec_named(a))];
    const Origin& ob = origins_[index_of(spec_named(b))];
    return ob.order > oa.order ? ob.text : oa.text;
  }

  static const KeySpec& spec_named(std::string_view qualified_name) {
    const size_t dot = qualified_name.find('.');
    const KeySpec* s = dot == std::string_view::npos ? find_spec("", qualified_name)
                                                     : find_spec(qualified_name.substr(0, dot),
                                                                 qualified_name.substr(dot + 1));
    TG_CHECK(s, "config: no key named '", qualified_name, "' in the key table");
    return *s;
  }

  std::string source_;
  Config config_;
  std::vector<Origin> origins_;
  int counter_ = 0;
};

std::string markdown_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Config parse_config(const std::string& toml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  Builder b(source);
  b.apply_file(toml_text);
  for (const auto& o : overrides) b.apply_override(o);
  return b.finish();
}

Config load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  TG_CHECK(!std::filesystem::is_directory(path, ec), "config file '", path,
           "' is a directory, expected a TOML file");
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in, "cannot open config file '", path, "': ", std::strerror(errno));
  // Refuse a huge file before reading it (check_toml_limits refuses the text again).
  const auto size = std::filesystem::file_size(path, ec);
  TG_CHECK(ec || size <= kMaxTomlBytes, path, ": ", size, " bytes of TOML (at most ", kMaxTomlBytes,
           " are read; a config is a few KiB)");
  std::ostringstream ss;
  ss << in.rdbuf();
  TG_CHECK(!in.bad(), "cannot read config file '", path, "'");
  return parse_config(ss.str(), path, overrides);
}

Config default_config(const std::vector<std::string>& overrides) {
  Builder b("defaults");
  for (const auto& o : overrides) b.apply_override(o);
  return b.finish();
}

std::string to_toml(const Config& c) {
  std::string out = "# terngrad run configuration: every key, fully resolved.\n";
  std::string_view section = "";
  for (const auto& s : key_specs()) {
    if (s.section != section) {
      section = s.section;
      out += "\n[" + std::string(section) + "]\n";
    }
    const std::string rule = rule_text(s.field.rule);
    out += "# " + std::string(s.doc) + (rule.empty() ? "" : " (" + rule + ")") + "\n";
    out += std::string(s.key) + " = " + toml_text(get_value(s, c)) + "\n";
  }
  return out;
}

std::string to_json(const Config& c) {
  json::Object root;
  for (const auto& s : key_specs()) {
    if (s.section.empty()) root.add_raw(s.key, json_text(get_value(s, c)));
  }
  for (auto name : section_names()) {
    json::Object sec;
    for (const auto& s : key_specs()) {
      if (s.section == name) sec.add_raw(s.key, json_text(get_value(s, c)));
    }
    root.add_raw(name, sec.str());
  }
  return root.str();
}

std::string reference_markdown() {
  const Config defaults;
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& s : key_specs()) {
    const std::string rule = rule_text(s.field.rule);
    out += "| `" + qualified(s) + "` | " + type_name(type_of(s)) + " | `" +
           markdown_cell(toml_text(get_value(s, defaults))) + "` | " +
           markdown_cell(std::string(s.doc) + (rule.empty() ? "" : " (" + rule + ")")) + " |\n";
  }
  return out;
}

std::vector<KeySamples> key_samples() {
  const Config defaults;
  std::vector<KeySamples> out;
  for (const auto& s : key_specs()) {
    KeySamples k;
    k.key = qualified(s);
    const auto type = static_cast<KeyType>(type_of(s));
    const Rule& r = s.field.rule;
    // A number as TOML text of the key's type (integers rounded up into the range).
    const auto number = [&](double x) {
      if (type == kInteger) return std::to_string(static_cast<int64_t>(std::ceil(x)));
      std::ostringstream o;
      o.precision(17);
      o << x;
      std::string t = o.str();
      if (t.find_first_of(".e") == std::string::npos) t += ".0";
      return t;
    };
    switch (type) {
      case kBoolean:
        k.accepted = {"true", "false"};
        break;
      case kIntArray:
        k.accepted = {"[]", "[1, 5]"};
        break;
      case kString:
        if (r.kind == Rule::Kind::one_of) {
          for (const auto& a : r.allowed) k.accepted.push_back(toml_text(FieldValue(a)));
        } else if (r.kind == Rule::Kind::device) {
          k.accepted = {"\"cpu\""};  // cuda needs a GPU: its own tests
        } else {
          k.accepted = {toml_text(get_value(s, defaults))};  // free-form: the default
        }
        break;
      case kInteger:
      case kFloat:
        switch (r.kind) {
          case Rule::Kind::at_least:
            k.accepted = {number(r.bound), number(r.bound + 1), number(r.bound + 1000)};
            break;
          case Rule::Kind::above:
            k.accepted = {number(r.bound + (type == kInteger ? 1 : 1e-3)), number(r.bound + 1000)};
            break;
          case Rule::Kind::below:
            k.accepted = {number(r.bound - 2), number(r.bound - 1), number(r.bound - 1e-3)};
            break;
          case Rule::Kind::between:
            k.accepted =
                r.limit ? std::vector<std::string>{number(r.bound), number(r.bound + 1),
                                                   number(r.bound + 1000)}
                        : std::vector<std::string>{number(r.bound), number((r.bound + r.upper) / 2),
                                                   number(r.upper)};
            break;
          case Rule::Kind::unit:
            k.accepted = {number(0), number(0.5), number(0.999)};
            break;
          default:
            k.accepted = {toml_text(get_value(s, defaults))};
            break;
        }
        break;
    }
    out.push_back(std::move(k));
  }
  return out;
}

Config with_report_keys_of(Config c, const Config& from) {
  c.device = from.device;
  c.cuda = from.cuda;
  c.data.dataset.path = from.data.dataset.path;
  c.data.prefetch = from.data.prefetch;
  c.data.loader_threads = from.data.loader_threads;
  c.data.pin_memory = from.data.pin_memory;
  c.data.dataset.skip_bad_files = from.data.dataset.skip_bad_files;
  c.data.eval_batch_size = from.data.eval_batch_size;
  c.train.log_every = from.train.log_every;
  c.train.eval_every = from.train.eval_every;
  c.train.checkpoint_every = from.train.checkpoint_every;
  c.train.checkpoint_minutes = from.train.checkpoint_minutes;
  c.train.keep_checkpoints = from.train.keep_checkpoints;
  c.train.tensorboard = from.train.tensorboard;
  c.comm = from.comm;
  return c;
}

std::string config_diff(const std::string& a, const std::string& b, const std::string& a_label,
                        const std::string& b_label) {
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    std::istringstream in(s);
    std::string section, l;
    while (std::getline(in, l)) {
      if (!l.empty() && l[0] == '[')
        section = l;
      else if (!l.empty())
        v.push_back(section + " " + l);
    }
    return v;
  };
  auto la = lines(a), lb = lines(b);
  // Sets, not a scan per line: `b` may be a peer's text (the rendezvous record), so its length
  // must not cost quadratic time.
  const std::set<std::string> sa(la.begin(), la.end()), sb(lb.begin(), lb.end());
  std::string out;
  for (const auto& l : la)
    if (!sb.count(l)) out += "\n    " + a_label + l;
  for (const auto& l : lb)
    if (!sa.count(l)) out += "\n    " + b_label + l;
  return out;
}

}  // namespace tg::config
