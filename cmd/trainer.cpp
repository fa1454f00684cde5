#include "cmd/trainer.h"

#include <omp.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <sstream>

#include "cmd/checkpoint.h"
#include "cmd/distributed.h"
#include "cmd/json.h"
#include "cmd/progress.h"
#include "cmd/step.h"
#include "datasets/sampler.h"
#include "nn/autograd/tape.h"
#include "nn/core/checksum.h"
#include "nn/core/cpu_env.h"
#include "nn/core/cuda_runtime.h"
#include "nn/ops/reduce.h"
#include "nn/ops/softmax_xent.h"
#include "nn/optim/ema.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/optimizer.h"

namespace tg::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kCheckpointName = "checkpoint.tgckpt";
constexpr const char* kMetricsName = "metrics.jsonl";
constexpr const char* kSummaryName = "summary.json";
constexpr const char* kConfigName = "config.toml";

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) {
  g_stop.store(true);
}

// Installs SIGINT/SIGTERM handlers for the scope of a run, restoring the old ones after.
class StopSignals {
 public:
  StopSignals() {
    g_stop.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

HostBatch load_batch(const data::Dataset& ds, const data::BatchSampler& sampler, int64_t step,
                     int worker, int workers, bool augment, uint64_t seed) {
  const auto idx = sampler.indices(step, worker, workers);
  const auto& in = ds.info();
  HostBatch b;
  const int64_t n = static_cast<int64_t>(idx.size());
  b.x = Tensor::empty({n, in.channels, in.height, in.width});
  b.y = Tensor::empty({n}, DType::i32);
  ds.load(idx, augment, seed, sampler.first_position(step, worker, workers), b.x.data<float>(),
          b.y.data<int32_t>());
  return b;
}

// Loads the next step's batches on a background thread while the current step computes.
class Prefetcher {
 public:
  // Loads the batches of workers first .. first + count - 1 of `workers` in all.
  Prefetcher(const data::Dataset& ds, const data::BatchSampler& sampler, int first, int count,
             int workers, bool augment, uint64_t seed, bool enabled)
      : ds_(ds),
        sampler_(sampler),
        first_(first),
        count_(count),
        workers_(workers),
        augment_(augment),
        seed_(seed),
        enabled_(enabled) {}
  ~Prefetcher() {
    if (pending_.valid()) pending_.wait();
  }

  std::vector<HostBatch> get(int64_t step, int64_t last_step) {
    std::vector<HostBatch> out;
    if (pending_.valid() && pending_step_ == step)
      out = pending_.get();
    else
      out = load(step);
    if (enabled_ && step + 1 < last_step) {
      pending_step_ = step + 1;
      pending_ = std::async(std::launch::async, [this, s = step + 1] { return load(s); });
    }
    return out;
  }

 private:
  std::vector<HostBatch> load(int64_t step) const {
    std::vector<HostBatch> v;
    for (int w = first_; w < first_ + count_; ++w)
      v.push_back(load_batch(ds_, sampler_, step, w, workers_, augment_, seed_));
    return v;
  }
  const data::Dataset& ds_;
  const data::BatchSampler& sampler_;
  int first_, count_, workers_;
  bool augment_;
  uint64_t seed_;
  bool enabled_;
  int64_t pending_step_ = -1;
  std::future<std::vector<HostBatch>> pending_;
};

std::string params_sha256(const Tensor& params) {
  Tensor h = params.to(Device::cpu()).contiguous();
  return sha256_hex(h.raw_data(), h.nbytes());
}

// Sum over the decayed tensors of wd * ||w||^2 / 2 (the regularization term of the loss).
double regularization_loss(const Net& net, double wd) {
  if (wd == 0.0) return 0.0;
  NoGradGuard ng;
  double s = 0.0;
  const auto& entries = net.arena().entries();
  for (size_t i = 0; i < entries.size(); ++i)
    if (net.decayed()[i]) s += sum_squares(entries[i].param).item<float>();
  return wd * s / 2.0;
}

// Rewrites metrics.jsonl keeping only records of steps <= `step` (records of a run that died
// after its last checkpoint, and a torn last line, are dropped: the resumed run redoes them).
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    try {
      json::Value v = json::parse(line);
      if (v.has("step") && v["step"].as_number() > static_cast<double>(step)) continue;
      kept += line + "\n";
    } catch (const Error&) {
      // torn write from a killed process
    }
  }
  write_file_atomic(path, kept);
}

