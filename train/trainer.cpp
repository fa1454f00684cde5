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
#include "train/input.h"
#include "train/memory_plan.h"
#include "train/options.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/tensorboard.h"
#include "train/threads.h"

namespace tg::train {

namespace fs = std::filesystem;
using comm::ProcessGroup;

namespace {

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

// Where this process stands in the run.
struct Placement {
  int world = 1, rank = 0;
  bool lead = true;  // rank 0: writes the output, logs
  Device device;
  int workers = 1, local_workers = 1, first_worker = 0;  // N over all processes; this rank's
  bool distributed = false;                              // a process group is joined
};

// How far the run has come, and the sums its log and summary report.
struct Progress {
  int64_t step = 0, start_step = 0;
  // Sum over this rank's workers of loss / N over the current log window (a group sums it over
  // ranks when it logs).
  Tensor loss_sum;
  int64_t window_steps = 0;
  StepTotals window_totals, run_totals;
  double train_seconds = 0.0;
  int64_t images = 0;
  double last_loss = NAN;
  Clock::time_point last_save = Clock::now();
};

}  // namespace

// The run, by concern: the config and the options it was started with; this process's place
// (Placement); the output directory and --resume (RunDirectory); the data (TrainInput); the net,
// optimizer, EMA and compressor (RunParts, train/options.h) with the schedule; the process group
// and the thread counts; the step itself (TrainStep); how far it has come (Progress) and its log
// (RunLog).
struct Trainer::State {
  Config cfg;
  TrainOptions opt;
  TrainListener* listener = nullptr;  // rank 0's; null elsewhere
  Clock::time_point t_start = Clock::now();
  Placement at;
  uint64_t seed = 0;

  std::optional<RunDirectory> out;
  std::optional<TrainInput> input;
  RunParts model;
  std::optional<LrSchedule> schedule;
  Tensor params;  // the net's parameters, one tensor

  std::unique_ptr<ProcessGroup> group;
  std::optional<StepComm> step_comm;
  std::chrono::milliseconds post_mortem_window{1000};
  bool sched_batch = false;  // this rank's threads run under SCHED_BATCH (comm.sched_batch)
  ThreadChoice threads;
  int64_t planned_peak = 0;  // bytes (train/memory_plan.h); 0 = not planned (GPU runs)

