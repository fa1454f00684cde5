#include "train/trainer.h"

#include <omp.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <type_traits>

#include "comm/process_group.h"
#include "comm/store.h"
#include "datasets/device_stager.h"
#include "datasets/sampler.h"
#include "nn/autograd/tape.h"
#include "nn/core/allocator.h"
#include "nn/core/clock.h"
#include "nn/core/cpu_env.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/hash.h"
#include "nn/core/json.h"
#include "nn/ops/conv2d_kernels.h"
#include "nn/ops/cuda_options.h"
#include "nn/ops/reduce.h"
#include "nn/optim/ema.h"
#include "nn/optim/lr_schedule.h"
#include "terngrad/exchange/comm_hook.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/options.h"
#include "train/tensorboard.h"

namespace tg::train {

namespace fs = std::filesystem;
using comm::ProcessGroup;

namespace {

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

// One metrics.jsonl record. Its numbers are also the TensorBoard scalars "<type>/<key>" of the
// same step, taken from the same values (strings are left out: TensorBoard plots numbers).
class Record {
 public:
  Record(const std::string& type, int64_t step) : type_(type), step_(step) {
    o_.add("type", type).add("step", step);
  }
  template <class T>
  Record& add(std::string_view key, T value) {
    o_.add(key, value);
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
      scalars_.push_back({type_ + "/" + std::string(key), static_cast<double>(value)});
    return *this;
  }
  int64_t step() const { return step_; }
  std::string json() const { return o_.str(); }
  const std::vector<tensorboard::Scalar>& scalars() const { return scalars_; }

 private:
  std::string type_;
  int64_t step_;
  json::Object o_;
  std::vector<tensorboard::Scalar> scalars_;
};

// metrics.jsonl and, with train.tensorboard, a TensorBoard event file beside it: each record goes
// to both and is flushed as it is written.
class RunLog {
 public:
  // resumed_at: the checkpoint's step when resuming (-1 otherwise): TensorBoard then drops the
  // points after it from earlier event files, as truncate_metrics dropped their lines.
  void open(const std::string& dir, bool tensorboard, int64_t resumed_at) {
    path_ = (fs::path(dir) / kMetricsName).string();
    out_.open(path_, std::ios::app);
    TG_CHECK(out_.good(), "cannot open ", path_, " for writing: ", std::strerror(errno));
    if (!tensorboard) return;
    events_.emplace(dir);
    if (resumed_at >= 0) events_->restart(resumed_at + 1);
  }
  void write(const Record& r) {
    if (!out_.is_open()) return;
    out_ << r.json() << '\n';
    out_.flush();
    TG_CHECK(out_.good(), "cannot write ", path_, ": ", std::strerror(errno));
    if (events_) events_->scalars(r.step(), r.scalars());
  }

 private:
  std::ofstream out_;
  std::string path_;
  std::optional<tensorboard::EventWriter> events_;
};

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

Record eval_record(const EvalResult& r, int64_t step, int64_t k, const char* weights) {
  Record o("eval", step);
  o.add("test_accuracy", r.accuracy);
  if (k > 5) o.add("test_top5_accuracy", r.top5_accuracy);
  o.add("test_loss", r.loss).add("examples", r.examples).add("weights", weights);
  return o;
}

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

// Sums of a stretch of steps on this rank: bytes sent and received, phase seconds.
struct StepTotals {
  double sent = 0, received = 0;
  double inter_sent = 0, inter_received = 0;  // of them, to and from other nodes
  double compute_s = 0, compress_s = 0, comm_s = 0, exposed_s = 0;
  int64_t steps = 0, timed_steps = 0;
  void add_step(uint64_t s, uint64_t r) {
    sent += static_cast<double>(s);
    received += static_cast<double>(r);
    ++steps;
  }
  void add_inter(const comm::WireBytes& w) {
    inter_sent += static_cast<double>(w.sent);
    inter_received += static_cast<double>(w.received);
  }
  void add_times(const StepTimes& t) {
    compute_s += t.transfer_s + t.forward_s + t.backward_s + t.update_s;
    compress_s += t.compress_s;
    comm_s += t.comm_s;
    exposed_s += t.reduce_wait_s;
    ++timed_steps;
  }
  // Per worker and iteration, averaged over the ranks: collective in a group.
  IterationCost per_iter(ProcessGroup* group, int total_workers) const {
    const double timed = static_cast<double>(std::max<int64_t>(timed_steps, 1));
    std::vector<double> v = {
        sent,           received,          compute_s / timed, compress_s / timed,
        comm_s / timed, exposed_s / timed, inter_sent,        inter_received};
    const int p = group ? group->size() : 1;
    if (group) v = group->sum(v);
    const double per = static_cast<double>(std::max<int64_t>(steps, 1)) * total_workers;
    IterationCost c;
    c.wire_sent = v[0] / per;
    c.wire_received = v[1] / per;
    c.timed = timed_steps > 0;
    c.compute_s = v[2] / p;
    c.compression_s = v[3] / p;
    c.communication_s = v[4] / p;
    c.comm_exposed_s = group ? v[5] / p : 0.0;  // one process: no communication to wait for
    c.across_nodes = group != nullptr && group->nodes().nodes() > 1;
    c.inter_sent = v[6] / per;
    c.inter_received = v[7] / per;
    return c;
  }
};

// The CPU threads of this process: the flag, else what the user set in the environment, else
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

// The input pipeline's threads: the CPUs this process may use, divided among the ranks of the run
// on the same host that share them (the compute threads' policy, without OMP_NUM_THREADS, which
// is the compute's).
ThreadChoice choose_loader_threads(int sharing) {
  const int cpus = affinity_cpus();
  const int n = std::max(1, cpus / std::max(sharing, 1));
  return {n, std::to_string(cpus) + " CPU" + (cpus > 1 ? "s" : "") +
                 (sharing > 1 ? " shared by " + std::to_string(sharing) + " processes" : "") +
                 "; data.loader_threads to change"};
}

std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

struct Trainer::State {
  Config cfg;
  TrainOptions opt;
  TrainListener* listener = nullptr;  // rank 0's; null elsewhere
  Clock::time_point t_start = Clock::now();
  int world = 1, rank = 0;
  bool lead = true;
  Device device;
  int workers = 1, local_workers = 1, first_worker = 0;  // N over all processes; this rank's
  uint64_t seed = 0;
  bool distributed = false;
  // The run's checkpoints (rank 0's writes them; absent without out_dir) and metrics file ("" on
  // ranks other than 0, and without out_dir).
  std::optional<CheckpointFiles> files;
  std::string metrics_path;
  // --resume: the checkpoints to try, newest first (every rank reads them), and those found
  // unreadable on the way to the one restored (path, why), which rank 0 then sets aside.
  std::vector<std::string> resume_candidates;
  std::vector<std::pair<std::string, std::string>> damaged;
  Clock::time_point last_save = Clock::now();

