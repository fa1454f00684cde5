// Training throughput of the paper's networks: one full iteration (forward, backward, gradient
// aggregation through the compressor, weight decay + optimizer + EMA) exactly as `terngrad train`
// runs it (train/step.h TrainStep, built from the same config defaults and the trainer's
// compression_options()/grad_layout()), with the split per phase and per layer, and the run's
// GEMM rate as a fraction of this machine's large-matrix sgemm rate measured in the same process
// (which makes figures comparable across machines).
//
// Targets (issue 3): CPU LeNet batch 64 >= 2,500 img/s, CifarNet batch 128 >= 1,500 img/s;
// GPU LeNet/CifarNet no slower than PyTorch eager, AlexNet (batch 128) within 1.5x.
// Issue 4 (item 7): the share of a LeNet and an AlexNet training step spent in compression.
//
// Phases (StepTimes, medians over the timed steps; the device is synchronized between phases):
//   transfer  per worker: zero the arena's gradient + copy its batch slice to the device
//   forward   per worker: forward + loss
//   backward  per worker: backward + weight decay (+ the copy of the gradient into that worker's
//             flat buffer when a compressor runs)
//   compress  tern::aggregate over the group of one (the N workers emulated), i.e. everything
//   between
//             "N gradients" and "the averaged gradient in the arena": round 1 local_meta per
//             worker (TernGrad: tensor_stats per tensor -> scaler candidate, max-shared);
//             allocating/zeroing the accumulator (i32 + f32 [params]) and one message buffer;
//             per worker encode (ternarize + pack with Philox; fp16/qsgd/onebit pack; none: a
//             copy) and accumulate (unpack into the integer code sums / float axpy); finalize
//             (zero + axpy of the float part, scale the integer sums by s / N). The N workers run
//             one after another, so with N > 1 this is N encodes + N decodes on one core set; on
//             a real cluster each worker encodes its own message in parallel. With one worker
//             and method none there is no compressor at all (compress = 0, no copies), as in
//             `terngrad train`; one worker with a method still runs all rounds (its
//             quantization cost).
//   update    optimizer step on the flat arena + EMA update.
// compress_share = compress / step (median over steps of the per-step ratio). When a compressor
// runs, the rounds are also re-timed one by one on the last step's gradient (each worker's
// message built from that same gradient): "meta", "alloc", "encode", "accumulate", "finalize".
// Payload: what one worker sends per iteration (message + 4 bytes per shared scaler), as in
// summary.json; fp32 bytes = 4 * params.
//
// Usage: bench_train [--device cpu|cuda] [--net NAME --batch N] [--seconds S]
//                    [--compression none|fp16|terngrad|qsgd|onebit] [--workers N]
//                    [--set section.key=value ...]
// --set passes config overrides to every case, as `terngrad train --set` (the GPU check: cuda.*
// keys; a bad key or value is refused naming it before anything runs).
//        bench_train --compression-share [--device D] [--seconds S]
// --workers N emulates N workers on the total batch --batch (each takes batch / N images, as
// `terngrad train` with workers.count = N). TernGrad uses the paper's defaults of the config:
// clip 2.5 (scaler 2.5 sigma), scaler_sharing max, two_bit pack, every tensor quantized.
// --compression-share runs the two cases issue 4 names: LeNet batch 64 (28x28x1) and AlexNet
// batch 128 (224x224x3, 1001 classes, 61.0 M params, paper/configs/alexnet_imagenet.toml), each
// with none and terngrad at 1 and 2 workers (8 cases; synthetic data). AlexNet runs 1 warm-up,
// >= 3 timed and 1 profiled step per case (--seconds 1.5, the default in this mode). On 2 Zen 4
// EPYC cores + OpenBLAS shared with another training run (sgemm yardstick ~105 instead of ~440
// GFLOP/s) the whole mode took 3.0-3.6 minutes, 90% of it AlexNet (5-15 s per step), peak RSS
// 5.3 GB; on an idle machine expect roughly half that.
// Output: JSON lines on stdout ("kind": "step" per case, "layer" per layer, "compress_split"
// per compressed case), a table on stderr.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "config/config.h"
#include "datasets/dataset.h"
#include "datasets/device_stager.h"
#include "datasets/pipeline.h"
#include "nn/core/blas.h"
#include "nn/core/cpu_env.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "nn/core/profile.h"
#include "nn/init/init.h"
#include "nn/ops/conv2d_kernels.h"
#include "nn/ops/cuda_options.h"
#include "terngrad/compressor.h"
#include "train/options.h"
#include "train/step.h"