  std::optional<TrainStep> train_step;
  // Phase times need the device synchronized between phases: always on the CPU (free) and in a
  // group (the collectives synchronize anyway); one process on a GPU times only logged steps,
  // so the steps between them stay overlapped.
  bool time_every_step = true;
  Progress progress;
  RunLog metrics;
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
  TrainInput::Say sayer() const {
    return [this](const std::string& line) { say(line); };
  }
  void build();
  void resume();
  void join_group();
  void check_memory();
  bool step_once();  // true when a stop was requested on any rank
  EvalResult evaluate();
  void save();
  void restore(const Checkpoint& ckpt);
};

// Data, model, optimizer, schedule, compressor, EMA.
void Trainer::State::build() {
  // The data first: a batch it cannot fill is refused before the net is built.
  input.emplace(cfg, sayer());
  // --resume with a checkpoint to read: resume() overwrites every parameter (or throws when none
  // loads), so the random initial values would be drawn for nothing.
  model = build_run(cfg, at.device, input->train_size(), /*initialize=*/!out->has_candidates());
  check_compatible(*model.net, input->train());
  check_compatible(*model.net, input->test());
  schedule.emplace(lr_schedule_options(cfg, input->train_size()));
  params = model.net->arena().params();
  progress.loss_sum = Tensor::zeros({}, DType::f32, at.device);
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
  if (model.ema) {
    Tensor shadow = model.ema->shadow();
    const Tensor& e = ckpt.get("ema");
    TG_CHECK(e.numel() == params.numel(), src, ": has ", e.numel(), " EMA values, model '",
             cfg.model.name, "' has ", params.numel(), " parameters");
    if (e.raw_data() != shadow.raw_data()) shadow.copy_from(e.view(params.shape()));
  }
  std::vector<std::pair<std::string, Tensor>> ostate;
  for (const auto& [name, t] : ckpt.tensors)
    if (name.rfind("optim/", 0) == 0) ostate.emplace_back(name.substr(6), t);
  if (!ostate.empty()) model.optimizer->load_state(ostate);
  for (const auto& [name, t] : model.net->buffers()) {
    const Tensor& b = ckpt.get("buffer/" + name);
    TG_CHECK(b.shape() == t.shape(), src, ": buffer '", name, "' has the wrong shape");
    Tensor dst = t;
    dst.copy_from(b);
  }
  load_compressor_state(ckpt, model.compressor.get(), at.workers);
  // The saved window sum is over all ranks: rank 0 carries it on.
  if (at.lead)
    progress.loss_sum.copy_from(ckpt.get("log/loss_sum"));
  else
    progress.loss_sum.zero_();
  progress.window_steps = ckpt.get("log/window_steps").item<int64_t>();
  progress.step = progress.start_step = ckpt.step;
  out->restored(src, progress.step);
}

// --resume: restores the newest checkpoint that loads whole (digest verified), falling back past
// damaged ones; none at all starts from iteration 0. Every rank reads the same files in the same
// order, so all restore the same one (the rendezvous compares their start iterations). The
// parameters and the EMA shadow are read straight into the run's own tensors (on the CPU);
// everything else is restored from the loaded copy, which is then dropped.
void Trainer::State::resume() {
  const std::optional<Checkpoint> ckpt = out->load_newest(
      [&](const std::string& name, DType, const Shape&) -> Tensor {
        if (name == "params") return params;
        if (name == "ema" && model.ema) return model.ema->shadow();
        return {};
      },
      sayer());
  if (!ckpt) return;
  restore(*ckpt);
  say("--resume: continuing from " + ckpt->source + " (iteration " + std::to_string(progress.step) +
      ")");
}

// A process group for P > 1, and for P = 1 when a rendezvous is named (--rank 0 --world-size 1
// --rendezvous URL): the one-rank run then goes through the real communicator (NCCL on a
// one-GPU machine), which one process otherwise never touches. Then the thread count: one that
// does not oversubscribe the cores (the results do not depend on it, the speed does).
void Trainer::State::join_group() {
  if (at.distributed) {
    comm::RunIdentity run;
    run.fingerprint = config_fingerprint(cfg);
    run.start_step = progress.start_step;
    run.explain = config::config_diff;
    group = std::make_unique<ProcessGroup>(opt.rank, opt.job_id, cfg.comm.group, at.device, run);
    StepComm sc;
    sc.comm = &group->comm();
    sc.first_worker = at.first_worker;
    sc.total_workers = at.workers;
    step_comm = sc;
  }
  threads = choose_threads(opt.threads, group ? group->local_sharing() : 1);
  omp_set_num_threads(threads.count);
  if (!at.device.is_cuda() || group)
    say(plural(threads.count, "CPU thread") + " per process (" + threads.why + ")");
  if (group) {
    say(std::to_string(at.world) + " processes (" + group->comm().backend() + ", rendezvous " +
        comm::redact_store_url(opt.rank.rendezvous) + ", from " + opt.rank.source + "), " +
        plural(at.local_workers, "worker") + " each");
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
  if (!at.device.is_cpu()) return;
  MemoryPlan plan;
  plan.images_per_worker = (cfg.train.batch_size + at.workers - 1) / at.workers;
  // Evaluation's largest batch: at most the examples it reads (data.eval_limit, the test split).
  const int64_t test_size = input->test_size();
  const int64_t eval_n =
      cfg.data.eval_limit > 0 ? std::min(cfg.data.eval_limit, test_size) : test_size;
  plan.eval_batch = std::max<int64_t>(1, std::min(cfg.data.eval_batch_size, eval_n));
  const ActivationBytes train = probe_training_activations(*model.net);
  const ActivationBytes eval = probe_eval_activations(*model.net);
  plan.train_activations = train.at(plan.images_per_worker);
  plan.eval_activations = eval.at(plan.eval_batch);
  plan.workspace = conv_workspace_bytes(train, plan.images_per_worker, eval, plan.eval_batch);
  // What is resident now holds what the probes allocated for good (the parameter gradients,
  // BLAS's buffers) but not the blocks they let go of.
  allocator_for(at.device).empty_cache();
  plan.resident = std::max<int64_t>(0, resident_bytes());
  const int64_t param_bytes = params.numel() * static_cast<int64_t>(sizeof(float));
  // The workers' gradients the exchange reads and their sum (the net's own is resident already:
  // W copies), the exchange's buffers (about one more), and the residuals of error feedback.
  if (model.compressor) plan.gradients = (at.local_workers + 1) * param_bytes;
  if (cfg.compression.error_feedback || cfg.compression.method == tern::Method::onebit)
    plan.gradients += at.local_workers * param_bytes;
  const std::string& opt_name = cfg.train.optimizer.name;
  plan.optimizer = opt_name == "adam" ? 2 * param_bytes : opt_name == "momentum" ? param_bytes : 0;
  const auto& in = model.net->info();
  const int64_t image_bytes =
      in.in_channels * in.image_size * in.image_size * static_cast<int64_t>(sizeof(float));
  const int64_t threads = cfg.data.loader_threads > 0 ? cfg.data.loader_threads : 2;
  plan.input =
      (cfg.data.prefetch + threads) * at.local_workers * plan.images_per_worker * image_bytes;
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

EvalResult Trainer::State::evaluate() {
  Net& net = *model.net;
  // Batch-norm moving statistics follow rank 0's (each rank updates them with its own workers'
  // batches; as PyTorch DDP's broadcast_buffers, rank 0's are the model's).
  if (group)
    for (const auto& [name, t] : net.buffers()) {
      Tensor b = t;
      group->broadcast(b, 0);
    }
  EmaWeights swap(net, model.ema ? &*model.ema : nullptr);
  EvalResult r = tg::train::evaluate(net, input->test(), cfg.data.eval_batch_size,
                                     cfg.data.eval_limit, at.rank, group ? at.world : 1);
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
  metrics.write(eval_record(r, progress.step, net.info().num_classes, model.ema ? "ema" : "raw"));
  if (listener) listener->evaluated(progress.step, r, model.ema.has_value());
  return r;
}

void Trainer::State::save() {
  progress.last_save = Clock::now();
  CheckpointFiles* files = out->files();
  if (!group && !files) return;
  Checkpoint c;
  // Collective parts first, on every rank, whether or not this rank writes.
  if (model.compressor)
    add_all_compressor_state(c, *model.compressor, at.workers, group.get(), at.first_worker,
                             at.local_workers);
  Tensor window_loss = progress.loss_sum;
  if (group) {
    const double l = group->sum({static_cast<double>(progress.loss_sum.item<float>())})[0];
    window_loss = Tensor::from_vector(std::vector<float>{static_cast<float>(l)}, {});
  }
  if (!at.lead || !files) return;
  c.step = progress.step;
  c.net = cfg.model.name;
  c.config_toml = to_toml(cfg);
  c.tensors.emplace_back("params", params);
  if (model.ema) c.tensors.emplace_back("ema", model.ema->shadow());
  for (auto& [name, t] : model.optimizer->state()) c.tensors.emplace_back("optim/" + name, t);
  for (const auto& [name, t] : model.net->buffers()) c.tensors.emplace_back("buffer/" + name, t);
  c.tensors.emplace_back("log/loss_sum", window_loss);
  c.tensors.emplace_back("log/window_steps",
                         Tensor::from_vector(std::vector<int64_t>{progress.window_steps}, {1}));
  files->save(c);
}

bool Trainer::State::step_once() {
  const auto& tc = cfg.train;
  Progress& p = progress;
  const auto t0 = Clock::now();
  const double lr = (*schedule)(p.step);
  const int64_t done = p.step + 1;
  const bool log_now = done % tc.log_every == 0 || done == tc.iterations;
  // On a GPU the next step's copy runs on the copy stream beside this step's compute.
  std::vector<HostBatch> batches = input->get(p.step, tc.iterations);
  const comm::WireBytes wire0 = group ? group->comm().wire() : comm::WireBytes{};
  StepTimes times;
  const bool timed = time_every_step || log_now;
  train_step->run(batches, p.step, lr, p.loss_sum, timed ? &times : nullptr);
  // How the gradients travelled (comm.algorithm = auto picks per call by the byte cost model):
  // said once, and again whenever the route changes (e.g. a floating-gradient epoch).
  if (group) {
    const std::string route = tern::describe_route(train_step->last_buckets());
    if (route != last_route) {
      say("iteration " + std::to_string(p.step) + ": gradients travel as " + route + " (" +
          tern::describe(train_step->last_buckets()) + ")");
      last_route = route;
    }
  }
  // The GPU's convolution algorithms, once every pass of the net has run (after the first step).
  if (at.device.is_cuda() && conv_said < conv2d_choice_count()) {
    const auto choices = conv2d_choices();
    for (; conv_said < choices.size(); ++conv_said)
      say("conv " + choices[conv_said].first + ": " + choices[conv_said].second +
          " (cuda.conv_algo = " + cfg.cuda.conv_algo + ")");
  }
  // Every rank stops at the same step: a signal on any rank stops them all. A checkpoint that is
  // due by time is rank 0's call (one clock for all), carried by the same collective.
  const bool time_due = at.lead && tc.checkpoint_minutes > 0 &&
                        seconds_since(p.last_save) >= tc.checkpoint_minutes * 60.0;
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
  for (StepTotals* t : {&p.window_totals, &p.run_totals}) {
    t->add_step(wire1.sent - wire0.sent, wire1.received - wire0.received);
    t->add_inter(inter);
    if (timed) t->add_times(times);
  }
  ++p.window_steps;
  p.step = done;
  // The GPU may run a few steps behind the host; waiting for it only at log steps keeps the
  // steps in between overlapped, and the time it was behind lands in the step that waits.
  if (log_now && at.device.is_cuda()) cuda::synchronize(at.device.index);
  p.train_seconds += seconds_since(t0);
  p.images += tc.batch_size;
  const double ips = p.images / std::max(p.train_seconds, 1e-9);
  if (listener) listener->stepped(done, ips);

  if (log_now) {
    double window_loss = p.loss_sum.item<float>();
    if (group) window_loss = group->sum({window_loss})[0];
    p.last_loss = window_loss / static_cast<double>(p.window_steps);
    const IterationCost cost = p.window_totals.per_iter(group.get(), at.workers);
    const double reg = regularization_loss(*model.net, tc.weight_decay);
    Record o("train", done);
    o.add("loss", p.last_loss).add("reg_loss", reg);
    o.add("lr", lr).add("epoch", input->sampler().epoch(done));
    o.add("images_per_sec", ips);
    for (const auto& [key, value] : iteration_cost_fields(cost)) o.add(key, value);
    o.add("wall_seconds", seconds_since(t_start));
    if (cfg.data.dataset.skip_bad_files)
      o.add("bad_files_replaced", input->note_bad_files(at.rank, group.get(), sayer()).replaced);
    metrics.write(o);
    if (listener) listener->logged(done, p.last_loss, lr, ips);
    p.loss_sum.zero_();
    p.window_steps = 0;
    p.window_totals = StepTotals{};
  }
  if (tc.eval_every > 0 && done % tc.eval_every == 0 && done != tc.iterations) evaluate();
  const bool save_by_count = tc.checkpoint_every > 0 && done % tc.checkpoint_every == 0;
  if ((save_by_count || save_by_time) && done != tc.iterations && !stop_now) save();
  return stop_now;
}

Trainer::Trainer(const Config& config, const TrainOptions& options)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  Placement& at = s.at;
  s.cfg = config;
  s.opt = options;
  at.world = options.rank.world_size;
  at.rank = options.rank.rank;
  at.lead = at.rank == 0;
  s.listener = at.lead ? options.listener : nullptr;
  TG_CHECK(at.world >= 1 && at.rank >= 0 && at.rank < at.world, "train: rank ", at.rank, " of ",
           at.world, " is out of range");
  at.device = comm::rank_device(s.cfg.device, at.rank, at.world);
  check_device_usable(at.device);
  apply_cuda_options(s.cfg.cuda);  // process-wide; the conv choices record starts empty
  at.workers = static_cast<int>(s.cfg.workers.count);
  TG_CHECK(at.workers % at.world == 0, "workers.count = ", at.workers, " cannot be spread over ",
           at.world,
           " processes: each process hosts workers.count / P workers, so workers.count must be a "
           "multiple of the number of processes");
  at.local_workers = at.workers / at.world;
  at.first_worker = at.rank * at.local_workers;
  s.seed = static_cast<uint64_t>(s.cfg.train.seed);
  at.distributed = at.world > 1 || !options.rank.rendezvous.empty();
  if (at.distributed)
    comm::resolve_backend(s.cfg.comm.group.backend, at.device);  // before any work

  // The output directory, and the checkpoint to resume from: rank 0 writes; every rank reads.
  s.out.emplace(options.out_dir, s.cfg.train.keep_checkpoints, options.resume, at.lead, s.sayer());
  if (options.resume) s.out->check_resume_config(s.cfg);  // before anything is built
  if (!at.lead) s.out->stop_writing();
  s.build();
  const bool resumed = options.resume;
  if (resumed) s.resume();
  s.join_group();
  s.post_mortem_window = std::chrono::milliseconds(
      static_cast<int64_t>(std::clamp(s.cfg.comm.group.timeout / 4.0, 1.0, 10.0) * 1000.0));
  s.guarded([&] {
    s.check_memory();
    s.out->set_aside_damaged(s.sayer());
    if (at.lead && !options.out_dir.empty()) {
      write_file_atomic((fs::path(options.out_dir) / kConfigName).string(), to_toml(s.cfg));
      s.metrics.open(options.out_dir, s.cfg.train.tensorboard,
                     resumed ? s.progress.start_step : -1);
    }
    // This rank's workers' slices of each global batch, loaded data.prefetch steps ahead.
    s.input->start(s.cfg, at.device, at.first_worker, at.local_workers, at.workers,
                   s.group ? s.group->local_sharing() : 1, s.sayer());
    // The exchange learns the node layout from the process group (not a config key).
    tern::AggregateOptions exchange = s.cfg.comm.exchange;
    if (s.group) exchange.nodes = s.group->nodes();
    RunParts& m = s.model;
    s.train_step.emplace(*m.net, *m.optimizer, m.ema ? &*m.ema : nullptr, s.cfg.train.weight_decay,
                         s.seed, m.compressor.get(), s.step_comm ? &*s.step_comm : nullptr,
                         s.cfg.comm.reducer, exchange);
    if (options.gradient_hook) s.train_step->set_gradient_hook(options.gradient_hook);
    if (s.group)
      s.say("gradients in " +
            plural(static_cast<int64_t>(s.train_step->buckets().size()), "bucket") +
            " (comm.bucket_mb = " + json::number(s.cfg.comm.reducer.bucket_mb) + "), exchanged " +
            (s.train_step->overlapped() ? "while backward runs" : "after backward"));
    s.time_every_step = s.group != nullptr || at.device.is_cpu();
  });
}

Trainer::~Trainer() = default;

TrainSummary Trainer::run() {
  State& s = *s_;
  return s.guarded([&] {
    StopSignals stop_signals;
    bool stopped = false;
    if (s.listener) s.listener->started(s.progress.step);
    while (s.progress.step < s.cfg.train.iterations)
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
      sum.eval_weights = s.model.ema ? "ema" : "raw";
    }
    sum.num_classes = s.model.net->info().num_classes;
    sum.iterations = s.progress.step;
    sum.start_iteration = s.progress.start_step;
    sum.restarts = s.opt.restarts;
    sum.train_loss = s.progress.last_loss;
    sum.images_per_sec = s.progress.images / std::max(s.progress.train_seconds, 1e-9);
    sum.train_seconds = s.progress.train_seconds;
    sum.workers = s.at.workers;
    sum.compression = enum_name(tern::kMethods, s.cfg.compression.method);
    sum.processes = s.at.world;
    sum.workers_per_process = s.at.local_workers;
    sum.threads_per_process = s.threads.count;
    sum.threads_from = s.threads.why;
    sum.loader_threads = s.input->loader_threads().count;
    sum.loader_threads_from = s.input->loader_threads().why;
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
        s.model.compressor
            ? s.model.compressor->payload_bytes(std::max<int64_t>(s.progress.step - 1, 0)) +
                  static_cast<uint64_t>(s.model.compressor->num_meta()) * sizeof(float)
            : sum.fp32_bytes_per_worker_per_iter;
    sum.per_iter = s.progress.run_totals.per_iter(s.group.get(), s.at.workers);
    sum.device = s.at.device.str();
    sum.device_name =
        s.at.device.is_cuda() ? cuda::device_name(s.at.device.index) : cpu_model_name();
    sum.cpu = cpu_numerics();
    if (s.at.device.is_cuda()) sum.conv_algorithms = conv2d_choices();
    sum.model = s.cfg.model.name;
    sum.num_params = s.model.net->arena().total_numel();
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    sum.peak_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
    sum.planned_peak_mb = static_cast<double>(s.planned_peak) / (1024.0 * 1024.0);
    sum.params_sha256 = params_sha256(s.params);
    sum.skip_bad_files = s.cfg.data.dataset.skip_bad_files;
    if (sum.skip_bad_files) {
      data::BadFiles bad = s.input->note_bad_files(s.at.rank, s.group.get(), s.sayer());
      sum.bad_files_replaced = bad.replaced;
      sum.bad_files = std::move(bad.files);
    }
    if (s.model.ema) sum.ema_sha256 = params_sha256(s.model.ema->shadow());
    sum.config = s.cfg;
    sum.wall_seconds = seconds_since(s.t_start);
    if (s.at.lead && !s.opt.out_dir.empty() && !stopped)
      write_file_atomic((fs::path(s.opt.out_dir) / kSummaryName).string(), to_json(sum) + "\n");
    return sum;
  });
}

void Trainer::step() {
  State& s = *s_;
  TG_CHECK(s.progress.step < s.cfg.train.iterations, "train: all ", s.cfg.train.iterations,
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
  return s_->progress.step;
}
bool Trainer::finished() const {
  return s_->progress.step >= s_->cfg.train.iterations;
}
Net& Trainer::net() {
  return *s_->model.net;
}
const Config& Trainer::config() const {
  return s_->cfg;
}

}  // namespace tg::train
