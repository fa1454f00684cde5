#include "train/options.h"

#include <algorithm>

namespace tg::train {

NetOptions net_options(const Config& c) {
  NetOptions o = c.model.net;
  o.seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

data::DataOptions data_options(const Config& c) {
  data::DataOptions o = c.data.dataset;
  o.synthetic_seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

tern::CompressionOptions compression_options(const Config& c, int64_t train_size) {
  tern::CompressionOptions o = c.compression;
  o.steps_per_epoch = static_cast<double>(train_size) / static_cast<double>(c.train.batch_size);
  o.seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

LrScheduleOptions lr_schedule_options(const Config& c, int64_t train_size) {
  const config::TrainSection& tc = c.train;
  // The reference code ignores the decay policy for Adam (constant LR); we follow the config
  // literally and let the paper configs say "constant".
  LrScheduleOptions lo = tc.schedule;
  if (lo.decay_steps == 0) lo.decay_steps = tc.iterations;
  if (lo.policy == LrPolicy::exponential && tc.lr_decay_epochs > 0)
    lo.decay_steps = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(train_size) /
                                                               tc.batch_size * tc.lr_decay_epochs));
  return lo;
}

std::string config_fingerprint(const Config& c) {
  Config n = c;
  const Config defaults;
  n.data.dataset.path = defaults.data.dataset.path;
  n.data.prefetch = defaults.data.prefetch;
  n.data.loader_threads = defaults.data.loader_threads;
  n.comm.group.timeout = defaults.comm.group.timeout;
  n.comm.group.interface = defaults.comm.group.interface;
  n.comm.group.secret_file = defaults.comm.group.secret_file;  // a path; its bytes are checked
  n.comm.group.sched_batch = defaults.comm.group.sched_batch;  // speed only, never the bits
  // Rank 0 alone decides these (time-based checkpoints through the per-step collective) or acts
  // on them (which checkpoints stay), and the launcher alone restarts.
  n.train.checkpoint_minutes = defaults.train.checkpoint_minutes;
  n.train.keep_checkpoints = defaults.train.keep_checkpoints;
  n.comm.max_restarts = defaults.comm.max_restarts;
  n.device = parse_device(c.device).is_cuda() ? "cuda" : "cpu";
  return config::to_toml(n);
}

std::vector<tern::GradSlot> grad_layout(const Net& net) {
  std::vector<tern::GradSlot> slots;
  for (const auto& e : net.arena().entries()) slots.push_back({e.name, e.offset, e.numel});
  return slots;
}

RunParts build_run(const Config& c, const Device& device, int64_t train_size, bool initialize) {
  RunParts r;
  NetOptions no = net_options(c);
  no.initialize = initialize;
  r.net = make_net(c.model.name, no, device);
  r.optimizer = make_optimizer(c.train.optimizer);
  const tern::CompressionOptions copts = compression_options(c, train_size);
  if (c.workers.count > 1 || !tern::identity_for_one_worker(copts))
    r.compressor = tern::make_compressor(copts, grad_layout(*r.net));
  if (c.train.ema_decay > 0) r.ema.emplace(r.net->arena().params(), c.train.ema_decay);
  return r;
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
