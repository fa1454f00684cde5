// conv2d benchmark: forward, backward-data and backward-weight (im2col + GEMM) at the
// convolution shapes of LeNet, CifarNet and AlexNet, on the CPU and, with a GPU, on CUDA.
// Each rate is also given as a fraction of the large-matrix sgemm rate measured at the start
// of the same run on the same device (target at LeNet conv2, CPU: fwd+bwd >= 50%).
//
// FLOPs per pass: 2·N·K·(C/groups)·R·S·P·Q (forward, backward data and backward weight alike).
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/harness.h"
#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"
#include "nn/init/init.h"
#include "nn/ops/conv2d.h"
#include "nn/ops/conv2d_kernels.h"

namespace tg::bench {
namespace {

struct ConvCase {
  const char* name;
  int64_t n_cpu, n_gpu, c, h, w, k, r, s, stride, groups;
};

// The paper's networks (as the reference code builds them), SAME padding throughout (AlexNet conv1:
// 224/4 = 56). AlexNet's two columns are expressed as groups=2 where a column sees only its own
// half.
const ConvCase kCases[] = {
    {"lenet_conv1", 64, 64, 1, 28, 28, 20, 5, 5, 1, 1},
    {"lenet_conv2", 64, 64, 20, 14, 14, 50, 5, 5, 1, 1},
    {"cifarnet_conv1", 64, 128, 3, 24, 24, 64, 5, 5, 1, 1},
    {"cifarnet_conv2", 64, 128, 64, 12, 12, 64, 5, 5, 1, 1},
    {"alexnet_conv1", 8, 128, 3, 224, 224, 96, 11, 11, 4, 1},
    {"alexnet_conv2", 8, 128, 96, 27, 27, 256, 5, 5, 1, 2},
    {"alexnet_conv3", 8, 128, 256, 13, 13, 384, 3, 3, 1, 1},
    {"alexnet_conv4", 8, 128, 384, 13, 13, 384, 3, 3, 1, 2},
    {"alexnet_conv5", 8, 128, 384, 13, 13, 256, 3, 3, 1, 2},
};

Tensor filled(const Shape& shape, uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  init::uniform_(t, -1.0f, 1.0f, 1, stream);
  return t;
}

double large_sgemm_gflops(const Device& dev, const std::function<void()>& sync) {
  const int64_t n = 2048;
  Tensor a = filled({n, n}, 1).to(dev), b = filled({n, n}, 2).to(dev);
  Tensor c = Tensor::zeros({n, n}, DType::f32, dev);
  const GemmArgs g = dense_gemm(Trans::N, Trans::N, n, n, n, 1.f, a.data<float>(), b.data<float>(),
                                0.f, c.data<float>());
  Timing t = time_it([&] { gemm(dev, g); }, sync, 0.5);
  const double gf = 2.0 * n * n * n / (t.median_ms * 1e6);
  JsonLine()
      .add("bench", "sgemm_reference")
      .add("device", dev.str())
      .add("m", 2048LL)
      .add("n", 2048LL)
      .add("k", 2048LL)
      .add_timing(t)
      .add("gflops", gf)
      .print();
  return gf;
}

void run_device(const Device& dev) {
  const std::function<void()> sync = [dev] {
    if (dev.is_cuda()) cuda::synchronize(dev.index);
  };
  const double ref = large_sgemm_gflops(dev, sync);
  for (const ConvCase& c : kCases) {
    const int64_t n = dev.is_cpu() ? c.n_cpu : c.n_gpu;
    Conv2dOptions o;
    o.stride_h = o.stride_w = c.stride;
    o.padding = Padding::same;
    o.groups = c.groups;
    const Shape xs{n, c.c, c.h, c.w}, ws{c.k, c.c / c.groups, c.r, c.s};
    const Conv2dShape s = conv2d_shape(xs, ws, o);
    Tensor x = filled(xs, 3).to(dev), w = filled(ws, 4).to(dev), bias = filled({c.k}, 5).to(dev);
    Tensor y = Tensor::zeros({n, c.k, s.P, s.Q}, DType::f32, dev);
    Tensor dy = filled({n, c.k, s.P, s.Q}, 6).to(dev);
    Tensor dx = Tensor::zeros(xs, DType::f32, dev), dw = Tensor::zeros(ws, DType::f32, dev);
    Tensor db = Tensor::zeros({c.k}, DType::f32, dev);
    Tensor ws_buf =
        Tensor::zeros({std::max<int64_t>(conv2d_workspace_floats(s), 1)}, DType::f32, dev);
    float* wsp = ws_buf.data<float>();
    std::function<void()> fwd, bwd_data, bwd_weight;
    if (dev.is_cpu()) {
      fwd = [&] {
        conv2d_forward_cpu(s, x.data<float>(), w.data<float>(), bias.data<float>(), y.data<float>(),
                           wsp);
      };
      bwd_data = [&] {
        conv2d_backward_data_cpu(s, dy.data<float>(), w.data<float>(), dx.data<float>(), wsp);
      };
      bwd_weight = [&] {
        conv2d_backward_weight_cpu(s, x.data<float>(), dy.data<float>(), dw.data<float>(),
                                   db.data<float>(), wsp);
      };
    } else {
#if TG_CUDA
      fwd = [&] {
        cuda::DeviceGuard g(dev.index);
        conv2d_forward_cuda(s, x.data<float>(), w.data<float>(), bias.data<float>(),
                            y.data<float>(), wsp);
      };
      bwd_data = [&] {
        cuda::DeviceGuard g(dev.index);
        conv2d_backward_data_cuda(s, dy.data<float>(), w.data<float>(), dx.data<float>(), wsp);
      };
      bwd_weight = [&] {
        cuda::DeviceGuard g(dev.index);
        conv2d_backward_weight_cuda(s, x.data<float>(), dy.data<float>(), dw.data<float>(),
                                    db.data<float>(), wsp);
      };
#endif
    }
    const double flops = 2.0 * n * c.k * (c.c / c.groups) * c.r * c.s * s.P * s.Q;
    const std::function<void()> all = [&] {
      fwd();
      bwd_data();
      bwd_weight();
    };
    const std::pair<const char*, const std::function<void()>*> passes[] = {
        {"fwd", &fwd}, {"bwd_data", &bwd_data}, {"bwd_weight", &bwd_weight}, {"fwd+bwd", &all}};
    for (const auto& [pass, fn] : passes) {
      const double pass_flops = std::strcmp(pass, "fwd+bwd") == 0 ? 3 * flops : flops;
      const Timing t = time_it(*fn, sync);
      const double gf = pass_flops / (t.median_ms * 1e6);
      JsonLine()
          .add("bench", "conv2d")
          .add("device", dev.str())
          .add("layer", c.name)
          .add("pass", pass)
          .add("n", static_cast<long long>(n))
          .add("c", static_cast<long long>(c.c))
          .add("k", static_cast<long long>(c.k))
          .add("hw", static_cast<long long>(c.h))
          .add("rs", static_cast<long long>(c.r))
          .add("stride", static_cast<long long>(c.stride))
          .add("groups", static_cast<long long>(c.groups))
          .add_timing(t)
          .add("gflops", gf)
          .add("frac_of_sgemm", gf / ref)
          .print();
    }
  }
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  using namespace tg;
  try {
    const bool cpu_only = argc > 1 && std::string(argv[1]) == "--cpu-only";
    bench::JsonLine()
        .add("bench", "machine")
        .add("cpu", bench::cpu_model())
        .add("blas_threads", blas_num_threads())
        .add("gpu", bench::gpu_name())
        .print();
    bench::run_device(Device::cpu());
    if (!cpu_only && cuda::device_count() > 0) bench::run_device(Device::cuda(0));
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_conv2d: %s\n", e.describe().c_str());
    return 1;
  }
  return 0;
}