  std::unique_ptr<Net> net;
  std::unique_ptr<data::Dataset> train_ds, test_ds;
  std::optional<data::BatchSampler> sampler;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<LrSchedule> schedule;
  Tensor params;
  std::unique_ptr<tern::Compressor> compressor;  // several workers or any compression
  std::optional<Ema> ema;
  // Sum over this rank's workers of loss / N over the current log window (a group sums it over
  // ranks when it logs).
  Tensor loss_sum;
  int64_t window_steps = 0;
  int64_t step = 0, start_step = 0;

  std::unique_ptr<ProcessGroup> group;
  std::optional<StepComm> step_comm;
  ThreadChoice threads;
  std::chrono::milliseconds post_mortem_window{1000};
  bool sched_batch = false;  // this rank's threads run under SCHED_BATCH (comm.sched_batch)
  int64_t planned_peak = 0;  // bytes (train/memory_plan.h); 0 = not planned (GPU runs)
  RunLog metrics;
  std::optional<data::BatchPipeline> input;
  std::optional<data::DeviceStager> stager;  // CUDA with data.pin_memory: batches a step ahead
  ThreadChoice loader_threads;
  std::optional<TrainStep> train_step;
  // Phase times need the device synchronized between phases: always on the CPU (free) and in a
  // group (the collectives synchronize anyway); one process on a GPU times only logged steps,
  // so the steps between them stay overlapped.
  bool time_every_step = true;
  double train_seconds = 0.0;
  int64_t images = 0;
  double last_loss = NAN;
  StepTotals window_totals, run_totals;
  size_t bad_said = 0;   // unreadable files already named in the log
  size_t conv_said = 0;  // GPU convolution choices already named in the log
  std::string last_route;