namespace tg::bench {
namespace {

struct Case {
  std::string net;
  int64_t batch = 64;  // total over all workers
  std::string compression = "none";
  int64_t workers = 1;
  // Repetitions: warm-up steps, at least min_steps timed steps (more until `seconds` pass),
  // profiled steps for the per-layer split.
  int warmup = 3, min_steps = 5, profiled = 5;
  std::vector<std::string> sets{};  // --set overrides (e.g. cuda.conv_algo=igemm, cuda.tf32=true)
};

// The machine's large-matrix sgemm rate (GFLOP/s) on `dev`: the yardstick.
double sgemm_gflops(const Device& dev) {
  const int64_t n = 2048;
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n});
  init::uniform_(a, -1.f, 1.f, 1, 1);
  init::uniform_(b, -1.f, 1.f, 1, 2);
  a = a.to(dev);
  b = b.to(dev);
  Tensor c = Tensor::zeros({n, n}, DType::f32, dev);
  const GemmArgs g = dense_gemm(Trans::N, Trans::N, n, n, n, 1.0f, a.data<float>(), b.data<float>(),
                                0.0f, c.data<float>());
  Timing t = time_it([&] { gemm(dev, g); },
                     [&] {
                       if (dev.is_cuda()) cuda::synchronize(dev.index);
                     },
                     0.5);
  return 2.0 * n * n * n / (t.median_ms * 1e-3) / 1e9;
}

// The run configuration `terngrad train` would resolve for this case (config defaults: momentum
// 0.9, weight decay 5e-4, EMA 0.9999, seed 123, TernGrad clip 2.5 / max sharing / two_bit).
config::Config case_config(const Case& c, const Device& dev) {
  std::vector<std::string> o{"model.name=" + c.net, "train.batch_size=" + std::to_string(c.batch),
                             "workers.count=" + std::to_string(c.workers),
                             "compression.method=" + c.compression, "device=" + dev.str()};
  o.insert(o.end(), c.sets.begin(), c.sets.end());
  return config::default_config(o);
}

// Re-times the rounds of the one-process aggregation (terngrad/exchange/aggregate.h: the generic
// path's fold at P = 1) one by one, each worker's message built from `g`; after one warm-up,
// medians over `reps` in ms: meta, alloc, encode, accumulate, finalize.
std::vector<double> time_compress_rounds(tern::Compressor& comp, const Tensor& g, int workers,
                                         int64_t step, int reps) {
  const Device d = g.device();
  auto sync = [&] {
    if (d.is_cuda()) cuda::synchronize(d.index);
  };
  std::vector<std::vector<double>> ms(5);
  Tensor out = Tensor::empty({g.numel()}, DType::f32, d);
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up (first touch of the buffers)
    sync();
    Stopwatch clock;
    auto lap = [&](int i) {
      sync();
      ms[i].push_back(clock.lap_ms());
    };
    std::vector<float> shared(static_cast<size_t>(comp.num_meta()), 0.0f), meta(shared.size());
    for (int w = 0; w < workers; ++w) {
      comp.local_meta(g, meta.data());
      for (size_t i = 0; i < meta.size(); ++i)
        shared[i] = w == 0 ? meta[i] : std::max(shared[i], meta[i]);
    }
    lap(0);
    tern::Accumulator acc = comp.make_accumulator(d);
    Tensor msg = Tensor::empty({static_cast<int64_t>(comp.payload_bytes(step))}, DType::u8, d);
    lap(1);
    double enc = 0, accu = 0;
    for (int w = 0; w < workers; ++w) {
      comp.encode(g, shared.data(), step, w, msg);
      sync();
      enc += clock.lap_ms();
      comp.accumulate(msg, shared.data(), step, acc);
      sync();
      accu += clock.lap_ms();
    }
    ms[2].push_back(enc);
    ms[3].push_back(accu);
    comp.finalize(acc, shared.data(), step, workers, out);
    lap(4);
    if (r < 0)
      for (auto& v : ms) v.clear();
  }
  std::vector<double> med;
  for (auto& v : ms) med.push_back(median(v));
  return med;
}

