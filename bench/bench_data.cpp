// Data-loading cost per training batch, beside the step it feeds (bench_train): Dataset::load()
// of one batch with the recipe's augmentation, on one thread.
//   mnist       batch 64, the real files (--mnist DIR, default ../shared/data/mnist)   budget 0.5
//   ms cifar10     batch 128, augmented, on a CIFAR-10 binary set generated in a temp directory in
//               the real format (random pixels cost the same as real ones)             budget ~3 ms
//   synthetic   batch 64 at 28x28x1 (generated on the fly; tests and benchmarks only)
// Output: one JSON line per dataset (median/p10/p90 ms, images/s); a note on stderr.
//
// bench_data --image-folder DIR [--preprocess alexnet|inception] [--threads T] [--depth D]
//            [--batch B] [--steps S] [--fast-decode]
// times the trainer's own input path instead: the train split of an image folder (e.g. written by
// `terngrad data synth-folder`) through datasets/pipeline.h's BatchPipeline with T loader threads
// (default: every CPU), D steps ahead (default 2), batches of B (default 128) from the shuffled
// BatchSampler, S steps (default 20) after one of warm-up, consumed as fast as they come. One JSON
// line: images_per_sec, images_per_sec_per_thread, threads, cpus. --fast-decode sets
// data.fast_decode and adds how far its pixels are from the full decode's on the first batch
// (pixel_mean_abs_diff, pixel_max_abs_diff on the 0..255 scale, pixel_psnr_db).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "datasets/dataset.h"
#include "datasets/pipeline.h"
#include "datasets/sampler.h"
#include "nn/core/clock.h"
#include "nn/core/cpu_env.h"
#include "nn/core/error.h"

namespace tg::bench {
namespace {

namespace fs = std::filesystem;

// Five training files of `per_file` records and a test file, in CIFAR-10's binary format.
void write_cifar(const fs::path& dir, int per_file) {
  fs::create_directories(dir);
  std::vector<unsigned char> rec(3073);
  uint32_t state = 12345;
  auto file = [&](const std::string& name) {
    std::ofstream out(dir / name, std::ios::binary);
    for (int r = 0; r < per_file; ++r) {
      rec[0] = static_cast<unsigned char>(r % 10);
      for (size_t i = 1; i < rec.size(); ++i) {
        state = state * 1664525u + 1013904223u;
        rec[i] = static_cast<unsigned char>(state >> 24);
      }
      out.write(reinterpret_cast<const char*>(rec.data()),
                static_cast<std::streamsize>(rec.size()));
    }
  };
  for (int i = 1; i <= 5; ++i) file("data_batch_" + std::to_string(i) + ".bin");
  file("test_batch.bin");
}

void run(const std::string& label, const data::DataOptions& o, int64_t batch, double budget_ms) {
  auto ds = data::open_dataset(o, data::Split::train);
  const auto& in = ds->info();
  std::vector<int64_t> idx(batch);
  for (int64_t i = 0; i < batch; ++i) idx[i] = (i * 7919) % in.size;
  std::vector<float> x(batch * in.channels * in.height * in.width);
  std::vector<int32_t> y(batch);
  uint64_t key = 0;
  Timing t = time_it(
      [&] {
        ds->load(idx, true, 1, key, x.data(), y.data());
        key += batch;
      },
      [] {}, 0.3, 3, 20);
  JsonLine j;
  j.add("bench", "data_load").add("dataset", label).add("batch", static_cast<long long>(batch));
  j.add_timing(t).add("images_per_sec", batch / (t.median_ms * 1e-3));
  if (budget_ms > 0) j.add("budget_ms", budget_ms);
  j.print();
  std::fprintf(stderr, "%-10s batch %3lld: %.3f ms", label.c_str(), static_cast<long long>(batch),
               t.median_ms);
  if (budget_ms > 0) std::fprintf(stderr, " (budget %.1f ms)", budget_ms);
  std::fprintf(stderr, "\n");
}

struct FolderArgs {
  std::string dir;
  data::Preprocess preprocess = data::Preprocess::alexnet;
  int threads = 0, depth = 2;
  int64_t batch = 128, steps = 20;
  bool fast_decode = false;
};

// How far data.fast_decode's pixels are from the full decode's on one batch, on the 0..255 scale
// (both recipes end in an affine map of it: alexnet x - mean, inception 2 x / 255 - 1).
void add_pixel_difference(const FolderArgs& a, const data::DataOptions& fast, JsonLine& j) {
  data::DataOptions exact = fast;
  exact.fast_decode = false;
  auto a_ds = data::open_dataset(fast, data::Split::train);
  auto b_ds = data::open_dataset(exact, data::Split::train);
  const data::BatchSampler sampler(a_ds->info().size, a.batch, 1);
  const std::vector<int64_t> idx = sampler.indices(0);
  const data::DatasetInfo& in = a_ds->info();
  const size_t n = idx.size() * static_cast<size_t>(in.channels * in.height * in.width);
  std::vector<float> x(n), y(n);
  std::vector<int32_t> lx(idx.size()), ly(idx.size());
  a_ds->load(idx, true, 1, sampler.first_position(0), x.data(), lx.data());
  b_ds->load(idx, true, 1, sampler.first_position(0), y.data(), ly.data());
  const double unit = a.preprocess == data::Preprocess::inception ? 255.0 / 2.0 : 1.0;
  double sum = 0.0, sq = 0.0, most = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - y[i]) * unit;
    sum += d;
    sq += d * d;
    most = std::max(most, d);
  }
  const double mse = sq / static_cast<double>(n);
  j.add("pixel_mean_abs_diff", sum / static_cast<double>(n)).add("pixel_max_abs_diff", most);
  j.add("pixel_psnr_db", mse > 0 ? 10.0 * std::log10(255.0 * 255.0 / mse) : 999.0);
}