  // Runs f; in a group, an error on this rank becomes the group's post-mortem (which ranks were
  // lost, what the others reported).
  template <class F>
  decltype(auto) guarded(F&& f) {
    try {
      return f();
    } catch (const Error& e) {
      if (!group) throw;
      TG_THROW(group->post_mortem(e.what(), post_mortem_window));
    }
  }
  void say(const std::string& line) const {
    if (listener) listener->message(line);
  }
  void open_output();
  void check_resume_config();
  void build();
  void resume();
  void set_aside_damaged();
  void join_group();
  void check_memory();
  void open_input();
  data::BadFiles note_bad_files();
  bool step_once();  // true when a stop was requested on any rank
  EvalResult evaluate();
  void save();
  void restore(const Checkpoint& ckpt);
};

// The output directory, and the checkpoint to resume from: rank 0 writes; every rank reads.
void Trainer::State::open_output() {
  if (opt.out_dir.empty()) {
    TG_CHECK(!opt.resume,
             "resume needs an output directory (the directory of the run to "
             "continue)");
    return;
  }
  files.emplace(opt.out_dir, cfg.train.keep_checkpoints);
  metrics_path = (fs::path(opt.out_dir) / kMetricsName).string();
  if (lead) {
    std::error_code ec;
    fs::create_directories(opt.out_dir, ec);
    TG_CHECK(!ec && fs::is_directory(opt.out_dir), "cannot create output directory ", opt.out_dir,
             ": ", ec.message());
  }
  const std::vector<std::string> found = files->candidates();
  if (!opt.resume && lead)
    TG_CHECK(found.empty() && !fs::exists(metrics_path), "output directory ", opt.out_dir,
             " already holds a run (", found.empty() ? metrics_path : found.front(),
             "); pass --resume to continue it, or choose another --out");
  // --resume without a checkpoint starts the run (a restart loop's first attempt, or one killed
  // before its first checkpoint): whatever the directory holds of it is redone.
  if (opt.resume) {
    resume_candidates = found;
    if (found.empty())
      say("--resume: no checkpoint in " + opt.out_dir + " yet; starting from iteration 0");
  }
}

// The embedded config of each checkpoint to try must be this run's (less the keys that may
// change on resume): compared from the headers, before anything is built. A file whose header
// cannot be read is damaged, not a mismatch.
void Trainer::State::check_resume_config() {
  std::vector<std::string> readable;
  for (const std::string& path : resume_candidates) {
    Checkpoint header;
    try {
      header = load_checkpoint_header(path);
    } catch (const Error& e) {
      damaged.emplace_back(path, e.what());
      continue;
    }
    Config saved = config::parse_config(header.config_toml, path + " (embedded config)");
    const std::string want = config::to_toml(config::with_report_keys_of(saved, cfg));
    const std::string have = config::to_toml(cfg);
    TG_CHECK(want == have, "--resume: the config differs from the one ", path,
             " was written with; resuming would not reproduce the run. Differences:",
             config::config_diff(have, want, "now:        ", "checkpoint: "));
    readable.push_back(path);
  }
  resume_candidates = std::move(readable);
}

// Model, data, optimizer, schedule, compressor, EMA.
void Trainer::State::build() {
  // Without data.path the files are looked for (data/<name>, then an installed package): the log
  // says which copy the run reads. The data first: a batch it cannot fill is refused before the
  // net is built.
  data::DataOptions dopts = data_options(cfg);
  const data::DataLocation where = data::locate_dataset(dopts);
  if (dopts.path.empty() && !where.path.empty()) {
    dopts.path = where.path;
    say("data: " + dopts.name + " from " + where.path + " (no data.path: found in " + where.source +
        ")");
  }
  train_ds = data::open_dataset(dopts, data::Split::train);
  test_ds = data::open_dataset(dopts, data::Split::test);
  const int64_t train_size = train_ds->info().size;
  TG_CHECK(cfg.train.batch_size <= train_size, "train.batch_size = ", cfg.train.batch_size,
           " is larger than the training split of ", dopts.name, " (", train_size,
           " examples): a batch would hold examples twice; use at most ", train_size);
  // --resume with a checkpoint to read: resume() overwrites every parameter (or throws when none
  // loads), so the random initial values would be drawn for nothing.
  RunParts parts = build_run(cfg, device, train_size, /*initialize=*/resume_candidates.empty());
  net = std::move(parts.net);
  optimizer = std::move(parts.optimizer);
  compressor = std::move(parts.compressor);
  ema = std::move(parts.ema);
  check_compatible(*net, *train_ds);
  check_compatible(*net, *test_ds);
  sampler.emplace(train_size, cfg.train.batch_size, seed, /*shuffle=*/true);
  schedule.emplace(lr_schedule_options(cfg, train_size));
  params = net->arena().params();
  loss_sum = Tensor::zeros({}, DType::f32, device);
}

void Trainer::State::restore(const Checkpoint& ckpt) {
  const std::string& src = ckpt.source;
  TG_CHECK(ckpt.net == cfg.model.name, src, ": holds model '", ckpt.net, "', config says '",
           cfg.model.name, "'");
  const Tensor& p = ckpt.get("params");
  TG_CHECK(p.numel() == params.numel(), src, ": has ", p.numel(), " parameters, model '",
           cfg.model.name, "' has ", params.numel());
  // Loaded in place (load_checkpoint's sink) or into a copy.
  if (p.raw_data() != params.raw_data()) params.copy_from(p.view(params.shape()));
  if (ema) {
    const Tensor& e = ckpt.get("ema");
    TG_CHECK(e.numel() == params.numel(), src, ": has ", e.numel(), " EMA values, model '",
             cfg.model.name, "' has ", params.numel(), " parameters");
    if (e.raw_data() != ema->shadow().raw_data()) ema->shadow().copy_from(e.view(params.shape()));
  }
  std::vector<std::pair<std::string, Tensor>> ostate;
  for (const auto& [name, t] : ckpt.tensors)
    if (name.rfind("optim/", 0) == 0) ostate.emplace_back(name.substr(6), t);
  if (!ostate.empty()) optimizer->load_state(ostate);
  for (const auto& [name, t] : net->buffers()) {
    const Tensor& b = ckpt.get("buffer/" + name);
    TG_CHECK(b.shape() == t.shape(), src, ": buffer '", name, "' has the wrong shape");
    Tensor dst = t;
    dst.copy_from(b);
  }
  load_compressor_state(ckpt, compressor.get(), workers);
  // The saved window sum is over all ranks: rank 0 carries it on.
  if (lead)
    loss_sum.copy_from(ckpt.get("log/loss_sum"));
  else
    loss_sum.zero_();
  window_steps = ckpt.get("log/window_steps").item<int64_t>();
  step = start_step = ckpt.step;
  if (lead && !metrics_path.empty()) truncate_metrics(metrics_path, step);
}

// --resume: restores the newest checkpoint that loads whole (digest verified), falling back past
// damaged ones; none at all starts from iteration 0. Every rank reads the same files in the same
// order, so all restore the same one (the rendezvous compares their start iterations).
void Trainer::State::resume() {
  if (resume_candidates.empty() && damaged.empty()) {
    if (lead && !metrics_path.empty()) truncate_metrics(metrics_path, 0);
    return;
  }
  for (const std::string& path : resume_candidates) {
    // The parameters and the EMA shadow are read straight into the run's own tensors (on the
    // CPU); everything else is restored from the loaded copy, which is then dropped. A file
    // that fails its digest may have left part of itself in them: the next one overwrites it.
    std::optional<Checkpoint> ckpt;
    try {
      ckpt = load_checkpoint(path, [&](const std::string& name, DType, const Shape&) -> Tensor {
        if (name == "params") return params;
        if (name == "ema" && ema) return ema->shadow();
        return {};
      });
    } catch (const Error& e) {
      damaged.emplace_back(path, e.what());
      continue;
    }
    // The errors name the file already.
    for (const auto& [bad, why] : damaged)
      say("--resume: skipping " + (why.rfind(bad, 0) == 0 ? why : bad + ": " + why));
    restore(*ckpt);
    say("--resume: continuing from " + path + " (iteration " + std::to_string(step) + ")");
    if (files && path == files->latest()) files->set_latest_step(step);
    return;
  }
  std::string why;
  for (const auto& [bad, what] : damaged) why += "; " + what;
  TG_THROW("--resume: no intact checkpoint in ", opt.out_dir, why);
}

// Rank 0 renames the checkpoints a resume skipped to "<name>.damaged", after the rendezvous (so
// every rank has read what it needed): newer than the run's state, they would otherwise be kept
// or tried again.
void Trainer::State::set_aside_damaged() {
  if (!lead || !files || damaged.empty()) return;
  std::vector<std::string> paths;
  for (const auto& [path, why] : damaged) paths.push_back(path);
  for (const std::string& moved : files->set_aside(paths)) say("--resume: set aside " + moved);
  damaged.clear();
}

// A process group for P > 1, and for P = 1 when a rendezvous is named (--rank 0 --world-size 1
// --rendezvous URL): the one-rank run then goes through the real communicator (NCCL on a
// one-GPU machine), which one process otherwise never touches. Then the thread count: one that
// does not oversubscribe the cores (the results do not depend on it, the speed does).
void Trainer::State::join_group() {
  if (distributed) {
    comm::RunIdentity run;
    run.fingerprint = config_fingerprint(cfg);
    run.start_step = start_step;
    run.explain = config::config_diff;
    group = std::make_unique<ProcessGroup>(opt.rank, opt.job_id, cfg.comm.group, device, run);
    StepComm sc;
    sc.comm = &group->comm();
    sc.first_worker = first_worker;
    sc.total_workers = workers;
    step_comm = sc;
  }
  threads = choose_threads(opt.threads, group ? group->local_sharing() : 1);
  omp_set_num_threads(threads.count);
  if (!device.is_cuda() || group)
    say(plural(threads.count, "CPU thread") + " per process (" + threads.why + ")");
  if (group) {
    say(std::to_string(world) + " processes (" + group->comm().backend() + ", rendezvous " +
        comm::redact_store_url(opt.rank.rendezvous) + ", from " + opt.rank.source + "), " +
        plural(local_workers, "worker") + " each");
    say(group->secret_source().empty()
            ? "job secret: none (rendezvous entries and message headers are not authenticated)"
            : "job secret: " + group->secret_source() +
                  " (rendezvous entries and message headers authenticated)");
    say("nodes: " + group->nodes().str() + " (from " + group->nodes_from() + ")");
    // Every thread so far (OpenMP's, Gloo's event loop) and, inherited, every later one (the
    // loader's, the overlap thread).
    if (group->comm().backend() == "gloo" && cfg.comm.group.sched_batch) {
      try {
        const int n = use_batch_scheduling();
        sched_batch = true;
        say("scheduling: SCHED_BATCH for this rank's " + plural(n, "thread") +
            " (comm.sched_batch; woken threads do not preempt, so Gloo's event loop does not "
            "spin)");
      } catch (const Error& e) {  // a speed setting: the run goes on under the default policy
        say(std::string("scheduling: the default policy (comm.sched_batch: ") + e.what() + ")");
      }
    }
  }
}

// CPU runs: the planned peak of this process's memory against what it may use (see
// train/memory_plan.h); a run that cannot fit is refused before its first step, naming both.
void Trainer::State::check_memory() {
  if (!device.is_cpu()) return;
  MemoryPlan plan;
  plan.images_per_worker = (cfg.train.batch_size + workers - 1) / workers;
  // Evaluation's largest batch: at most the examples it reads (data.eval_limit, the test split).
  const int64_t test_size = test_ds->info().size;
  const int64_t eval_n =
      cfg.data.eval_limit > 0 ? std::min(cfg.data.eval_limit, test_size) : test_size;
  plan.eval_batch = std::max<int64_t>(1, std::min(cfg.data.eval_batch_size, eval_n));
  const ActivationBytes train = probe_training_activations(*net);
  const ActivationBytes eval = probe_eval_activations(*net);
  plan.train_activations = train.at(plan.images_per_worker);
  plan.eval_activations = eval.at(plan.eval_batch);
  plan.workspace = conv_workspace_bytes(train, plan.images_per_worker, eval, plan.eval_batch);
  // What is resident now holds what the probes allocated for good (the parameter gradients,
  // BLAS's buffers) but not the blocks they let go of.
  allocator_for(device).empty_cache();
  plan.resident = std::max<int64_t>(0, resident_bytes());
  const int64_t param_bytes = params.numel() * static_cast<int64_t>(sizeof(float));
  // The workers' gradients the exchange reads and their sum (the net's own is resident already:
  // W copies), the exchange's buffers (about one more), and the residuals of error feedback.
  if (compressor) plan.gradients = (local_workers + 1) * param_bytes;
  if (cfg.compression.error_feedback || cfg.compression.method == tern::Method::onebit)
    plan.gradients += local_workers * param_bytes;
  const std::string& opt_name = cfg.train.optimizer.name;
  plan.optimizer = opt_name == "adam" ? 2 * param_bytes : opt_name == "momentum" ? param_bytes : 0;
  const auto& in = net->info();
  const int64_t image_bytes =
      in.in_channels * in.image_size * in.image_size * static_cast<int64_t>(sizeof(float));
  const int64_t threads = cfg.data.loader_threads > 0 ? cfg.data.loader_threads : 2;
  plan.input = (cfg.data.prefetch + threads) * local_workers * plan.images_per_worker * image_bytes;
  planned_peak = plan.peak();
  const MemoryLimit limit = memory_limit();
  const int sharing = group ? group->local_sharing() : 1;
  const std::string ranks =
      sharing > 1 ? " x " + std::to_string(sharing) + " ranks on this host" : "";
  if (limit.bytes < 0) {
    say("memory: planned peak " + plan.describe() + " (no limit known: no /proc)");
    return;
  }
  TG_CHECK(plan.added() * sharing <= limit.bytes,
           "this run needs more memory than it may use: ", format_bytes(plan.added()),
           " more per process", ranks, " against ", format_bytes(limit.bytes), " left (",
           limit.source, "); planned peak ", plan.describe(),
           ". Lower train.batch_size or data.eval_batch_size, or run fewer ranks per host");
  say("memory: planned peak " + plan.describe() + "; " + format_bytes(plan.added() * sharing) +
      " to come" + ranks + " of " + format_bytes(limit.bytes) + " available (" + limit.source +
      ")");
}

// The training batches: this rank's workers' slices of each global batch, loaded by the input
// pipeline's threads data.prefetch steps ahead.
void Trainer::State::open_input() {
  const int64_t flag = cfg.data.loader_threads;
  loader_threads = flag > 0 ? ThreadChoice{static_cast<int>(flag),
                                           "data.loader_threads = " + std::to_string(flag)}
                            : choose_loader_threads(group ? group->local_sharing() : 1);
  data::PipelineOptions po;
  po.threads = loader_threads.count;
  po.depth = static_cast<int>(cfg.data.prefetch);
  po.augment = cfg.data.dataset.augment;
  po.seed = seed;
  const bool staged = device.is_cuda() && cfg.data.pin_memory;
  if (staged) po.allocate = data::DeviceStager::host_allocator();
  input.emplace(
      *train_ds,
      [this](int64_t s) {
        std::vector<data::BatchRequest> r;
        for (int w = first_worker; w < first_worker + local_workers; ++w)
          r.push_back({sampler->indices(s, w, workers), sampler->first_position(s, w, workers)});
        return r;
      },
      po);
  if (staged) stager.emplace(*input, device);
  say(plural(loader_threads.count, "loader thread") + ", " + plural(cfg.data.prefetch, "step") +
      " ahead (" + loader_threads.why + ")" +
      (staged ? "; batches in pinned memory, copied to the GPU a step ahead on a copy stream"
              : ""));
}

// data.skip_bad_files: names the unreadable files this rank met since the last call (rank 0 in
// the run's log, the others on their stderr) and returns this rank's bad files (train, then test)
// with how many examples every rank has served from another image so far (collective in a group).
data::BadFiles Trainer::State::note_bad_files() {
  data::BadFiles all = train_ds->bad_files();
  const data::BadFiles test = test_ds->bad_files();
  all.replaced += test.replaced;
  all.files.insert(all.files.end(), test.files.begin(), test.files.end());
  for (; bad_said < all.files.size(); ++bad_said) {
    const std::string line = "data: replacing unreadable " + all.files[bad_said].second;
    if (lead)
      say(line);
    else
      std::fprintf(stderr, "rank %d: %s\n", rank, line.c_str());
  }
  if (group)
    all.replaced = static_cast<int64_t>(group->sum({static_cast<double>(all.replaced)})[0]);
  return all;
}

EvalResult Trainer::State::evaluate() {
  // Batch-norm moving statistics follow rank 0's (each rank updates them with its own workers'
  // batches; as PyTorch DDP's broadcast_buffers, rank 0's are the model's).
  if (group)
    for (const auto& [name, t] : net->buffers()) {
      Tensor b = t;
      group->broadcast(b, 0);
    }
  EmaWeights swap(*net, ema ? &*ema : nullptr);
  EvalResult r = tg::train::evaluate(*net, *test_ds, cfg.data.eval_batch_size, cfg.data.eval_limit,
                                     rank, group ? world : 1);
  if (group) {
    const std::vector<double> v =
        group->sum({static_cast<double>(r.correct), static_cast<double>(r.correct5), r.loss_sum,
                    static_cast<double>(r.examples)});
    r.correct = static_cast<int64_t>(v[0]);
    r.correct5 = static_cast<int64_t>(v[1]);
    r.loss_sum = v[2];
    r.examples = static_cast<int64_t>(v[3]);
    r.finish();
  }
  metrics.write(eval_record(r, step, net->info().num_classes, ema ? "ema" : "raw"));
  if (listener) listener->evaluated(step, r, ema.has_value());
  return r;
}

void Trainer::State::save() {
  last_save = Clock::now();
  if (!group && !files) return;
  Checkpoint c;
  // Collective parts first, on every rank, whether or not this rank writes.
  if (compressor)
    add_all_compressor_state(c, *compressor, workers, group.get(), first_worker, local_workers);
  Tensor window_loss = loss_sum;
  if (group) {
    const double l = group->sum({static_cast<double>(loss_sum.item<float>())})[0];
    window_loss = Tensor::from_vector(std::vector<float>{static_cast<float>(l)}, {});
  }
  if (!lead || !files) return;
  c.step = step;
  c.net = cfg.model.name;
  c.config_toml = to_toml(cfg);
  c.tensors.emplace_back("params", params);
  if (ema) c.tensors.emplace_back("ema", ema->shadow());
  for (auto& [name, t] : optimizer->state()) c.tensors.emplace_back("optim/" + name, t);
  for (const auto& [name, t] : net->buffers()) c.tensors.emplace_back("buffer/" + name, t);
  c.tensors.emplace_back("log/loss_sum", window_loss);
  c.tensors.emplace_back("log/window_steps",
                         Tensor::from_vector(std::vector<int64_t>{window_steps}, {1}));
  files->save(c);
}

bool Trainer::State::step_once() {
  const auto& tc = cfg.train;
  const auto t0 = Clock::now();
  const double lr = (*schedule)(step);
  const int64_t done = step + 1;
  const bool log_now = done % tc.log_every == 0 || done == tc.iterations;
  std::vector<HostBatch> batches =
      stager ? stager->get(step, tc.iterations) : input->get(step, tc.iterations);
  // The next step's copy runs on the copy stream beside this step's compute.
  if (stager) stager->prefetch(step + 1, tc.iterations);
  const comm::WireBytes wire0 = group ? group->comm().wire() : comm::WireBytes{};
  StepTimes times;
  const bool timed = time_every_step || log_now;
  train_step->run(batches, step, lr, loss_sum, timed ? &times : nullptr);
  // How the gradients travelled (comm.algorithm = auto picks per call by the byte cost model):
  // said once, and again whenever the route changes (e.g. a floating-gradient epoch).
  if (group) {
    const std::string route = tern::describe_route(train_step->last_buckets());
    if (route != last_route) {
      say("iteration " + std::to_string(step) + ": gradients travel as " + route + " (" +
          tern::describe(train_step->last_buckets()) + ")");
      last_route = route;
    }
  }
  // The GPU's convolution algorithms, once every pass of the net has run (after the first step).
  if (device.is_cuda() && conv_said < conv2d_choice_count()) {
    const auto choices = conv2d_choices();
    for (; conv_said < choices.size(); ++conv_said)
      say("conv " + choices[conv_said].first + ": " + choices[conv_said].second +
          " (cuda.conv_algo = " + cfg.cuda.conv_algo + ")");
  }
  // Every rank stops at the same step: a signal on any rank stops them all. A checkpoint that is
  // due by time is rank 0's call (one clock for all), carried by the same collective.
  const bool time_due =
      lead && tc.checkpoint_minutes > 0 && seconds_since(last_save) >= tc.checkpoint_minutes * 60.0;
  bool stop_now = g_stop.load(), save_by_time = time_due;
  if (group) {
    const std::vector<int32_t> any = group->max({stop_now, time_due});
    stop_now = any[0] != 0;
    save_by_time = any[1] != 0;
  }
  const comm::WireBytes wire1 = group ? group->comm().wire() : comm::WireBytes{};
  comm::WireBytes inter;
  for (const tern::AggregateStats& b : train_step->last_buckets()) {
    inter.sent += b.inter_wire.sent;
    inter.received += b.inter_wire.received;
  }
  for (StepTotals* t : {&window_totals, &run_totals}) {
    t->add_step(wire1.sent - wire0.sent, wire1.received - wire0.received);
    t->add_inter(inter);
    if (timed) t->add_times(times);
  }
  ++window_steps;
  step = done;
  // The GPU may run a few steps behind the host; waiting for it only at log steps keeps the
  // steps in between overlapped, and the time it was behind lands in the step that waits.
  if (log_now && device.is_cuda()) cuda::synchronize(device.index);
  train_seconds += seconds_since(t0);
  images += tc.batch_size;
  const double ips = images / std::max(train_seconds, 1e-9);
  if (listener) listener->stepped(done, ips);

  if (log_now) {
    double window_loss = loss_sum.item<float>();
    if (group) window_loss = group->sum({window_loss})[0];
    last_loss = window_loss / static_cast<double>(window_steps);
    const IterationCost cost = window_totals.per_iter(group.get(), workers);
    const double reg = regularization_loss(*net, tc.weight_decay);
    Record o("train", done);
    o.add("loss", last_loss).add("reg_loss", reg);
    o.add("lr", lr).add("epoch", sampler->epoch(done));
    o.add("images_per_sec", ips);
    for (const auto& [key, value] : iteration_cost_fields(cost)) o.add(key, value);
    o.add("wall_seconds", seconds_since(t_start));
    if (cfg.data.dataset.skip_bad_files) o.add("bad_files_replaced", note_bad_files().replaced);
    metrics.write(o);
    if (listener) listener->logged(done, last_loss, lr, ips);
    loss_sum.zero_();
    window_steps = 0;
    window_totals = StepTotals{};
  }
  if (tc.eval_every > 0 && done % tc.eval_every == 0 && done != tc.iterations) evaluate();
  const bool save_by_count = tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0;
  if ((save_by_count || save_by_time) && done != tc.iterations && !stop_now) save();
  return stop_now;
}

Trainer::Trainer(const Config& config, const TrainOptions& options)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = config;
  s.opt = options;
  s.world = options.rank.world_size;
  s.rank = options.rank.rank;
  s.lead = s.rank == 0;
  s.listener = s.lead ? options.listener : nullptr;
  TG_CHECK(s.world >= 1 && s.rank >= 0 && s.rank < s.world, "train: rank ", s.rank, " of ", s.world,
           " is out of range");
  s.device = comm::rank_device(s.cfg.device, s.rank, s.world);
  check_device_usable(s.device);
  apply_cuda_options(s.cfg.cuda);  // process-wide; the conv choices record starts empty
  s.workers = static_cast<int>(s.cfg.workers.count);
  TG_CHECK(s.workers % s.world == 0, "workers.count = ", s.workers, " cannot be spread over ",
           s.world,
           " processes: each process hosts workers.count / P workers, so workers.count must be a "
           "multiple of the number of processes");
  s.local_workers = s.workers / s.world;
  s.first_worker = s.rank * s.local_workers;
  s.seed = static_cast<uint64_t>(s.cfg.train.seed);
  s.distributed = s.world > 1 || !options.rank.rendezvous.empty();
  if (s.distributed) comm::resolve_backend(s.cfg.comm.group.backend, s.device);  // before any work