class MetricsLog {
 public:
  void open(const std::string& path) {
    out_.open(path, std::ios::app);
    TG_CHECK(out_.good(), "cannot open ", path, " for writing: ", std::strerror(errno));
    path_ = path;
  }
  void write(const std::string& json_line) {
    if (!out_.is_open()) return;
    out_ << json_line << '\n';
    out_.flush();
    TG_CHECK(out_.good(), "cannot write ", path_, ": ", std::strerror(errno));
  }

 private:
  std::ofstream out_;
  std::string path_;
};

}  // namespace

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
  o.preprocess = c.data.preprocess;
  o.image_size = c.data.image_size;
  o.label_offset = c.data.label_offset;
  o.synthetic_size = c.data.synthetic_size;
  o.synthetic_channels = c.data.synthetic_channels;
  o.synthetic_classes = c.data.synthetic_classes;
  o.synthetic_seed = static_cast<uint64_t>(c.train.seed);
  return o;
}

namespace {

// Throws unless the dataset's images and labels fit the net.
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

}  // namespace

EvalResult evaluate(Net& net, const data::Dataset& ds, int64_t batch_size, int64_t limit,
                    int shard, int shards) {
  TG_CHECK(batch_size >= 1, "evaluate: batch size must be >= 1, got ", batch_size);
  TG_CHECK(shards >= 1 && shard >= 0 && shard < shards, "evaluate: shard ", shard, " of ", shards,
           " is out of range");
  NoGradGuard ng;
  const auto& in = ds.info();
  const int64_t n = limit > 0 ? std::min(limit, in.size) : in.size;
  const int64_t k = net.info().num_classes;
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0, correct5 = 0, examples = 0;
  std::vector<int64_t> idx;
  for (int64_t start = shard * batch_size; start < n; start += shards * batch_size) {
    const int64_t b = std::min(batch_size, n - start);
    idx.resize(b);
    for (int64_t i = 0; i < b; ++i) idx[i] = start + i;
    Tensor x = Tensor::empty({b, in.channels, in.height, in.width});
    Tensor y = Tensor::empty({b}, DType::i32);
    ds.load(idx, false, 0, 0, x.data<float>(), y.data<int32_t>());
    ForwardContext ctx;
    ctx.training = false;
    Tensor logits = net.forward(x.to(net.device()), ctx);
    loss_sum +=
        static_cast<double>(softmax_cross_entropy(logits, y.to(net.device())).item<float>()) * b;
    const std::vector<float> l = logits.to_vector<float>();
    const int32_t* lab = y.data<int32_t>();
    for (int64_t i = 0; i < b; ++i) {
      const float* row = l.data() + i * k;
      const float target = row[lab[i]];
      // Rank of the true class: how many logits beat it (ties go against the prediction, so a
      // constant net never scores).
      int64_t better = 0;
      for (int64_t j = 0; j < k; ++j)
        if (j != lab[i] && row[j] >= target) ++better;
      correct += better == 0;
      correct5 += better < 5;
    }
    examples += b;
  }
  r.examples = examples;
  r.correct = correct;
  r.correct5 = correct5;
  r.loss_sum = loss_sum;
  r.accuracy = examples ? static_cast<double>(correct) / examples : 0.0;
  r.top5_accuracy = examples ? static_cast<double>(correct5) / examples : 0.0;
  r.loss = examples ? loss_sum / examples : 0.0;
  return r;
}

namespace {

// Copies the EMA shadow into the net's parameters for the scope, restoring them after.
class EmaWeights {
 public:
  EmaWeights(Net& net, const Ema* ema) : net_(net) {
    if (!ema) return;
    backup_ = net.arena().params().clone();
    Tensor p = net.arena().params();
    p.copy_from(ema->shadow());
  }
  ~EmaWeights() {
    if (!backup_.defined()) return;
    Tensor p = net_.arena().params();
    p.copy_from(backup_);
  }

 private:
  Net& net_;
  Tensor backup_;
};

std::string eval_json(const EvalResult& r, int64_t step, int64_t k, const char* weights) {
  json::Object o;
  o.add("type", "eval").add("step", step).add("test_accuracy", r.accuracy);
  if (k > 5) o.add("test_top5_accuracy", r.top5_accuracy);
  o.add("test_loss", r.loss).add("examples", r.examples).add("weights", weights);
  return o.str();
}

}  // namespace