// The trainer's input path on an image folder: batches from the BatchPipeline as fast as it
// serves them.
void run_folder(const FolderArgs& a) {
  data::DataOptions o;
  o.name = "image-folder";
  o.path = a.dir;
  o.preprocess = a.preprocess;
  o.fast_decode = a.fast_decode;
  auto ds = data::open_dataset(o, data::Split::train);
  const int cpus = affinity_cpus();
  data::PipelineOptions po;
  po.threads = a.threads > 0 ? a.threads : cpus;
  po.depth = a.depth;
  po.augment = true;
  po.seed = 1;
  const data::BatchSampler sampler(ds->info().size, a.batch, 1);
  data::BatchPipeline pipe(
      *ds,
      [&](int64_t s) {
        return std::vector<data::BatchRequest>{{sampler.indices(s), sampler.first_position(s)}};
      },
      po);
  const int64_t end = a.steps + 1;
  pipe.get(0, end);  // warm-up: threads started, files opened, caches warm
  const auto t0 = Clock::now();
  for (int64_t s = 1; s < end; ++s) pipe.get(s, end);
  const double secs = seconds_since(t0);
  const double ips = static_cast<double>(a.steps * a.batch) / secs;
  JsonLine j;
  j.add("bench", "data_pipeline").add("dataset", "image-folder").add("path", a.dir);
  j.add("preprocess", std::string(enum_name(data::kPreprocesses, a.preprocess)));
  j.add("images", static_cast<long long>(ds->info().size));
  j.add("batch", static_cast<long long>(a.batch)).add("steps", static_cast<long long>(a.steps));
  j.add("threads", static_cast<long long>(po.threads))
      .add("depth", static_cast<long long>(a.depth));
  j.add("cpus", static_cast<long long>(cpus)).add("seconds", secs);
  j.add("images_per_sec", ips).add("images_per_sec_per_thread", ips / po.threads);
  j.add("fast_decode", a.fast_decode);
  if (a.fast_decode) add_pixel_difference(a, o, j);
  j.print();
  std::fprintf(stderr, "image-folder (%s%s), %d thread%s, %d ahead: %.0f img/s (%.0f per thread)\n",
               std::string(enum_name(data::kPreprocesses, a.preprocess)).c_str(),
               a.fast_decode ? ", fast decode" : "", po.threads, po.threads == 1 ? "" : "s",
               a.depth, ips, ips / po.threads);
}

int main_impl(int argc, char** argv) {
  std::string mnist = "../shared/data/mnist";
  FolderArgs folder;
  auto number = [&](int& i) {
    const std::string flag = argv[i];
    TG_CHECK(i + 1 < argc, flag, " needs a value");
    const std::string v = argv[++i];
    TG_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 10,
             flag, ": expected a whole number, got '", v, "'");
    return std::stoll(v);
  };
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mnist") && i + 1 < argc) {
      mnist = argv[++i];
    } else if (!std::strcmp(argv[i], "--image-folder") && i + 1 < argc) {
      folder.dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--preprocess") && i + 1 < argc) {
      folder.preprocess = parse_enum(data::kPreprocesses, argv[++i], "--preprocess");
    } else if (!std::strcmp(argv[i], "--threads")) {
      folder.threads = static_cast<int>(number(i));
    } else if (!std::strcmp(argv[i], "--depth")) {
      folder.depth = static_cast<int>(number(i));
    } else if (!std::strcmp(argv[i], "--batch")) {
      folder.batch = std::max<int64_t>(1, number(i));
    } else if (!std::strcmp(argv[i], "--fast-decode")) {
      folder.fast_decode = true;
    } else if (!std::strcmp(argv[i], "--steps")) {
      folder.steps = std::max<int64_t>(1, number(i));
    } else {
      std::fprintf(stderr,
                   "usage: bench_data [--mnist DIR] | --image-folder DIR [--preprocess "
                   "alexnet|inception] [--threads T] [--depth D] [--batch B] [--steps S] "
                   "[--fast-decode]\n");
      return 2;
    }
  }
  if (!folder.dir.empty()) {
    std::fprintf(stderr, "machine: %s\n", cpu_model().c_str());
    run_folder(folder);
    return 0;
  }
  std::fprintf(stderr, "machine: %s\n", cpu_model().c_str());
  if (fs::exists(mnist)) {
    data::DataOptions o;
    o.name = "mnist";
    o.path = mnist;
    run("mnist", o, 64, 0.5);
  } else {
    std::fprintf(stderr, "mnist: %s not found, skipped (--mnist DIR)\n", mnist.c_str());
  }
  const fs::path tmp = fs::temp_directory_path() / ("tg_bench_cifar_" + std::to_string(::getpid()));
  write_cifar(tmp, 1000);
  data::DataOptions c;
  c.name = "cifar10";
  c.path = tmp.string();
  run("cifar10", c, 128, 3.0);
  fs::remove_all(tmp);
  data::DataOptions s;
  s.name = "synthetic";
  run("synthetic", s, 64, 0.0);  // generated per call; no budget
  return 0;
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  try {
    return tg::bench::main_impl(argc, argv);
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "bench_data: error: %s\n", e.describe().c_str());
    return 1;
  }
}
