// TernGrad kernel benchmark (terngrad/ternary_kernels.h), CPU and, when a GPU is present, CUDA:
// the fused ternarize+pack pass in both wire formats, the stats pass, unpack_accumulate and
// scale_accumulated (and on the CPU the 4- and 5-level grids' quantize+pack and unpack of
// terngrad/grid_kernels.h), against a plain copy of the same 4n bytes on the same machine. These
// are the T_enc inputs of the performance model (terngrad/analysis/perf_model.h).
//
// Bytes counted (read + written), n = elements:
//   copy 4n bytes:        8n              (memcpy single-threaded, an OpenMP copy, cudaMemcpy D2D)
//   stats:                4n
//   ternarize_pack:       4n + packed     (packed = n/4 two_bit, n/5 base3)
//   ternarize_pack_ef:    12n + packed    (error feedback: g and the residual read, residual
//                                          written; CUDA only)
//   unpack_accumulate:    packed + 8n     (int32 acc read and written)
//   scale_accumulated:    8n
// `frac_of_copy` = GB/s of the kernel / GB/s of the best copy on that device (target on the CPU:
// ternarize_pack >= 0.5; on the GPU at n = 10M: tensor_stats and two_bit ternarize_pack >= 0.8,
// base3 >= 0.6, unpack_accumulate >= 1.0).
// On the GPU also {"bench": "ternary_batch"} lines: each net's whole gradient (its parameter
// tensors at their arena offsets) through the per-tensor calls and through one batch call.
// Usage: bench_ternary [--device cpu|cuda|all]   (all: CPU, then GPU 0 when present)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "nn/core/cpu_env.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "nn/nets/net.h"
#include "terngrad/grid_kernels.h"
#include "terngrad/sum_radix.h"
#include "terngrad/ternary_kernels.h"