tern::CompressionOptions compression_options(const Config& c, int64_t train_size) {
  const CompressionConfig& k = c.compression;
  tern::CompressionOptions o;
  o.method = k.method;
  o.clip = k.clip;
  o.min_size = k.min_size;
  o.quantize_logits = k.quantize_logits;
  o.floating_grad_epoch = k.floating_grad_epoch;
  o.steps_per_epoch = static_cast<double>(train_size) / static_cast<double>(c.train.batch_size);
  o.scaler_sharing = k.scaler_sharing;
  o.pack = k.pack == "base3" ? tern::PackFormat::base3 : tern::PackFormat::two_bit;
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

std::vector<tern::GradSlot> grad_layout(const Net& net) {
  std::vector<tern::GradSlot> slots;
  for (const auto& e : net.arena().entries()) slots.push_back({e.name, e.offset, e.numel});
  return slots;
}

namespace {

// Every worker's compressor state, for a checkpoint. In one process: workers 0..N-1 of `c`. In a
// group: each rank holds its own workers' state (first .. first + local - 1), so rank 0 gathers
// the others' (collective: every rank calls it; only rank 0's checkpoint gets the entries). The
// state of every worker has the same names, dtypes and shapes (one method, one layout).
void add_all_compressor_state(Checkpoint& c, const tern::Compressor& comp, int total,
                              ProcessGroup* group, int first, int local) {
  if (!group) {
    add_compressor_state(c, comp, total);
    return;
  }
  const tern::NamedTensors like = comp.state(first);
  if (like.empty()) return;  // stateless: the same on every rank
  std::vector<char> mine;
  for (int w = 0; w < local; ++w) {
    for (const auto& [name, t] : comp.state(first + w)) {
      Tensor h = t.to(Device::cpu()).contiguous();
      const char* p = static_cast<const char*>(h.raw_data());
      mine.insert(mine.end(), p, p + h.nbytes());
    }
  }
  const std::vector<char> all = group->gather_bytes(mine, 0);
  if (group->rank() != 0) return;
  size_t at = 0;
  for (int g = 0; g < total; ++g) {
    for (const auto& [name, t] : like) {
      Tensor h = Tensor::empty(t.shape(), t.dtype(), Device::cpu());
      std::memcpy(h.raw_data(), all.data() + at, h.nbytes());
      at += h.nbytes();
      c.tensors.emplace_back(compressor_state_key(g, name), std::move(h));
    }
  }
}

// Per-iteration figures of a stretch of steps: what this rank sent and received, and where its
// time went (compute: transfer, forward, backward, update; compression: the compressor's work;
// communication: the collectives, waiting for peers included).
struct StepTotals {
  double sent = 0, received = 0;                  // bytes, this rank
  double compute_s = 0, compress_s = 0, comm_s = 0;
  int64_t steps = 0, timed_steps = 0;
  void add_step(uint64_t s, uint64_t r) {
    sent += static_cast<double>(s);
    received += static_cast<double>(r);
    ++steps;
  }
  void add_times(const StepTimes& t) {
    compute_s += t.transfer_s + t.forward_s + t.backward_s + t.update_s;
    compress_s += t.compress_s;
    comm_s += t.comm_s;
    ++timed_steps;
  }
  // The figures per worker and iteration, averaged over the ranks (sums over ranks of bytes,
  // divided by all N workers; times averaged over ranks): collective in a group.
  std::vector<double> per_iter(ProcessGroup* group, int total_workers) const {
    std::vector<double> v = {sent, received, compute_s / std::max<int64_t>(timed_steps, 1),
                             compress_s / std::max<int64_t>(timed_steps, 1),
                             comm_s / std::max<int64_t>(timed_steps, 1)};
    const int p = group ? group->size() : 1;
    if (group) v = group->sum(v);
    const double steps_d = static_cast<double>(std::max<int64_t>(steps, 1));
    v[0] /= steps_d * total_workers;
    v[1] /= steps_d * total_workers;
    for (int i = 2; i < 5; ++i) v[i] /= p;
    return v;
  }
};

void add_per_iter(json::Object& o, const std::vector<double>& v, bool timed) {
  o.add("wire_bytes_sent_per_worker_per_iter", v[0]);
  o.add("wire_bytes_received_per_worker_per_iter", v[1]);
  if (!timed) return;
  o.add("compute_seconds_per_iter", v[2]);
  o.add("compression_seconds_per_iter", v[3]);
  o.add("communication_seconds_per_iter", v[4]);
}

// The CPU threads of this process: --threads, else what the user set in the environment, else
// the CPUs this process may use divided among the ranks of the run that share them (an Open MPI
// rank bound to one core gets 1; --nproc 2 on 2 cores gets 1 each; one process gets all).
struct ThreadChoice {
  int count = 1;
  std::string why;
};
ThreadChoice choose_threads(int flag, int sharing) {
  if (flag > 0) return {flag, "--threads " + std::to_string(flag)};
  const EnvThreads env = env_threads();
  if (env.count > 0) return {env.count, env.source};
  const int cpus = affinity_cpus();
  const int n = std::max(1, cpus / std::max(sharing, 1));
  return {n, std::to_string(cpus) + " CPU" + (cpus > 1 ? "s" : "") +
                 (sharing > 1 ? " shared by " + std::to_string(sharing) + " processes" : "") +
                 "; --threads N or OMP_NUM_THREADS to change"};
}

}  // namespace

std::string run_train(const Config& cfg_in, const TrainOptions& opt, bool* interrupted) {
  const auto t_start = Clock::now();
  Config cfg = cfg_in;
  const int world = opt.rank.world_size;
  const int my_rank = opt.rank.rank;
  const bool lead = my_rank == 0;
  TG_CHECK(world >= 1 && my_rank >= 0 && my_rank < world, "train: rank ", my_rank, " of ", world,
           " is out of range");
  const Device device = rank_device(cfg.device, my_rank, world);
  check_device_usable(device);
  const auto& tc = cfg.train;
  const int workers = static_cast<int>(cfg.workers.count);  // N, over all processes
  TG_CHECK(workers % world == 0, "workers.count = ", workers, " cannot be spread over ", world,
           " processes: each process hosts workers.count / P workers, so workers.count must be a "
           "multiple of the number of processes");
  const int local_workers = workers / world;
  const int first_worker = my_rank * local_workers;
  const uint64_t seed = static_cast<uint64_t>(tc.seed);
  // A process group for P > 1, and for P = 1 when a rendezvous is named (--rank 0 --world-size 1
  // --rendezvous URL): the one-rank run then goes through the real communicator (NCCL on a
  // one-GPU machine), which one process otherwise never touches.
  const bool distributed = world > 1 || !opt.rank.rendezvous.empty();
  if (distributed) resolve_backend(cfg.comm.backend, device);  // a clear error before any work

  // ---- output directory, resume (rank 0 writes; every rank reads the checkpoint) -------------
  std::optional<Checkpoint> ckpt;
  std::string ckpt_path, metrics_path;
  if (!opt.out_dir.empty()) {
    ckpt_path = (fs::path(opt.out_dir) / kCheckpointName).string();
    metrics_path = (fs::path(opt.out_dir) / kMetricsName).string();
    if (lead) {
      std::error_code ec;
      fs::create_directories(opt.out_dir, ec);
      TG_CHECK(!ec && fs::is_directory(opt.out_dir), "cannot create output directory ",
               opt.out_dir, ": ", ec.message());
    }
    if (opt.resume) {
      TG_CHECK(fs::exists(ckpt_path), "--resume: no checkpoint to resume from in ", opt.out_dir,
               " (expected ", ckpt_path, ")",
               world > 1 ? "; with several nodes, --out must be on storage every rank can read"
                         : "");
      ckpt = load_checkpoint(ckpt_path);
      Config saved = parse_config(ckpt->config_toml, ckpt_path + " (embedded config)");
      const std::string want = to_toml(with_report_keys_of(saved, cfg));
      const std::string have = to_toml(cfg);
      TG_CHECK(want == have, "--resume: the config differs from the one ", ckpt_path,
               " was written with; resuming would not reproduce the run. Differences:",
               config_diff(have, want, "now:        ", "checkpoint: "));
    } else if (lead) {
      TG_CHECK(!fs::exists(ckpt_path) && !fs::exists(metrics_path), "output directory ",
               opt.out_dir, " already holds a run (",
               fs::exists(ckpt_path) ? ckpt_path : metrics_path,
               "); pass --resume to continue it, or choose another --out");
    }
    if (!lead) ckpt_path.clear(), metrics_path.clear();  // only rank 0 writes
  } else {
    TG_CHECK(!opt.resume, "--resume needs --out DIR (the directory of the run to continue)");
  }

  // ---- model, data, optimizer ----------------------------------------------------------------
  std::unique_ptr<Net> net = make_net(cfg.model.name, net_options(cfg), device);
  auto train_ds = data::open_dataset(data_options(cfg), data::Split::train);
  auto test_ds = data::open_dataset(data_options(cfg), data::Split::test);
  check_compatible(*net, *train_ds);
  check_compatible(*net, *test_ds);
  data::BatchSampler sampler(train_ds->info().size, tc.batch_size, seed, /*shuffle=*/true);

  auto optimizer = make_optimizer(optimizer_options(cfg));

  LrScheduleOptions lo;
  // The reference code ignores the decay policy for Adam (constant LR, digest §3.1); we follow
  // the config literally and let the paper configs say "constant".
  lo.policy = tc.lr_policy;
  lo.lr = tc.lr;
  lo.end_lr = tc.lr_end;
  lo.power = tc.lr_power;
  lo.decay_steps = tc.lr_decay_steps > 0 ? tc.lr_decay_steps : tc.iterations;
  if (tc.lr_policy == "exponential" && tc.lr_decay_epochs > 0)
    lo.decay_steps =
        std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(train_ds->info().size) /
                                                  tc.batch_size * tc.lr_decay_epochs));
  lo.decay_rate = tc.lr_decay_rate;
  lo.staircase = tc.lr_staircase;
  lo.boundaries = tc.lr_boundaries;
  const LrSchedule schedule(lo);

  Tensor params = net->arena().params();
  Tensor grads = net->arena().grads();

  // Several workers, or any compression, go through the compressor's rounds (one worker
  // without compression is the same math without them).
  std::unique_ptr<tern::Compressor> compressor;
  const tern::CompressionOptions copts = compression_options(cfg, train_ds->info().size);
  if (workers > 1 || cfg.compression.method != "none")
    compressor = tern::make_compressor(copts, grad_layout(*net));
  std::optional<Ema> ema;
  if (tc.ema_decay > 0) ema.emplace(params, tc.ema_decay);
  // Sum over this rank's workers of loss / N over the current log window (a group sums it over
  // ranks when it logs).
  Tensor loss_sum = Tensor::zeros({}, DType::f32, device);
  int64_t window_steps = 0;

  int64_t start_step = 0;
  if (ckpt) {
    const std::string& src = ckpt->source;
    TG_CHECK(ckpt->net == cfg.model.name, src, ": holds model '", ckpt->net, "', config says '",
             cfg.model.name, "'");
    const Tensor& p = ckpt->get("params");
    TG_CHECK(p.numel() == params.numel(), src, ": has ", p.numel(), " parameters, model '",
             cfg.model.name, "' has ", params.numel());
    params.copy_from(p.view(params.shape()));
    if (ema) ema->shadow().copy_from(ckpt->get("ema").view(params.shape()));
    std::vector<std::pair<std::string, Tensor>> ostate;
    for (const auto& [name, t] : ckpt->tensors)
      if (name.rfind("optim/", 0) == 0) ostate.emplace_back(name.substr(6), t);
    if (!ostate.empty()) optimizer->load_state(ostate);
    for (const auto& [name, t] : net->buffers()) {
      const Tensor& b = ckpt->get("buffer/" + name);
      TG_CHECK(b.shape() == t.shape(), src, ": buffer '", name, "' has the wrong shape");
      Tensor dst = t;
      dst.copy_from(b);
    }
    load_compressor_state(*ckpt, compressor.get(), workers);
    // The saved window sum is over all ranks: rank 0 carries it on.
    if (lead) loss_sum.copy_from(ckpt->get("log/loss_sum"));
    window_steps = ckpt->get("log/window_steps").item<int64_t>();
    start_step = ckpt->step;
    if (lead) truncate_metrics(metrics_path, start_step);
  }

  // ---- the process group ---------------------------------------------------------------------
  std::unique_ptr<ProcessGroup> group;
  std::optional<StepComm> step_comm;
  if (distributed) {
    group = std::make_unique<ProcessGroup>(opt.rank, opt.job_id, cfg, device, start_step);
    StepComm sc;
    sc.comm = &group->comm();
    sc.first_worker = first_worker;
    sc.total_workers = workers;
    sc.options.algorithm = comm::parse_ternary_algorithm(cfg.comm.algorithm);
    sc.options.compression = copts;
    step_comm = sc;
  }
  // ---- threads: a thread count that does not oversubscribe the cores ---------------------------
  // The results do not depend on it (every CPU kernel is thread-count invariant), the speed does.
  const ThreadChoice threads = choose_threads(opt.threads, group ? group->local_sharing() : 1);
  omp_set_num_threads(threads.count);

  const auto post_mortem_window = std::chrono::milliseconds(
      static_cast<int64_t>(std::clamp(cfg.comm.timeout / 4.0, 1.0, 10.0) * 1000.0));

  try {
    MetricsLog metrics;
    if (lead && !opt.out_dir.empty()) {
      write_file_atomic((fs::path(opt.out_dir) / kConfigName).string(), to_toml(cfg));
      metrics.open(metrics_path);
    }

    auto save = [&](int64_t step_done) {
      if (!group && ckpt_path.empty()) return;
      Checkpoint c;
      // Collective parts first, on every rank, whether or not this rank writes.
      if (compressor)
        add_all_compressor_state(c, *compressor, workers, group.get(), first_worker,
                                 local_workers);
      Tensor window_loss = loss_sum;
      if (group) {
        const double l = group->sum({static_cast<double>(loss_sum.item<float>())})[0];
        window_loss = Tensor::from_vector(std::vector<float>{static_cast<float>(l)}, {});
      }
      if (ckpt_path.empty()) return;
      c.step = step_done;
      c.net = cfg.model.name;
      c.config_toml = to_toml(cfg);
      c.tensors.emplace_back("params", params);
      if (ema) c.tensors.emplace_back("ema", ema->shadow());
      for (auto& [name, t] : optimizer->state()) c.tensors.emplace_back("optim/" + name, t);
      for (const auto& [name, t] : net->buffers()) c.tensors.emplace_back("buffer/" + name, t);
      c.tensors.emplace_back("log/loss_sum", window_loss);
      c.tensors.emplace_back("log/window_steps",
                             Tensor::from_vector(std::vector<int64_t>{window_steps}, {1}));
      save_checkpoint(ckpt_path, c);
    };

    const bool show_progress =
        opt.progress == 1 || (opt.progress == -1 && ::isatty(STDERR_FILENO) == 1);
    Progress progress(tc.iterations, show_progress, /*silent=*/!lead);
    if (!device.is_cuda() || group)
      progress.message(std::to_string(threads.count) + " CPU thread" +
                       (threads.count > 1 ? "s" : "") + " per process (" + threads.why + ")");
    if (group)
      progress.message(std::to_string(world) + " processes (" + group->comm().backend() +
                       ", rendezvous " + opt.rank.rendezvous + ", from " + opt.rank.source +
                       "), " + std::to_string(local_workers) + " worker" +
                       (local_workers > 1 ? "s" : "") + " each");
    const int64_t k = net->info().num_classes;
    auto run_eval_now = [&](int64_t step_done) {
      // Batch-norm moving statistics follow rank 0's (each rank updates them with its own
      // workers' batches; as PyTorch DDP's broadcast_buffers, rank 0's are the model's).
      if (group)
        for (const auto& [name, t] : net->buffers()) {
          Tensor b = t;
          group->broadcast(b, 0);
        }
      EmaWeights swap(*net, ema ? &*ema : nullptr);
      EvalResult r =
          evaluate(*net, *test_ds, cfg.data.eval_batch_size, cfg.data.eval_limit,
                   group ? group->rank() : 0, group ? group->size() : 1);
      if (group) {
        const std::vector<double> v = group->sum({static_cast<double>(r.correct),
                                                  static_cast<double>(r.correct5), r.loss_sum,
                                                  static_cast<double>(r.examples)});
        r.correct = static_cast<int64_t>(v[0]);
        r.correct5 = static_cast<int64_t>(v[1]);
        r.loss_sum = v[2];
        r.examples = static_cast<int64_t>(v[3]);
        const double n = static_cast<double>(std::max<int64_t>(r.examples, 1));
        r.accuracy = static_cast<double>(r.correct) / n;
        r.top5_accuracy = static_cast<double>(r.correct5) / n;
        r.loss = r.loss_sum / n;
      }
      metrics.write(eval_json(r, step_done, k, ema ? "ema" : "raw"));
      progress.message("eval @ " + std::to_string(step_done) + ": test accuracy " +
                       format_percent(r.accuracy) + ", loss " + format_fixed(r.loss, 4) +
                       (ema ? " (EMA weights)" : ""));
      return r;
    };

    // ---- the loop ----------------------------------------------------------------------------
    StopSignals stop_signals;
    Prefetcher prefetch(*train_ds, sampler, first_worker, local_workers, workers, cfg.data.augment,
                        seed, cfg.data.prefetch > 0);
    double train_seconds = 0.0;
    int64_t images = 0;
    bool stopped = false;
    double last_loss = NAN;
    TrainStep train_step(*net, *optimizer, ema ? &*ema : nullptr, tc.weight_decay, seed,
                         compressor.get(), step_comm ? &*step_comm : nullptr);
    if (opt.gradient_hook) train_step.set_gradient_hook(opt.gradient_hook);
    // Phase times need the device synchronized between phases: always on the CPU (free) and in a
    // group (the collectives synchronize anyway); one process on a GPU times only logged steps,
    // so the steps between them stay overlapped.
    const bool time_every_step = group != nullptr || device.is_cpu();
    StepTotals window_totals, run_totals;
    std::string last_route;
    int64_t step = start_step;
    progress.start(start_step);
    for (; step < tc.iterations; ++step) {
      const auto t0 = Clock::now();
      const double lr = schedule(step);
      const int64_t done = step + 1;
      const bool log_now = done % tc.log_every == 0 || done == tc.iterations;
      std::vector<HostBatch> batches = prefetch.get(step, tc.iterations);
      const comm::WireBytes wire0 = group ? group->comm().wire() : comm::WireBytes{};
      StepTimes times;
      const bool timed = time_every_step || log_now;
      train_step.run(batches, step, lr, loss_sum, timed ? &times : nullptr);
      // How the gradients travelled (comm.algorithm = auto picks per call by the byte cost
      // model): said once, and again whenever the route changes (e.g. a floating-gradient epoch).
      if (group) {
        const comm::AggregateStats& as = train_step.last_aggregate();
        const std::string route =
            as.ternary_path ? std::string("ternary codes by ") + comm::name(as.bucket_algorithm)
            : as.fp32_path  ? std::string("fp32 by reduce-scatter + allgather")
                            : std::string("whole messages by allgather");
        if (route != last_route) {
          progress.message("iteration " + std::to_string(step) + ": gradients travel as " + route +
                           " (" + comm::describe(as) + ")");
          last_route = route;
        }
      }
      // Every rank stops at the same step: a signal on any rank stops them all.
      const bool stop_now = group ? group->any(g_stop.load()) : g_stop.load();
      const comm::WireBytes wire1 = group ? group->comm().wire() : comm::WireBytes{};
      for (StepTotals* t : {&window_totals, &run_totals}) {
        t->add_step(wire1.sent - wire0.sent, wire1.received - wire0.received);
        if (timed) t->add_times(times);
      }
      ++window_steps;
      // The GPU may run a few steps behind the host; waiting for it only at log steps keeps the
      // steps in between overlapped, and the time it was behind lands in the step that waits.
      if (log_now && device.is_cuda()) cuda::synchronize(device.index);
      train_seconds += seconds_since(t0);
      images += tc.batch_size;
      progress.update(done, images / std::max(train_seconds, 1e-9));

      if (log_now) {
        double window_loss = loss_sum.item<float>();
        if (group) window_loss = group->sum({window_loss})[0];
        last_loss = window_loss / static_cast<double>(window_steps);
        const std::vector<double> per_iter = window_totals.per_iter(group.get(), workers);
        const double reg = regularization_loss(*net, tc.weight_decay);
        json::Object o;
        o.add("type", "train").add("step", done).add("loss", last_loss).add("reg_loss", reg);
        o.add("lr", lr).add("epoch", sampler.epoch(done));
        o.add("images_per_sec", images / std::max(train_seconds, 1e-9));
        add_per_iter(o, per_iter, window_totals.timed_steps > 0);
        o.add("wall_seconds", seconds_since(t_start));
        metrics.write(o.str());
        progress.log_step(done, last_loss, lr, images / std::max(train_seconds, 1e-9));
        loss_sum.zero_();
        window_steps = 0;
        window_totals = StepTotals{};
      }
      if (tc.eval_every > 0 && done % tc.eval_every == 0 && done != tc.iterations)
        run_eval_now(done);
      if (tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0 && done != tc.iterations)
        save(done);
      if (stop_now) {
        stopped = true;
        ++step;
        break;
      }
    }
    progress.finish();
    const int64_t steps_done = step;

    if (stopped) {
      save(steps_done);
      if (interrupted) *interrupted = true;
      progress.message("interrupted after iteration " + std::to_string(steps_done) +
                       (opt.out_dir.empty() ? std::string(" (no --out: nothing saved)")
                                            : "; checkpoint saved, continue with --resume"));
    }

    // ---- final evaluation and summary ----------------------------------------------------------
    json::Object s;
    if (!stopped) {
      save(steps_done);
      EvalResult r = run_eval_now(steps_done);
      s.add("test_accuracy", r.accuracy);
      if (k > 5) s.add("test_top5_accuracy", r.top5_accuracy);
      s.add("test_loss", r.loss).add("test_examples", r.examples);
      s.add("eval_weights", ema ? "ema" : "raw");
    } else {
      s.add("interrupted", true);
    }
    const std::vector<double> per_iter = run_totals.per_iter(group.get(), workers);
    s.add("iterations", steps_done).add("start_iteration", start_step);
    s.add("train_loss", last_loss);
    s.add("images_per_sec", images / std::max(train_seconds, 1e-9));
    s.add("train_seconds", train_seconds).add("wall_seconds", seconds_since(t_start));
    s.add("workers", static_cast<int64_t>(workers)).add("compression", cfg.compression.method);
    s.add("processes", static_cast<int64_t>(world));
    s.add("workers_per_process", static_cast<int64_t>(local_workers));
    s.add("threads_per_process", static_cast<int64_t>(threads.count)).add("threads_from", threads.why);
    if (group) {
      s.add("comm_backend", group->comm().backend()).add("comm_algorithm", cfg.comm.algorithm);
      s.add("rendezvous", opt.rank.rendezvous);
    }
    // What one worker's message holds per iteration: the message plus the shared scalers it
    // contributes (4 bytes each); fp32 is the uncompressed gradient, for the ratio. The wire
    // figures are what the processes really sent (0 in one process: its workers are emulated).
    const auto fp32_bytes = static_cast<uint64_t>(params.numel()) * sizeof(float);
    const uint64_t payload =
        compressor ? compressor->payload_bytes(std::max<int64_t>(steps_done - 1, 0)) +
                         static_cast<uint64_t>(compressor->num_meta()) * sizeof(float)
                   : fp32_bytes;
    s.add("payload_bytes_per_worker_per_iter", payload);
    s.add("fp32_bytes_per_worker_per_iter", fp32_bytes);
    s.add("compression_ratio", static_cast<double>(fp32_bytes) / static_cast<double>(payload));
    add_per_iter(s, per_iter, run_totals.timed_steps > 0);
    s.add("device", device.str());
    s.add("device_name", device.is_cuda() ? cuda::device_name(device.index) : cpu_model_name());
    s.add("model", cfg.model.name).add("num_params", net->arena().total_numel());
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    s.add("peak_rss_mb", static_cast<double>(ru.ru_maxrss) / 1024.0);  // Linux: KiB
    s.add("params_sha256", params_sha256(params));
    if (ema) s.add("ema_sha256", params_sha256(ema->shadow()));
    s.add_raw("config", to_json(cfg));
    const std::string summary = s.str();
    if (lead && !opt.out_dir.empty() && !stopped)
      write_file_atomic((fs::path(opt.out_dir) / kSummaryName).string(), summary + "\n");
    return summary;
  } catch (const Error& e) {
    if (!group) throw;
    TG_THROW(group->post_mortem(e.what(), post_mortem_window));
  }
}