  s.open_output();
  if (options.resume) s.check_resume_config();           // before anything is built
  if (!s.lead) s.files.reset(), s.metrics_path.clear();  // only rank 0 writes
  s.build();
  const bool resumed = options.resume;
  if (resumed) s.resume();
  s.join_group();
  s.post_mortem_window = std::chrono::milliseconds(
      static_cast<int64_t>(std::clamp(s.cfg.comm.group.timeout / 4.0, 1.0, 10.0) * 1000.0));
  s.guarded([&] {
    s.check_memory();
    s.set_aside_damaged();
    if (s.lead && !options.out_dir.empty()) {
      write_file_atomic((fs::path(options.out_dir) / kConfigName).string(), to_toml(s.cfg));
      s.metrics.open(options.out_dir, s.cfg.train.tensorboard, resumed ? s.start_step : -1);
    }
    s.open_input();
    // The exchange learns the node layout from the process group (not a config key).
    tern::AggregateOptions exchange = s.cfg.comm.exchange;
    if (s.group) exchange.nodes = s.group->nodes();
    s.train_step.emplace(*s.net, *s.optimizer, s.ema ? &*s.ema : nullptr, s.cfg.train.weight_decay,
                         s.seed, s.compressor.get(), s.step_comm ? &*s.step_comm : nullptr,
                         s.cfg.comm.reducer, exchange);
    if (options.gradient_hook) s.train_step->set_gradient_hook(options.gradient_hook);
    if (s.group)
      s.say("gradients in " +
            plural(static_cast<int64_t>(s.train_step->buckets().size()), "bucket") +
            " (comm.bucket_mb = " + json::number(s.cfg.comm.reducer.bucket_mb) + "), exchanged " +
            (s.train_step->overlapped() ? "while backward runs" : "after backward"));
    s.time_every_step = s.group != nullptr || s.device.is_cpu();
  });
}

Trainer::~Trainer() = default;

TrainSummary Trainer::run() {
  State& s = *s_;
  return s.guarded([&] {
    StopSignals stop_signals;
    bool stopped = false;
    if (s.listener) s.listener->started(s.step);
    while (s.step < s.cfg.train.iterations)
      if (s.step_once()) {
        stopped = true;
        break;
      }
    if (s.listener) s.listener->finished();
    s.save();

    TrainSummary sum;
    sum.interrupted = stopped;
    if (!stopped) {
      sum.test = s.evaluate();
      sum.eval_weights = s.ema ? "ema" : "raw";
    }
    sum.num_classes = s.net->info().num_classes;
    sum.iterations = s.step;
    sum.start_iteration = s.start_step;
    sum.restarts = s.opt.restarts;
    sum.train_loss = s.last_loss;
    sum.images_per_sec = s.images / std::max(s.train_seconds, 1e-9);
    sum.train_seconds = s.train_seconds;
    sum.workers = s.workers;
    sum.compression = enum_name(tern::kMethods, s.cfg.compression.method);
    sum.processes = s.world;
    sum.workers_per_process = s.local_workers;
    sum.threads_per_process = s.threads.count;
    sum.threads_from = s.threads.why;
    sum.loader_threads = s.loader_threads.count;
    sum.loader_threads_from = s.loader_threads.why;
    if (s.group) {
      sum.distributed = true;
      sum.comm_backend = s.group->comm().backend();
      sum.comm_algorithm = enum_name(tern::kAlgorithms, s.cfg.comm.exchange.algorithm);
      sum.nodes = s.group->nodes();
      sum.nodes_from = s.group->nodes_from();
      for (const tern::AggregateStats& b : s.train_step->last_buckets())
        sum.bucket_routes.emplace_back(b.ternary_path     ? tern::name(b.bucket_route)
                                       : b.routes.empty() ? "none"
                                                          : tern::name(b.routes.front()));
      sum.rendezvous = comm::redact_store_url(s.opt.rank.rendezvous);
      sum.comm_authenticated = s.group && !s.group->secret_source().empty();
      sum.sched_batch = s.sched_batch;
      sum.buckets = static_cast<int64_t>(s.train_step->buckets().size());
      sum.overlap = s.train_step->overlapped();
    }
    // What one worker's message holds per iteration: the message plus the shared scalers it
    // contributes (4 bytes each); fp32 is the uncompressed gradient.
    sum.fp32_bytes_per_worker_per_iter = static_cast<uint64_t>(s.params.numel()) * sizeof(float);
    sum.payload_bytes_per_worker_per_iter =
        s.compressor ? s.compressor->payload_bytes(std::max<int64_t>(s.step - 1, 0)) +
                           static_cast<uint64_t>(s.compressor->num_meta()) * sizeof(float)
                     : sum.fp32_bytes_per_worker_per_iter;
    sum.per_iter = s.run_totals.per_iter(s.group.get(), s.workers);
    sum.device = s.device.str();
    sum.device_name = s.device.is_cuda() ? cuda::device_name(s.device.index) : cpu_model_name();
    sum.cpu = cpu_numerics();
    if (s.device.is_cuda()) sum.conv_algorithms = conv2d_choices();
    sum.model = s.cfg.model.name;
    sum.num_params = s.net->arena().total_numel();
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    sum.peak_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
    sum.planned_peak_mb = static_cast<double>(s.planned_peak) / (1024.0 * 1024.0);
    sum.params_sha256 = params_sha256(s.params);
    sum.skip_bad_files = s.cfg.data.dataset.skip_bad_files;
    if (sum.skip_bad_files) {
      data::BadFiles bad = s.note_bad_files();
      sum.bad_files_replaced = bad.replaced;
      sum.bad_files = std::move(bad.files);
    }
    if (s.ema) sum.ema_sha256 = params_sha256(s.ema->shadow());
    sum.config = s.cfg;
    sum.wall_seconds = seconds_since(s.t_start);
    if (s.lead && !s.opt.out_dir.empty() && !stopped)
      write_file_atomic((fs::path(s.opt.out_dir) / kSummaryName).string(), to_json(sum) + "\n");
    return sum;
  });
}

void Trainer::step() {
  State& s = *s_;
  TG_CHECK(s.step < s.cfg.train.iterations, "train: all ", s.cfg.train.iterations,
           " iterations are done");
  s.guarded([&] { s.step_once(); });
}

EvalResult Trainer::evaluate() {
  return s_->guarded([&] { return s_->evaluate(); });
}

void Trainer::save() {
  s_->guarded([&] { s_->save(); });
}

void Trainer::restore(const Checkpoint& ckpt) {
  s_->restore(ckpt);
}

int64_t Trainer::iteration() const {
  return s_->step;
}
bool Trainer::finished() const {
  return s_->step >= s_->cfg.train.iterations;
}
Net& Trainer::net() {
  return *s_->net;
}
const Config& Trainer::config() const {
  return s_->cfg;
}

}  // namespace tg::train