namespace tg::bench {
namespace {

using tern::PackFormat;

constexpr uint64_t kSeed = 1;
const int64_t kSizes[] = {1 << 20, 10 * (1 << 20)};

const char* name(PackFormat f) {
  return f == PackFormat::two_bit ? "two_bit" : "base3";
}

std::vector<float> gradient(int64_t n) {
  std::vector<float> g(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  for (float& v : g) v = d(rng);
  return g;
}

void report(const std::string& device, const char* op, const char* format, int64_t n,
            const Timing& t, double bytes, double copy_gbps) {
  const double gbps = bytes / (t.median_ms * 1e6);
  JsonLine line;
  line.add("bench", "ternary").add("device", device).add("op", op).add("format", format);
  line.add("n", static_cast<long long>(n)).add_timing(t).add("gbps", gbps);
  line.add("gelem_per_s", static_cast<double>(n) / (t.median_ms * 1e6));
  if (copy_gbps > 0) line.add("frac_of_copy", gbps / copy_gbps);
  line.print();
}

void run_cpu() {
  const std::function<void()> nosync = [] {};
  for (int64_t n : kSizes) {
    const std::vector<float> g = gradient(n);
    std::vector<float> dst(n, 0.0f);
    const double copy_bytes = 8.0 * n;
    const Timing t_memcpy =
        time_it([&] { std::memcpy(dst.data(), g.data(), n * sizeof(float)); }, nosync);
    const Timing t_omp = time_it(
        [&] {
          constexpr int64_t kChunk = 1 << 16;
#pragma omp parallel for schedule(static)
          for (int64_t b = 0; b < n; b += kChunk)
            std::memcpy(dst.data() + b, g.data() + b, std::min(kChunk, n - b) * sizeof(float));
        },
        nosync);
    report("cpu", "memcpy", "f32", n, t_memcpy, copy_bytes, 0);
    report("cpu", "omp_copy", "f32", n, t_omp, copy_bytes, 0);
    const double copy_gbps = copy_bytes / (std::min(t_memcpy.median_ms, t_omp.median_ms) * 1e6);

    tern::TensorStats st;
    report("cpu", "tensor_stats", "f32", n,
           time_it([&] { tern::tensor_stats_cpu(g.data(), n, &st); }, nosync), 4.0 * n, copy_gbps);
    const float s = static_cast<float>(2.5 * st.sigma());
    std::vector<int32_t> acc(n, 0);
    std::vector<float> out(n);
    for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
      const size_t packed = tern::packed_bytes(f, n);
      std::vector<uint8_t> p(packed);
      uint64_t step = 0;
      report("cpu", "ternarize_pack", name(f), n,
             time_it(
                 [&] {
                   tern::ternarize_pack_cpu(g.data(), n, s, kSeed,
                                            rng_stream(RngPurpose::ternarize, step++), f, p.data());
                 },
                 nosync),
             4.0 * n + packed, copy_gbps);
      report("cpu", "unpack_accumulate", name(f), n,
             time_it([&] { tern::unpack_accumulate_cpu(p.data(), n, f, acc.data()); }, nosync),
             packed + 8.0 * n, copy_gbps);
    }
    for (int levels : {4, 5}) {  // the finer grids (terngrad/grid_kernels.h)
      const char* fmt = levels == 4 ? "grid4" : "grid5";
      const size_t packed = tern::grid_packed_bytes(levels, n);
      std::vector<uint8_t> p(packed);
      uint64_t step = 0;
      report("cpu", "grid_quantize_pack", fmt, n,
             time_it(
                 [&] {
                   tern::grid_quantize_pack_cpu(g.data(), n, s, levels, kSeed,
                                                rng_stream(RngPurpose::ternarize, step++),
                                                p.data());
                 },
                 nosync),
             4.0 * n + packed, copy_gbps);
      report("cpu", "grid_unpack_accumulate", fmt, n,
             time_it([&] { tern::grid_unpack_accumulate_cpu(p.data(), n, levels, acc.data()); },
                     nosync),
             packed + 8.0 * n, copy_gbps);
    }
    report("cpu", "scale_accumulated", "i32", n,
           time_it([&] { tern::scale_accumulated_cpu(acc.data(), n, s / 4, out.data()); }, nosync),
           8.0 * n, copy_gbps);
    // The exact routes' sums (terngrad/sum_radix.h) of N = 8 and 16 workers: base-17 and base-33
    // words decoded into the accumulator, and straight into scaled floats (the sharded routes'
    // last pass).
    for (int workers : {8, 16}) {
      const uint64_t levels = tern::sum_levels(workers);
      const std::string fmt = "base" + std::to_string(levels);
      std::vector<int32_t> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i % (2 * workers + 1)) - workers;
      std::vector<uint64_t> words(tern::sum_words(n, levels));
      tern::pack_sums_cpu(v.data(), n, workers, levels, words.data());
      const double wbytes = 8.0 * static_cast<double>(words.size());
      report("cpu", "unpack_sums_accumulate", fmt.c_str(), n,
             time_it(
                 [&] {
                   tern::unpack_sums_accumulate_cpu(words.data(), n, levels, workers, acc.data());
                 },
                 nosync),
             wbytes + 8.0 * n, copy_gbps);
      report("cpu", "unpack_sums_scaled", fmt.c_str(), n,
             time_it(
                 [&] {
                   tern::unpack_sums_scaled_cpu(words.data(), n, levels, workers, s / 4,
                                                out.data());
                 },
                 nosync),
             wbytes + 4.0 * n, copy_gbps);
    }
  }
}

#if TG_CUDA
// Device buffer on GPU 0, freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : p(cuda::malloc_raw(0, bytes)) {}
  ~DeviceBuffer() { cuda::free_raw(0, p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void* p;
};

void run_cuda() {
  cuda::DeviceGuard guard(0);
  const std::string dev = "cuda:0";
  const std::function<void()> sync = [] { cuda::synchronize(0); };
  for (int64_t n : kSizes) {
    const std::vector<float> g = gradient(n);
    DeviceBuffer dg(n * sizeof(float)), ddst(n * sizeof(float)), dacc(n * sizeof(int32_t)),
        dout(n * sizeof(float)), dp(tern::packed_bytes(PackFormat::two_bit, n));
    cuda::copy_h2d(0, dg.p, g.data(), n * sizeof(float));
    cuda::memset_async(0, dacc.p, 0, n * sizeof(int32_t));
    const double copy_bytes = 8.0 * n;
    const Timing t_copy =
        time_it([&] { cuda::copy_d2d(0, ddst.p, dg.p, n * sizeof(float)); }, sync);
    report(dev, "memcpy_d2d", "f32", n, t_copy, copy_bytes, 0);
    const double copy_gbps = copy_bytes / (t_copy.median_ms * 1e6);
    tern::TensorStats st;
    report(dev, "tensor_stats", "f32", n,
           time_it([&] { tern::tensor_stats_cuda(dg.as<float>(), n, &st); }, sync), 4.0 * n,
           copy_gbps);
    const float s = static_cast<float>(2.5 * st.sigma());
    for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
      const size_t packed = tern::packed_bytes(f, n);
      uint64_t step = 0;
      report(dev, "ternarize_pack", name(f), n,
             time_it(
                 [&] {
                   tern::ternarize_pack_cuda(dg.as<float>(), n, s, kSeed,
                                             rng_stream(RngPurpose::ternarize, step++), f,
                                             dp.as<uint8_t>());
                 },
                 sync),
             4.0 * n + packed, copy_gbps);
      // With error feedback: g and the residual read, the codes and the residual written.
      cuda::memset_async(0, ddst.p, 0, n * sizeof(float));
      report(dev, "ternarize_pack_ef", name(f), n,
             time_it(
                 [&] {
                   tern::PackTask t{dg.as<float>(), n, s, rng_stream(RngPurpose::ternarize, step++),
                                    dp.as<uint8_t>()};
                   t.residual = ddst.as<float>();
                   tern::ternarize_pack_batch_cuda(&t, 1, kSeed, f);
                 },
                 sync),
             12.0 * n + packed, copy_gbps);
      report(
          dev, "unpack_accumulate", name(f), n,
          time_it([&] { tern::unpack_accumulate_cuda(dp.as<uint8_t>(), n, f, dacc.as<int32_t>()); },
                  sync),
          packed + 8.0 * n, copy_gbps);
    }
    report(
        dev, "scale_accumulated", "i32", n,
        time_it(
            [&] { tern::scale_accumulated_cuda(dacc.as<int32_t>(), n, s / 4, dout.as<float>()); },
            sync),
        8.0 * n, copy_gbps);
  }
}

// A net's whole gradient as one batch (every parameter tensor at its arena offset, as the
// compressor hands a slot range to the kernels): the per-tensor calls against one batch call
// (ternary_batch.h: one launch per 60 tensors), for stats, two-bit ternarize + pack and scale.
// GB/s count the batch's bytes as above; frac_of_copy against a device copy of the whole
// gradient in the same run.
void run_cuda_batches() {
  cuda::DeviceGuard guard(0);
  const std::function<void()> sync = [] { cuda::synchronize(0); };
  for (const char* net_name : {"lenet", "cifarnet", "alexnet", "googlenet", "vgg_a"}) {
    std::vector<std::pair<int64_t, int64_t>> slots;  // offset, numel
    int64_t total = 0;
    {
      const std::unique_ptr<Net> net = make_net(net_name, NetOptions{}, Device::cpu());
      for (const ParamArena::Entry& e : net->arena().entries()) {
        slots.emplace_back(e.offset, e.numel);
        total = std::max(total, e.offset + e.numel);
      }
    }
    const std::vector<float> g = gradient(total);
    size_t packed = 0;
    std::vector<size_t> packed_at;
    for (const auto& [off, n] : slots) {
      packed_at.push_back(packed);
      packed += tern::packed_bytes(PackFormat::two_bit, n);
    }
    DeviceBuffer dg(total * sizeof(float)), ddst(total * sizeof(float)),
        dacc(total * sizeof(int32_t)), dout(total * sizeof(float)), dp(packed);
    cuda::copy_h2d(0, dg.p, g.data(), total * sizeof(float));
    cuda::memset_async(0, dacc.p, 0, total * sizeof(int32_t));
    const Timing t_copy =
        time_it([&] { cuda::copy_d2d(0, ddst.p, dg.p, total * sizeof(float)); }, sync);
    const double copy_gbps = 8.0 * total / (t_copy.median_ms * 1e6);
    std::vector<tern::StatsTask> st;
    std::vector<tern::PackTask> pk;
    std::vector<tern::ScaleTask> sc;
    uint64_t step = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      const auto [off, n] = slots[i];
      st.push_back({dg.as<float>() + off, n});
      pk.push_back({dg.as<float>() + off, n, 1e-3f, rng_stream(RngPurpose::ternarize, 0, 0, i),
                    dp.as<uint8_t>() + packed_at[i]});
      sc.push_back({dacc.as<int32_t>() + off, n, 0.25f, dout.as<float>() + off});
    }
    std::vector<tern::TensorStats> res(slots.size());
    auto line = [&](const char* op, const Timing& per, const Timing& batch, double bytes) {
      const double gbps = bytes / (batch.median_ms * 1e6);
      JsonLine()
          .add("bench", "ternary_batch")
          .add("device", "cuda:0")
          .add("net", net_name)
          .add("op", op)
          .add("tensors", static_cast<long long>(slots.size()))
          .add("n", static_cast<long long>(total))
          .add("per_tensor_ms", per.median_ms)
          .add("batch_ms", batch.median_ms)
          .add("speedup", per.median_ms / batch.median_ms)
          .add("gbps", gbps)
          .add("frac_of_copy", gbps / copy_gbps)
          .add("copy_gbps", copy_gbps)
          .print();
    };
    line("tensor_stats",
         time_it(
             [&] {
               for (size_t i = 0; i < st.size(); ++i)
                 tern::tensor_stats_cuda(st[i].g, st[i].n, &res[i]);
             },
             sync),
         time_it([&] { tern::tensor_stats_batch_cuda(st.data(), st.size(), res.data()); }, sync),
         4.0 * total);
    line("ternarize_pack",
         time_it(
             [&] {
               for (tern::PackTask& t : pk) {
                 t.stream = rng_stream(RngPurpose::ternarize, ++step);
                 tern::ternarize_pack_cuda(t.g, t.n, t.s, kSeed, t.stream, PackFormat::two_bit,
                                           t.out);
               }
             },
             sync),
         time_it(
             [&] {
               for (tern::PackTask& t : pk) t.stream = rng_stream(RngPurpose::ternarize, ++step);
               tern::ternarize_pack_batch_cuda(pk.data(), pk.size(), kSeed, PackFormat::two_bit);
             },
             sync),
         4.0 * total + packed);
    line("scale_accumulated",
         time_it(
             [&] {
               for (const tern::ScaleTask& t : sc)
                 tern::scale_accumulated_cuda(t.acc, t.n, t.scale, t.out);
             },
             sync),
         time_it([&] { tern::scale_accumulated_batch_cuda(sc.data(), sc.size()); }, sync),
         8.0 * total);
  }
}
#endif

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  using namespace tg;
  apply_cpu_defaults(argv);
  // --device cpu | cuda | all (default all: the CPU kernels, then GPU 0's if one is present).
  std::string device = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a.rfind("--device=", 0) == 0) {
      device = a.substr(9);
    } else {
      std::fprintf(
          stderr,
          "bench_ternary: unknown argument '%s'\nusage: bench_ternary [--device cpu|cuda|all]\n",
          a.c_str());
      return 2;
    }
  }
  if (device != "cpu" && device != "cuda" && device != "all") {
    std::fprintf(stderr, "bench_ternary: --device: expected cpu, cuda or all, got '%s'\n",
                 device.c_str());
    return 2;
  }
  try {
    bench::JsonLine()
        .add("bench", "machine")
        .add("cpu", bench::cpu_model())
        .add("gpu", bench::gpu_name())
        .print();
    if (device != "cuda") bench::run_cpu();
    if (device != "cpu") {
      TG_CHECK(device == "all" || cuda::device_count() > 0,
               "--device cuda: no usable CUDA device (", cuda::unavailable_reason(), ")");
#if TG_CUDA
      if (cuda::device_count() > 0) {
        bench::run_cuda();
        bench::run_cuda_batches();
      }
#endif
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_ternary: %s\n", e.describe().c_str());
    return 1;
  }
  return 0;
}
