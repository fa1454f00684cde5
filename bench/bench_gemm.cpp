// GEMM benchmark: the row-major wrapper (tg::gemm) against calling the BLAS directly, on the
// CPU (OpenBLAS) and, when a GPU is present, CUDA (cuBLAS). Target: wrapper overhead < 5%.
// Also reports the machine's large-matrix sgemm rate, the yardstick of bench_conv2d.
//
// FLOPs of one GEMM: 2·M·N·K.
#include <cblas.h>

#include <cstdio>

#if TG_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include "bench/harness.h"
#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"
#include "nn/init/init.h"

namespace tg::bench {
namespace {

struct GemmCase {
  const char* name;
  int64_t m, n, k;
};

// Large square (the reference rate) and the fully connected shapes of the paper's networks.
const GemmCase kCases[] = {
    {"square_2048", 2048, 2048, 2048},    {"square_512", 512, 512, 512},
    {"lenet_fc3_fwd", 64, 500, 2450},     {"lenet_fc3_bwd_weight", 2450, 500, 64},
    {"cifarnet_fc3_fwd", 128, 384, 2304}, {"alexnet_fc6_fwd_b32", 32, 4096, 9216},
};

Tensor filled(int64_t rows, int64_t cols, uint64_t stream, Device d) {
  Tensor t = Tensor::empty({rows, cols});
  init::uniform_(t, -1.0f, 1.0f, 1, stream);
  return t.to(d);
}

void run_device(const Device& dev) {
  const std::function<void()> sync = [dev] {
    if (dev.is_cuda()) cuda::synchronize(dev.index);
  };
  for (const GemmCase& c : kCases) {
    Tensor a = filled(c.m, c.k, 1, dev), b = filled(c.k, c.n, 2, dev);
    Tensor out = Tensor::zeros({c.m, c.n}, DType::f32, dev);
    const GemmArgs args = dense_gemm(Trans::N, Trans::N, c.m, c.n, c.k, 1.0f, a.data<float>(),
                                     b.data<float>(), 0.0f, out.data<float>());
    std::function<void()> direct;
    if (dev.is_cpu()) {
      direct = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.m, c.n, c.k, 1.0f, args.a, c.k,
                    args.b, c.n, 0.0f, args.c, c.n);
      };
    } else {
#if TG_CUDA
      cublasHandle_t h = nullptr;
      cublasCreate(&h);
      cublasSetStream(h, static_cast<cudaStream_t>(cuda::stream(dev.index)));
      direct = [&, h] {
        const float one = 1.f, zero = 0.f;
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, c.n, c.m, c.k, &one, args.b, c.n, args.a, c.k,
                    &zero, args.c, c.n);
      };
#endif
    }
    const std::function<void()> wrapped = [&] { gemm(dev, args); };
    // Alternate the two a few times and keep each side's best median: clock and cache drift
    // would otherwise be charged to whichever runs second.
    Timing best_direct, best_wrapped;
    best_direct.median_ms = best_wrapped.median_ms = 1e30;
    for (int round = 0; round < 3; ++round) {
      Timing td = time_it(direct, sync), tw = time_it(wrapped, sync);
      if (td.median_ms < best_direct.median_ms) best_direct = td;
      if (tw.median_ms < best_wrapped.median_ms) best_wrapped = tw;
    }
    const double flops = 2.0 * c.m * c.n * c.k;
    JsonLine()
        .add("bench", "gemm")
        .add("device", dev.str())
        .add("case", c.name)
        .add("m", static_cast<long long>(c.m))
        .add("n", static_cast<long long>(c.n))
        .add("k", static_cast<long long>(c.k))
        .add_timing(best_wrapped)
        .add("gflops", flops / (best_wrapped.median_ms * 1e6))
        .add("direct_median_ms", best_direct.median_ms)
        .add("direct_gflops", flops / (best_direct.median_ms * 1e6))
        .add("wrapper_overhead_pct", 100.0 * (best_wrapped.median_ms / best_direct.median_ms - 1.0))
        .print();
  }
}

}  // namespace
}  // namespace tg::bench

int main() {
  using namespace tg;
  try {
    bench::JsonLine()
        .add("bench", "machine")
        .add("cpu", bench::cpu_model())
        .add("blas_threads", blas_num_threads())
        .add("gpu", bench::gpu_name())
        .print();
    bench::run_device(Device::cpu());
    if (cuda::device_count() > 0) bench::run_device(Device::cuda(0));
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.describe().c_str());
    return 1;
  }
  return 0;
}