// One synthetic batch per worker in the net's input shape (each batch / workers images); the
// data phase is timed separately with the synthetic dataset (real loaders are benchmarked by
// their own tests' budgets).
std::vector<train::HostBatch> synthetic_batches(const Case& c, const NetInfo& info) {
  const int64_t per_worker = c.batch / c.workers;
  std::vector<train::HostBatch> batches;
  for (int64_t w = 0; w < c.workers; ++w) {
    train::HostBatch hb;
    hb.x = Tensor::empty({per_worker, info.in_channels, info.image_size, info.image_size});
    init::normal_(hb.x, 0.f, 1.f, 7, rng_stream(RngPurpose::data, static_cast<uint64_t>(w)));
    std::vector<int32_t> labels(per_worker);
    for (int64_t i = 0; i < per_worker; ++i)
      labels[i] = static_cast<int32_t>((w * per_worker + i) % info.num_classes);
    hb.y = Tensor::from_vector(labels, {per_worker});
    batches.push_back(hb);
  }
  return batches;
}

// Median ms of loading one augmented batch of the synthetic dataset.
double time_data_load(const Case& c, const NetInfo& info, const data::Dataset& ds) {
  Tensor lx = Tensor::empty({c.batch, info.in_channels, info.image_size, info.image_size});
  Tensor ly = Tensor::empty({c.batch}, DType::i32);
  std::vector<int64_t> idx(c.batch);
  for (int64_t i = 0; i < c.batch; ++i) idx[i] = i;
  const int load_reps = info.image_size >= 128 ? 2 : 5;
  return time_it([&] { ds.load(idx, true, 1, 0, lx.data<float>(), ly.data<int32_t>()); }, [] {},
                 0.2, 1, load_reps)
      .median_ms;
}

// The phases of the timed steps, in seconds, one entry per step.
struct StepSamples {
  std::vector<double> total, fwd, bwd, cmp, upd, xfer, share;
};

StepSamples time_steps(train::TrainStep& step, const std::vector<train::HostBatch>& batches,
                       Tensor& loss_sum, int64_t& it, double seconds, int min_steps) {
  StepSamples s;
  double elapsed = 0;
  while (elapsed < seconds || static_cast<int>(s.total.size()) < min_steps) {
    train::StepTimes t;
    step.run(batches, it++, 0.01, loss_sum, &t);
    s.total.push_back(t.total());
    s.fwd.push_back(t.forward_s);
    s.bwd.push_back(t.backward_s);
    s.cmp.push_back(t.compress_s);
    s.upd.push_back(t.update_s);
    s.xfer.push_back(t.transfer_s);
    s.share.push_back(t.compress_s / t.total());
    elapsed += t.total();
  }
  return s;
}

// The compressor's rounds re-timed one by one (after the timed steps).
void print_compress_split(const Case& c, const Device& dev, tern::Compressor& comp, const Tensor& g,
                          int64_t it) {
  const std::vector<double> r =
      time_compress_rounds(comp, g, static_cast<int>(c.workers), it, std::max(c.profiled, 1));
  static const char* kRounds[] = {"meta_ms", "alloc_ms", "encode_ms", "accumulate_ms",
                                  "finalize_ms"};
  JsonLine l;
  l.add("kind", "compress_split").add("net", c.net).add("device", dev.str());
  l.add("workers", static_cast<long long>(c.workers)).add("compression", c.compression);
  for (size_t i = 0; i < r.size(); ++i) l.add(kRounds[i], r[i]);
  l.print();
  std::fprintf(stderr,
               "  compress rounds (re-timed): meta %.2f | alloc %.2f | encode %.2f | accumulate "
               "%.2f | finalize %.2f ms\n",
               r[0], r[1], r[2], r[3], r[4]);
}

