// Training throughput of the paper's networks: one full iteration (forward, backward, weight
// decay + optimizer + EMA) exactly as `terngrad train` runs it (cmd/step.h), with the split per
// phase and per layer, and the run's GEMM rate as a fraction of this machine's large-matrix
// sgemm rate measured in the same process (which makes figures comparable across machines).
//
// Targets (issue 3): CPU LeNet batch 64 >= 2,500 img/s, CifarNet batch 128 >= 1,500 img/s;
// GPU LeNet/CifarNet no slower than PyTorch eager, AlexNet (batch 128) within 1.5x.
//
// Usage: bench_train [--device cpu|cuda] [--net NAME --batch N] [--seconds S]
// Output: JSON lines on stdout ("kind": "step" per net, "layer" per layer), a table on stderr.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "cmd/step.h"
#include "datasets/dataset.h"
#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/profile.h"
#include "nn/init/init.h"
#include "nn/core/cpu_env.h"
#include "nn/core/philox.h"

namespace tg::bench {
namespace {

struct Case {
  std::string net;
  int64_t batch;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

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

void run_case(const Case& c, const Device& dev, double seconds, double sgemm) {
  NetOptions no;
  auto net = make_net(c.net, no, dev);
  const auto& info = net->info();
  OptimizerOptions oo;  // momentum 0.9, the LeNet/AlexNet/GoogLeNet recipe
  auto opt = make_optimizer(oo);
  Ema ema(net->arena().params(), 0.9999);
  cli::TrainStep step(*net, *opt, &ema, 5e-4, 123);

  // One synthetic batch in the net's input shape; the data phase is timed separately with the
  // synthetic dataset (real loaders are benchmarked by their own tests' budgets).
  cli::HostBatch hb;
  hb.x = Tensor::empty({c.batch, info.in_channels, info.image_size, info.image_size});
  init::normal_(hb.x, 0.f, 1.f, 7, rng_stream(RngPurpose::data, 0));
  std::vector<int32_t> labels(c.batch);
  for (int64_t i = 0; i < c.batch; ++i) labels[i] = static_cast<int32_t>(i % info.num_classes);
  hb.y = Tensor::from_vector(labels, {c.batch});
  const std::vector<cli::HostBatch> batches{hb};
  Tensor loss_sum = Tensor::zeros({}, DType::f32, dev);

  data::DataOptions dopt;
  dopt.name = "synthetic";
  dopt.image_size = info.image_size;
  dopt.synthetic_channels = info.in_channels;
  dopt.synthetic_size = std::max<int64_t>(c.batch, 1024);
  auto ds = data::open_dataset(dopt, data::Split::train);
  std::vector<int64_t> idx(c.batch);
  for (int64_t i = 0; i < c.batch; ++i) idx[i] = i;
  Timing load = time_it(
      [&] { ds->load(idx, true, 1, 0, hb.x.data<float>(), hb.y.data<int32_t>()); }, [] {}, 0.2);

  int64_t it = 0;
  for (int w = 0; w < 3; ++w) step.run(batches, it++, 0.01, loss_sum);  // warm-up (allocator, BLAS)
  std::vector<double> total, fwd, bwd, upd, xfer;
  double elapsed = 0;
  while (elapsed < seconds || total.size() < 5) {
    cli::StepTimes t;
    step.run(batches, it++, 0.01, loss_sum, &t);
    total.push_back(t.total());
    fwd.push_back(t.forward_s);
    bwd.push_back(t.backward_s);
    upd.push_back(t.update_s);
    xfer.push_back(t.transfer_s);
    elapsed += t.total();
  }
  std::vector<double> sorted = total;
  std::sort(sorted.begin(), sorted.end());
  const double step_s = median(total);

  // Per-layer split and GEMM work from a few profiled steps.
  constexpr int kProfiled = 5;
  profile::reset();
  profile::enable(true, dev.is_cuda(), dev.index);
  for (int i = 0; i < kProfiled; ++i) step.run(batches, it++, 0.01, loss_sum);
  profile::enable(false);
  const double gflop_per_step = static_cast<double>(profile::flops()) / kProfiled / 1e9;
  const double achieved = gflop_per_step / step_s;

  JsonLine j;
  j.add("kind", "step").add("net", c.net).add("device", dev.str()).add("batch", static_cast<long long>(c.batch));
  j.add("step_ms", step_s * 1e3).add("p10_ms", sorted[sorted.size() / 10] * 1e3);
  j.add("p90_ms", sorted[sorted.size() * 9 / 10] * 1e3).add("steps", static_cast<long long>(total.size()));
  j.add("images_per_sec", c.batch / step_s);
  j.add("forward_ms", median(fwd) * 1e3).add("backward_ms", median(bwd) * 1e3);
  j.add("update_ms", median(upd) * 1e3).add("transfer_ms", median(xfer) * 1e3);
  j.add("data_load_ms", load.median_ms);
  j.add("gemm_gflop_per_step", gflop_per_step).add("achieved_gflops", achieved);
  j.add("sgemm_gflops", sgemm).add("fraction_of_sgemm", achieved / sgemm);
  j.add("params", static_cast<long long>(net->arena().total_numel()));
  j.print();
  std::fprintf(stderr,
               "\n%s batch %lld on %s: %.2f ms/step, %.0f img/s | fwd %.2f bwd %.2f update %.2f "
               "transfer %.2f ms (data load %.2f ms) | GEMM %.2f GFLOP/step = %.1f GFLOP/s = %.0f%% "
               "of sgemm %.0f\n",
               c.net.c_str(), static_cast<long long>(c.batch), dev.str().c_str(), step_s * 1e3,
               c.batch / step_s, median(fwd) * 1e3, median(bwd) * 1e3, median(upd) * 1e3,
               median(xfer) * 1e3, load.median_ms, gflop_per_step, achieved, 100 * achieved / sgemm,
               sgemm);
  std::fprintf(stderr, "  %-22s %10s %10s %8s\n", "layer", "fwd ms", "bwd ms", "share");
  double prof_total = 0;
  for (const auto& r : profile::rows()) prof_total += r.forward_s + r.backward_s;
  for (const auto& r : profile::rows()) {
    const double f = r.forward_s / kProfiled * 1e3, b = r.backward_s / kProfiled * 1e3;
    const std::string name = r.layer.empty() ? "(other)" : r.layer;
    const double share = prof_total > 0 ? (r.forward_s + r.backward_s) / prof_total : 0;
    std::fprintf(stderr, "  %-22s %10.3f %10.3f %7.1f%%\n", name.c_str(), f, b, 100 * share);
    JsonLine l;
    l.add("kind", "layer").add("net", c.net).add("device", dev.str()).add("layer", name);
    l.add("forward_ms", f).add("backward_ms", b).add("share", share);
    l.print();
  }
}

int main_impl(int argc, char** argv) {
  std::string device_arg, net_arg;
  int64_t batch = 0;
  double seconds = 3.0;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      TG_CHECK(i + 1 < argc, flag, " needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--device")) device_arg = next("--device");
    else if (!std::strcmp(argv[i], "--net")) net_arg = next("--net");
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(next("--batch").c_str());
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(next("--seconds").c_str());
    else {
      std::fprintf(stderr,
                   "usage: bench_train [--device cpu|cuda] [--net NAME --batch N] [--seconds S]\n");
      return 2;
    }
  }
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
    if (!net_arg.empty()) cases.push_back({net_arg, batch > 0 ? batch : 64});
    else if (dev.is_cpu()) cases = {{"lenet", 64}, {"cifarnet", 128}};
    else cases = {{"lenet", 64}, {"cifarnet", 128}, {"alexnet", 128}};
    const double sgemm = sgemm_gflops(dev);
    for (const Case& c : cases) run_case(c, dev, seconds, sgemm);
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
