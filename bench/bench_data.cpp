// Data-loading cost per training batch, beside the step it feeds (bench_train): Dataset::load()
// of one batch with the recipe's augmentation, single-threaded (the trainer prefetches on one
// background thread).
//   mnist       batch 64, the real files (--mnist DIR, default ../shared/data/mnist)   budget 0.5
//   ms cifar10     batch 128, augmented, on a CIFAR-10 binary set generated in a temp directory in
//               the real format (random pixels cost the same as real ones)             budget ~3 ms
//   synthetic   batch 64 at 28x28x1 (generated on the fly; tests and benchmarks only)
// Output: one JSON line per dataset (median/p10/p90 ms, images/s); a note on stderr.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "datasets/dataset.h"
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

int main_impl(int argc, char** argv) {
  std::string mnist = "../shared/data/mnist";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mnist") && i + 1 < argc) {
      mnist = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_data [--mnist DIR]\n");
      return 2;
    }
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