// The profiled steps' split per layer.
void print_layers(const Case& c, const Device& dev) {
  const double ms = 1e3;
  std::fprintf(stderr, "  %-22s %10s %10s %8s\n", "layer", "fwd ms", "bwd ms", "share");
  double prof_total = 0;
  for (const auto& r : profile::rows()) prof_total += r.forward_s + r.backward_s;
  for (const auto& r : profile::rows()) {
    const double f = r.forward_s / c.profiled * ms, b = r.backward_s / c.profiled * ms;
    const std::string name = r.layer.empty() ? "(other)" : r.layer;
    const double s = prof_total > 0 ? (r.forward_s + r.backward_s) / prof_total : 0;
    std::fprintf(stderr, "  %-22s %10.3f %10.3f %7.1f%%\n", name.c_str(), f, b, 100 * s);
    JsonLine l;
    l.add("kind", "layer").add("net", c.net).add("device", dev.str());
    l.add("workers", static_cast<long long>(c.workers)).add("compression", c.compression);
    l.add("layer", name).add("forward_ms", f).add("backward_ms", b).add("share", s);
    l.print();
  }
}

// A dataset that serves the bench's fixed batch (worker 0's): loading is a memcpy, so the staged
// loop below measures the copy to the GPU, not the loader.
class Replay final : public data::Dataset {
 public:
  explicit Replay(const train::HostBatch& b) : b_(b) {
    const Shape& s = b.x.shape();
    info_.name = "replay";
    info_.size = s[0];
    info_.channels = s[1];
    info_.height = s[2];
    info_.width = s[3];
    info_.num_classes = 1 << 20;
  }
  void load(std::span<const int64_t> idx, bool, uint64_t, uint64_t, float* images,
            int32_t* labels) const override {
    const int64_t px = info_.channels * info_.height * info_.width;
    for (size_t i = 0; i < idx.size(); ++i) {
      std::memcpy(images + static_cast<int64_t>(i) * px, b_.x.data<float>() + idx[i] * px,
                  sizeof(float) * px);
      labels[i] = b_.y.data<int32_t>()[idx[i]];
    }
  }

 private:
  train::HostBatch b_;
};

struct StagedTimes {
  double pageable_gbps = 0, pinned_gbps = 0, step_ms = 0, exposed_copy_ms = 0;
};

// CUDA: the batch copy's rate from pageable and from page-locked memory (one worker's batch, best
// of 5), and steps fed as `terngrad train` feeds them with data.pin_memory (datasets/
// device_stager.h): each step's batches copied on the copy stream while the previous step runs.
// exposed_copy_ms is the median transfer phase there: what the step still waits for its input.
StagedTimes time_staged(train::TrainStep& step, const Case& c,
                        const std::vector<train::HostBatch>& batches, Tensor& loss_sum, int64_t& it,
                        double seconds, const Device& dev) {
  StagedTimes r;
  const Tensor& x = batches[0].x;
  const double gb = static_cast<double>(x.nbytes()) / 1e9;
  double best_pageable = 1e30, best_pinned = 1e30;
  std::shared_ptr<void> pinned = cuda::pinned_host(x.nbytes());
  std::memcpy(pinned.get(), x.raw_data(), x.nbytes());
  Tensor dst = Tensor::empty(x.shape(), DType::f32, dev);
  void* copy = cuda::copy_stream(dev.index);
  cuda::Event done(dev.index);
  for (int i = 0; i < 5; ++i) {
    cuda::synchronize(dev.index);
    Stopwatch a;
    Tensor t = x.to(dev);  // pageable, on the compute stream (returns when done)
    best_pageable = std::min(best_pageable, a.lap_ms());
    Stopwatch b;
    cuda::copy_h2d_async(dev.index, dst.raw_data(), pinned.get(), x.nbytes(), copy);
    done.record_on(copy);
    done.synchronize();
    best_pinned = std::min(best_pinned, b.lap_ms());
  }
  r.pageable_gbps = gb / (best_pageable * 1e-3);
  r.pinned_gbps = gb / (best_pinned * 1e-3);

  Replay replay(batches[0]);
  const int64_t per_worker = x.shape()[0];
  data::PipelineOptions po{4, 2, false, 0};
  po.allocate = data::DeviceStager::host_allocator();
  data::BatchPipeline pipeline(
      replay,
      [&](int64_t) {
        std::vector<data::BatchRequest> req(static_cast<size_t>(c.workers));
        for (auto& q : req)
          for (int64_t i = 0; i < per_worker; ++i) q.indices.push_back(i);
        return req;
      },
      po);
  data::DeviceStager stager(pipeline, dev);
  const int64_t first = it, end = it + 1000000;
  std::vector<double> total, xfer;
  double elapsed = 0;
  for (int64_t k = 0; k < 3 || elapsed < seconds || total.size() < 5; ++k) {
    const std::vector<train::HostBatch> staged = stager.get(it - first, end);
    stager.prefetch(it - first + 1, end);
    train::StepTimes t;
    step.run(staged, it++, 0.01, loss_sum, k >= 2 ? &t : nullptr);
    if (k < 2) continue;  // warm-up: the slots' first allocations and copies
    total.push_back(t.total());
    xfer.push_back(t.transfer_s);
    elapsed += t.total();
  }
  r.step_ms = median(total) * 1e3;
  r.exposed_copy_ms = median(xfer) * 1e3;
  return r;
}

