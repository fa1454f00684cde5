#include "train/options.h"

#include <algorithm>

namespace tg::train {

NetOptions net_options(const Config& c) {
  NetOptions o;
  o.num_classes = c.model.num_classes;
  o.dropout_ratio = static_cast<float>(c.model.dropout);
  o.seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

data::DataOptions data_options(const Config& c) {
  data::DataOptions o;
  o.name = c.data.name;
  o.path = c.data.path;
  o.augment = c.data.augment;
  o.preprocess = parse_enum(data::kPreprocesses, c.data.preprocess, "data.preprocess");
  o.image_size = c.data.image_size;
  o.label_offset = c.data.label_offset;
  o.synthetic_size = c.data.synthetic_size;
  o.synthetic_channels = c.data.synthetic_channels;
  o.synthetic_classes = c.data.synthetic_classes;
  o.synthetic_seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

tern::CompressionOptions compression_options(const Config& c, int64_t train_size) {
  const auto& k = c.compression;
  tern::CompressionOptions o;
  // Categorical keys are parsed here, once; the config accepted only these tables' names.
  o.method = parse_enum(tern::kMethods, k.method, "compression.method");
  o.clip = k.clip;
  o.min_size = k.min_size;
  o.quantize_logits = k.quantize_logits;
  o.floating_grad_epoch = k.floating_grad_epoch;
  o.steps_per_epoch = static_cast<double>(train_size) / static_cast<double>(c.train.batch_size);
  o.scaler_sharing =
      parse_enum(tern::kScalerSharings, k.scaler_sharing, "compression.scaler_sharing");
  o.pack = parse_enum(tern::kPackFormats, k.pack, "compression.pack");
  o.error_feedback = k.error_feedback;
  o.levels = static_cast<int>(k.levels);
  o.rescale = k.rescale;
  o.qsgd_levels = static_cast<int>(k.qsgd_levels);
  o.qsgd_bucket = k.qsgd_bucket;
  o.seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

OptimizerOptions optimizer_options(const Config& c) {
  OptimizerOptions o;
  o.name = c.train.optimizer;
  o.momentum = c.train.momentum;
  o.beta1 = c.train.adam_beta1;
  o.beta2 = c.train.adam_beta2;
  o.epsilon = c.train.adam_epsilon;
  return o;
}

LrScheduleOptions lr_schedule_options(const Config& c, int64_t train_size) {
  const auto& tc = c.train;
  LrScheduleOptions lo;
  // The reference code ignores the decay policy for Adam (constant LR); we follow the config
  // literally and let the paper configs say "constant".
  lo.policy = parse_enum(kLrPolicies, tc.lr_policy, "train.lr_policy");
  lo.lr = tc.lr;
  lo.end_lr = tc.lr_end;
  lo.power = tc.lr_power;
  lo.decay_steps = tc.lr_decay_steps > 0 ? tc.lr_decay_steps : tc.iterations;
  if (lo.policy == LrPolicy::exponential && tc.lr_decay_epochs > 0)
    lo.decay_steps = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(train_size) /
                                                               tc.batch_size * tc.lr_decay_epochs));
  lo.decay_rate = tc.lr_decay_rate;
  lo.staircase = tc.lr_staircase;
  lo.boundaries = tc.lr_boundaries;
  return lo;
}

comm::GroupOptions group_options(const Config& c) {
  comm::GroupOptions o;
  o.backend = parse_enum(comm::kBackends, c.comm.backend, "comm.backend");
  o.timeout = c.comm.timeout;
  o.interface = c.comm.interface;
  return o;
}

comm::ReducerOptions reducer_options(const Config& c) {
  comm::ReducerOptions o;
  o.bucket_mb = c.comm.bucket_mb;
  o.overlap = c.comm.overlap;
  return o;
}

tern::AggregateOptions exchange_options(const Config& c) {
  tern::AggregateOptions o;
  o.algorithm = parse_enum(tern::kAlgorithms, c.comm.algorithm, "comm.algorithm");
  return o;
}

std::string config_fingerprint(const Config& c) {
  Config n = c;
  const Config defaults;
  n.data.path = defaults.data.path;
  n.data.prefetch = defaults.data.prefetch;
  n.comm.timeout = defaults.comm.timeout;
  n.comm.interface = defaults.comm.interface;
  n.device = parse_device(c.device).is_cuda() ? "cuda" : "cpu";
  return config::to_toml(n);
}

std::vector<tern::GradSlot> grad_layout(const Net& net) {
  std::vector<tern::GradSlot> slots;
  for (const auto& e : net.arena().entries()) slots.push_back({e.name, e.offset, e.numel});
  return slots;
}

void check_compatible(const Net& net, const data::Dataset& ds) {
  const auto& n = net.info();
  const auto& d = ds.info();
  TG_CHECK(d.channels == n.in_channels && d.height == n.image_size && d.width == n.image_size,
           "dataset '", d.name, "' produces ", d.channels, "x", d.height, "x", d.width,
           " images but model '", n.name, "' expects ", n.in_channels, "x", n.image_size, "x",
           n.image_size, " (set data.image_size or choose a matching model)");
  TG_CHECK(d.num_classes <= n.num_classes, "dataset '", d.name, "' has labels up to ",
           d.num_classes - 1, " but model '", n.name, "' has only ", n.num_classes,
           " classes (set model.num_classes)");
}

}  // namespace tg::train