std::string run_eval(const std::string& checkpoint_path, const std::string& config_path,
                     const std::vector<std::string>& overrides, bool use_raw) {
  Checkpoint ck = load_checkpoint(checkpoint_path);
  Config cfg = config_path.empty()
                   ? parse_config(ck.config_toml, checkpoint_path + " (embedded config)", overrides)
                   : load_config_file(config_path, overrides);
  TG_CHECK(cfg.model.name == ck.net, checkpoint_path, ": holds model '", ck.net,
           "' but the config says '", cfg.model.name, "'");
  const Device device = parse_device(cfg.device);
  check_device_usable(device);
  std::unique_ptr<Net> net = make_net(cfg.model.name, net_options(cfg), device);
  const bool has_ema = ck.has("ema");
  const bool ema = has_ema && !use_raw;
  const Tensor& src = ck.get(ema ? "ema" : "params");
  Tensor params = net->arena().params();
  TG_CHECK(src.numel() == params.numel(), checkpoint_path, ": has ", src.numel(),
           " parameters, model '", cfg.model.name, "' has ", params.numel());
  params.copy_from(src.view(params.shape()));
  for (const auto& [name, t] : net->buffers()) {
    Tensor dst = t;
    dst.copy_from(ck.get("buffer/" + name));
  }
  auto test_ds = data::open_dataset(data_options(cfg), data::Split::test);
  check_compatible(*net, *test_ds);
  const auto t0 = Clock::now();
  EvalResult r = evaluate(*net, *test_ds, cfg.data.eval_batch_size, cfg.data.eval_limit);
  json::Object o;
  o.add("checkpoint", checkpoint_path).add("step", ck.step).add("model", cfg.model.name);
  o.add("test_accuracy", r.accuracy);
  if (net->info().num_classes > 5) o.add("test_top5_accuracy", r.top5_accuracy);
  o.add("test_loss", r.loss).add("test_examples", r.examples);
  o.add("eval_weights", ema ? "ema" : "raw").add("device", device.str());
  o.add("eval_seconds", seconds_since(t0));
  return o.str();
}

}  // namespace tg::cli