void run_case(const Case& c, const Device& dev, double seconds, double sgemm) {
  const config::Config cfg = case_config(c, dev);
  apply_cuda_options(cfg.cuda);  // as the Trainer: conv policy and TF32 (autotune: in warm-up)
  // As the Trainer: the net, optimizer, EMA and compressor from the config (train/options.h).
  const int64_t train_size = std::max<int64_t>(c.batch, 1024);
  train::RunParts run = train::build_run(cfg, dev, train_size);
  Net* net = run.net.get();
  const NetInfo& info = net->info();

  data::DataOptions dopt;
  dopt.name = "synthetic";
  dopt.image_size = info.image_size;
  dopt.synthetic_channels = info.in_channels;
  dopt.synthetic_size = train_size;
  auto ds = data::open_dataset(dopt, data::Split::train);

  tern::Compressor* comp = run.compressor.get();
  train::TrainStep step(*net, *run.optimizer, run.ema ? &*run.ema : nullptr, cfg.train.weight_decay,
                        static_cast<uint64_t>(cfg.train.seed), comp);
  const std::vector<train::HostBatch> batches = synthetic_batches(c, info);
  Tensor loss_sum = Tensor::zeros({}, DType::f32, dev);
  const double data_load_ms = time_data_load(c, info, *ds);

  int64_t it = 0;
  for (int w = 0; w < c.warmup; ++w) step.run(batches, it++, 0.01, loss_sum);  // allocator, BLAS
  const StepSamples t = time_steps(step, batches, loss_sum, it, seconds, c.min_steps);
  const double step_s = median(t.total);
  StagedTimes staged;
  if (dev.is_cuda()) staged = time_staged(step, c, batches, loss_sum, it, seconds, dev);

  // Per-layer split and GEMM work from a few profiled steps.
  profile::reset();
  profile::enable(true, dev.is_cuda(), dev.index);
  for (int i = 0; i < c.profiled; ++i) step.run(batches, it++, 0.01, loss_sum);
  profile::enable(false);
  const double gflop_per_step = static_cast<double>(profile::flops()) / c.profiled / 1e9;
  const double achieved = gflop_per_step / step_s;

  const auto fp32_bytes = static_cast<long long>(net->arena().total_numel()) * 4;
  const long long payload =
      comp ? static_cast<long long>(comp->payload_bytes(it - 1)) + comp->num_meta() * 4
           : fp32_bytes;

  const double ms = 1e3;
  JsonLine j;
  j.add("kind", "step").add("net", c.net).add("device", dev.str());
  j.add("batch", static_cast<long long>(c.batch)).add("workers", static_cast<long long>(c.workers));
  j.add("compression", c.compression);
  j.add("conv_algo", cfg.cuda.conv_algo).add("tf32", cfg.cuda.tf32 ? 1 : 0);
  if (dev.is_cuda()) j.add("conv_algorithms", conv2d_pins_string(conv2d_choices()));
  j.add("step_ms", step_s * ms).add("p10_ms", percentile(t.total, 0.1) * ms);
  j.add("p90_ms", percentile(t.total, 0.9) * ms);
  j.add("steps", static_cast<long long>(t.total.size()));
  j.add("images_per_sec", c.batch / step_s);
  j.add("transfer_ms", median(t.xfer) * ms).add("forward_ms", median(t.fwd) * ms);
  if (dev.is_cuda()) {
    // The input's copy (issue 31 item 4): its rates, and the step fed a step ahead from pinned
    // memory on the copy stream (what `terngrad train` does with data.pin_memory).
    j.add("h2d_pageable_gbps", staged.pageable_gbps).add("h2d_pinned_gbps", staged.pinned_gbps);
    j.add("staged_step_ms", staged.step_ms).add("exposed_copy_ms", staged.exposed_copy_ms);
  }
  j.add("backward_ms", median(t.bwd) * ms).add("compress_ms", median(t.cmp) * ms);
  j.add("update_ms", median(t.upd) * ms).add("compress_share", median(t.share));
  j.add("payload_bytes_per_worker_per_iter", payload)
      .add("fp32_bytes_per_worker_per_iter", fp32_bytes);
  j.add("compression_ratio", static_cast<double>(fp32_bytes) / static_cast<double>(payload));
  j.add("data_load_ms", data_load_ms);
  j.add("gemm_gflop_per_step", gflop_per_step).add("achieved_gflops", achieved);
  j.add("sgemm_gflops", sgemm).add("fraction_of_sgemm", achieved / sgemm);
  j.add("params", static_cast<long long>(net->arena().total_numel()));
  j.print();
  std::fprintf(stderr,
               "\n%s batch %lld (%lld worker%s x %lld), compression %s, on %s: %.2f ms/step, "
               "%.0f img/s\n  transfer %.2f | fwd %.2f | bwd %.2f | compress %.2f (%.1f%% of the "
               "step) | update %.2f ms  (data load %.2f ms)\n  payload %lld B/worker/iter vs "
               "fp32 %lld B (%.1fx) | GEMM %.2f GFLOP/step = %.1f GFLOP/s = %.0f%% of sgemm %.0f\n",
               c.net.c_str(), static_cast<long long>(c.batch), static_cast<long long>(c.workers),
               c.workers == 1 ? "" : "s", static_cast<long long>(c.batch / c.workers),
               c.compression.c_str(), dev.str().c_str(), step_s * ms, c.batch / step_s,
               median(t.xfer) * ms, median(t.fwd) * ms, median(t.bwd) * ms, median(t.cmp) * ms,
               100 * median(t.share), median(t.upd) * ms, data_load_ms, payload, fp32_bytes,
               static_cast<double>(fp32_bytes) / static_cast<double>(payload), gflop_per_step,
               achieved, 100 * achieved / sgemm, sgemm);
  if (comp) print_compress_split(c, dev, *comp, net->arena().grads(), it);
  print_layers(c, dev);
}

int64_t parse_int(const char* flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  TG_CHECK(!v.empty() && *end == '\0' && errno == 0, flag, ": expected an integer, got '", v, "'");
  return x;
}

double parse_double(const char* flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  TG_CHECK(!v.empty() && *end == '\0' && std::isfinite(x), flag, ": expected a number, got '", v,
           "'");
  return x;
}

constexpr const char* kUsage =
    "usage: bench_train [--device cpu|cuda] [--net NAME --batch N] [--seconds S]\n"
    "                   [--compression none|fp16|terngrad|qsgd|onebit] [--workers N]\n"
    "                   [--set section.key=value ...] (config overrides, e.g. cuda.tf32=true)\n"
    "       bench_train --compression-share [--device cpu|cuda] [--seconds S]\n";

int main_impl(int argc, char** argv) {
  std::string device_arg, net_arg, compression = "none";
  int64_t batch = 0, workers = 1;
  double seconds = -1;
  bool share_mode = false, compression_set = false, workers_set = false;
  std::vector<std::string> sets;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      TG_CHECK(i + 1 < argc, flag, " needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--device")) {
      device_arg = next("--device");
    } else if (!std::strcmp(argv[i], "--net")) {
      net_arg = next("--net");
    } else if (!std::strcmp(argv[i], "--batch")) {
      batch = parse_int("--batch", next("--batch"));
      TG_CHECK(batch >= 1, "--batch: must be >= 1, got ", batch);
    } else if (!std::strcmp(argv[i], "--seconds")) {
      seconds = parse_double("--seconds", next("--seconds"));
      TG_CHECK(seconds >= 0, "--seconds: must be >= 0, got ", seconds);
    } else if (!std::strcmp(argv[i], "--compression")) {
      compression = next("--compression");
      compression_set = true;
      const auto known = tern::compressor_names();
      if (std::find(known.begin(), known.end(), compression) == known.end()) {
        std::string list;
        for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
        TG_THROW("--compression: unknown method '", compression, "' (known: ", list, ")");
      }
    } else if (!std::strcmp(argv[i], "--workers")) {
      workers = parse_int("--workers", next("--workers"));
      workers_set = true;
      TG_CHECK(workers >= 1 && workers <= 1024, "--workers: must be in [1, 1024], got ", workers);
    } else if (!std::strcmp(argv[i], "--set")) {
      sets.push_back(next("--set"));
    } else if (!std::strcmp(argv[i], "--compression-share")) {
      share_mode = true;
    } else {
      std::fprintf(stderr, "bench_train: unknown flag '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  TG_CHECK(!share_mode || (net_arg.empty() && batch == 0 && !compression_set && !workers_set),
           "--compression-share runs fixed cases (LeNet 64, AlexNet 128; none/terngrad; 1 and 2 "
           "workers) and takes no --net, --batch, --compression or --workers");
  TG_CHECK(batch == 0 || !net_arg.empty(), "--batch needs --net");
  config::default_config(sets);  // a bad --set is refused, naming it, before anything runs

  std::vector<Device> devices;
  if (device_arg.empty()) {
    devices.push_back(Device::cpu());
    if (cuda::device_count() > 0) devices.push_back(Device::cuda(0));
  } else {
    devices.push_back(parse_device(device_arg));
  }
  std::fprintf(stderr, "machine: %s%s%s\n", cpu_model().c_str(), gpu_name().empty() ? "" : "; GPU ",
               gpu_name().c_str());
  for (const Device& dev : devices) {
    check_device_usable(dev);
    std::vector<Case> cases;
    if (share_mode) {
      for (const char* net : {"lenet", "alexnet"}) {
        for (const char* method : {"none", "terngrad"}) {
          for (int64_t w : {1, 2}) {
            Case c{net, std::string(net) == "lenet" ? 64 : 128, method, w};
            if (c.net == "alexnet") c.warmup = 1, c.min_steps = 3, c.profiled = 1;
            cases.push_back(c);
          }
        }
      }
    } else if (!net_arg.empty()) {
      cases.push_back({net_arg, batch > 0 ? batch : 64});
    } else if (dev.is_cpu()) {
      cases = {{"lenet", 64}, {"cifarnet", 128}};
    } else {
      cases = {{"lenet", 64}, {"cifarnet", 128}, {"alexnet", 128}};
    }
    for (Case& c : cases) {
      if (!share_mode) {
        c.compression = compression;
        c.workers = workers;
      }
      c.sets = sets;
      TG_CHECK(c.batch % c.workers == 0, "--workers ", c.workers, " must divide the total batch ",
               c.batch, " of ", c.net, " (each worker takes batch / workers images)");
    }
    const double sgemm = sgemm_gflops(dev);
    for (const Case& c : cases)
      run_case(c, dev, seconds >= 0 ? seconds : share_mode ? 1.5 : 3.0, sgemm);
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::fprintf(stderr, "\npeak RSS of this process: %.0f MB\n", ru.ru_maxrss / 1024.0);
  return 0;
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  tg::apply_cpu_defaults(argv);  // what terngrad runs with
  try {
    return tg::bench::main_impl(argc, argv);
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.describe().c_str());
    return 1;
  }
}
