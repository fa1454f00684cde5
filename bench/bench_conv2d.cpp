// conv2d benchmark: forward, backward-data and backward-weight at the convolution shapes of
// LeNet, CifarNet, AlexNet, GoogLeNet and VGG-A, on the CPU and, with a GPU, on CUDA (the
// algorithm cuda.conv_algo's default picks). Each rate is also given as a fraction of the
// large-matrix sgemm rate measured at the start of the same run on the same device (target at
// LeNet conv2, CPU: fwd+bwd >= 50%; issue 31, GPU: each AlexNet layer's fwd+bwd >= 60%).
//
// --algos (GPU): every algorithm of nn/ops/conv2d_kernels.h on every layer and pass: im2col,
// im2col with cuBLAS TF32, the igemm rule's choice and each igemm tile with the rule's split,
// and each igemm tile's TF32 tensor-core twin; one "conv2d_algo" line each, then per layer a
// "conv2d_layer" line with the fastest strict-fp32 algorithm of each pass and their fwd+bwd sum
// (what cuda.conv_algo = autotune would reach), and the same among the TF32 algorithms (what
// autotune reaches with cuda.tf32 on, where the strict ones compete too).
//
// --list: the GPU cases as JSON lines with their SAME padding resolved (bench/pytorch_conv.py
// times the same layers with cuDNN from them).
//
// Usage: bench_conv2d [--cpu-only | --gpu-only] [--algos] [--seconds S per measurement] | --list
//
// FLOPs per pass: 2·N·K·(C/groups)·R·S·P·Q (forward, backward data and backward weight alike).
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/harness.h"
#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/precision.h"
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
    {"googlenet_conv1_7x7s2", 4, 128, 3, 224, 224, 64, 7, 7, 2, 1},
    {"googlenet_conv2b_1x1", 4, 128, 64, 56, 56, 64, 1, 1, 1, 1},
    {"googlenet_conv2c_3x3", 4, 128, 64, 56, 56, 192, 3, 3, 1, 1},
    {"googlenet_mixed3b_1x1", 4, 128, 192, 28, 28, 64, 1, 1, 1, 1},
    {"googlenet_mixed3b_3x3", 4, 128, 96, 28, 28, 128, 3, 3, 1, 1},
    {"googlenet_mixed4b_1x1", 4, 128, 480, 14, 14, 192, 1, 1, 1, 1},
    {"vgg_conv1", 2, 64, 3, 224, 224, 64, 3, 3, 1, 1},
    {"vgg_conv2", 2, 64, 64, 112, 112, 128, 3, 3, 1, 1},
    {"vgg_conv3_1", 2, 64, 128, 56, 56, 256, 3, 3, 1, 1},
    {"vgg_conv4_1", 2, 64, 256, 28, 28, 512, 3, 3, 1, 1},
    {"vgg_conv5_1", 2, 64, 512, 14, 14, 512, 3, 3, 1, 1},
};

struct Args {
  bool cpu = true, gpu = true, algos = false;
  double seconds = 0.2;
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

// One case's tensors on `dev` (n images): inputs filled, outputs zeroed, the layer's workspace.
struct Layer {
  int64_t n = 0;
  Conv2dShape s{};
  Tensor x, w, bias, y, dy, dx, dw, db, ws;
  double flops = 0;  // per pass
};

Conv2dOptions same_options(const ConvCase& c) {
  Conv2dOptions o;
  o.stride_h = o.stride_w = c.stride;
  o.padding = Padding::same;
  o.groups = c.groups;
  return o;
}

Layer make_layer(const ConvCase& c, int64_t n, const Device& dev) {
  Layer l;
  l.n = n;
  const Shape xs{n, c.c, c.h, c.w}, ws{c.k, c.c / c.groups, c.r, c.s};
  l.s = conv2d_shape(xs, ws, same_options(c));
  l.x = filled(xs, 3).to(dev);
  l.w = filled(ws, 4).to(dev);
  l.bias = filled({c.k}, 5).to(dev);
  l.y = Tensor::zeros({n, c.k, l.s.P, l.s.Q}, DType::f32, dev);
  l.dy = filled({n, c.k, l.s.P, l.s.Q}, 6).to(dev);
  l.dx = Tensor::zeros(xs, DType::f32, dev);
  l.dw = Tensor::zeros(ws, DType::f32, dev);
  l.db = Tensor::zeros({c.k}, DType::f32, dev);
  l.ws = Tensor::zeros({std::max<int64_t>(conv2d_workspace_floats(l.s), 1)}, DType::f32, dev);
  l.flops = 2.0 * n * c.k * (c.c / c.groups) * c.r * c.s * l.s.P * l.s.Q;
  return l;
}

void run_device(const Device& dev, const Args& args) {
  const std::function<void()> sync = [dev] {
    if (dev.is_cuda()) cuda::synchronize(dev.index);
  };
  const double ref = large_sgemm_gflops(dev, sync);
  for (const ConvCase& c : kCases) {
    const int64_t n = dev.is_cpu() ? c.n_cpu : c.n_gpu;
    Layer L = make_layer(c, n, dev);
    const Conv2dShape& s = L.s;
    Tensor &x = L.x, &w = L.w, &bias = L.bias, &y = L.y, &dy = L.dy, &dx = L.dx, &dw = L.dw,
           &db = L.db;
    float* wsp = L.ws.data<float>();
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
    const double flops = L.flops;
    const std::function<void()> all = [&] {
      fwd();
      bwd_data();
      bwd_weight();
    };
    const std::pair<const char*, const std::function<void()>*> passes[] = {
        {"fwd", &fwd}, {"bwd_data", &bwd_data}, {"bwd_weight", &bwd_weight}, {"fwd+bwd", &all}};
    for (const auto& [pass, fn] : passes) {
      const double pass_flops = std::strcmp(pass, "fwd+bwd") == 0 ? 3 * flops : flops;
      const Timing t = time_it(*fn, sync, args.seconds);
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

void list_cases() {
  for (const ConvCase& c : kCases) {
    const Conv2dShape s =
        conv2d_shape({c.n_gpu, c.c, c.h, c.w}, {c.k, c.c / c.groups, c.r, c.s}, same_options(c));
    const int64_t pad_h = (s.P - 1) * c.stride + c.r - c.h,
                  pad_w = (s.Q - 1) * c.stride + c.s - c.w;
    JsonLine()
        .add("layer", c.name)
        .add("n", static_cast<long long>(c.n_gpu))
        .add("c", static_cast<long long>(c.c))
        .add("h", static_cast<long long>(c.h))
        .add("w", static_cast<long long>(c.w))
        .add("k", static_cast<long long>(c.k))
        .add("r", static_cast<long long>(c.r))
        .add("s", static_cast<long long>(c.s))
        .add("stride", static_cast<long long>(c.stride))
        .add("groups", static_cast<long long>(c.groups))
        .add("pad_top", static_cast<long long>(s.pad_top))
        .add("pad_bottom", static_cast<long long>(pad_h - s.pad_top))
        .add("pad_left", static_cast<long long>(s.pad_left))
        .add("pad_right", static_cast<long long>(pad_w - s.pad_left))
        .add("p", static_cast<long long>(s.P))
        .add("q", static_cast<long long>(s.Q))
        .print();
  }
}

// --algos: every algorithm on every layer and pass, on GPU 0.
void run_algos(const Args& args) {
#if TG_CUDA
  const Device dev = Device::cuda(0);
  cuda::DeviceGuard guard(0);
  const std::function<void()> sync = [] { cuda::synchronize(0); };
  const double ref = large_sgemm_gflops(dev, sync);
  for (const ConvCase& c : kCases) {
    const int64_t n = c.n_gpu;
    Layer L = make_layer(c, n, dev);
    const Conv2dShape& s = L.s;
    Tensor &x = L.x, &w = L.w, &bias = L.bias, &y = L.y, &dy = L.dy, &dx = L.dx, &dw = L.dw;
    float* wsp = L.ws.data<float>();
    const int64_t nws = L.ws.numel();
    const double flops = L.flops;
    double best_sum = 0, im2col_sum = 0, best_tf32_sum = 0;
    std::string best_names, best_tf32_names;
    for (Conv2dPass pass :
         {Conv2dPass::forward, Conv2dPass::backward_data, Conv2dPass::backward_weight}) {
      const auto run = [&](const Conv2dAlgo& a) {
        if (pass == Conv2dPass::forward)
          conv2d_forward_cuda_with(a, s, x.data<float>(), w.data<float>(), bias.data<float>(),
                                   y.data<float>(), wsp);
        else if (pass == Conv2dPass::backward_data)
          conv2d_backward_data_cuda_with(a, s, dy.data<float>(), w.data<float>(), dx.data<float>(),
                                         wsp);
        else
          conv2d_backward_weight_cuda_with(a, s, x.data<float>(), dy.data<float>(),
                                           dw.data<float>(), nullptr, wsp);
      };
      const Conv2dAlgo rule = conv2d_igemm_rule(s, pass, nws);
      std::vector<std::pair<Conv2dAlgo, bool>> algos{{Conv2dAlgo{}, false}, {Conv2dAlgo{}, true}};
      algos.emplace_back(rule, false);
      for (const Conv2dAlgo& t : conv2d_igemm_tiles(true)) {
        const Conv2dAlgo a = conv2d_igemm_split(s, pass, t, nws);
        if (a.tf32 || !(a == rule)) algos.emplace_back(a, a.tf32);
      }
      double best = 0, im2col_ms = 0, best_tf32 = 0;
      std::string best_name, best_tf32_name;
      for (const auto& [a, tf32] : algos) {
        set_cuda_tf32(tf32);
        const Timing t = time_it([&] { run(a); }, sync, args.seconds);
        set_cuda_tf32(false);
        const double gf = flops / (t.median_ms * 1e6);
        JsonLine()
            .add("bench", "conv2d_algo")
            .add("device", dev.str())
            .add("layer", c.name)
            .add("pass", conv2d_pass_name(pass))
            .add("algo", conv2d_algo_name(a))
            .add("tf32", tf32 ? 1 : 0)
            .add("rule", a.bm == rule.bm && a.bn == rule.bn && a.splits == rule.splits ? 1 : 0)
            .add("n", static_cast<long long>(n))
            .add_timing(t)
            .add("gflops", gf)
            .add("frac_of_sgemm", gf / ref)
            .print();
        // With TF32 on, autotune weighs the strict algorithms too.
        const std::string name = conv2d_algo_name(a) + (tf32 && !a.tf32 ? "+cublas_tf32" : "");
        if (best_tf32 == 0 || t.median_ms < best_tf32)
          best_tf32 = t.median_ms, best_tf32_name = name;
        if (tf32) continue;
        if (a.kind == Conv2dAlgo::im2col) im2col_ms = t.median_ms;
        if (best == 0 || t.median_ms < best) best = t.median_ms, best_name = conv2d_algo_name(a);
      }
      best_sum += best;
      im2col_sum += im2col_ms;
      best_tf32_sum += best_tf32;
      best_names +=
          std::string(best_names.empty() ? "" : " ") + conv2d_pass_name(pass) + "=" + best_name;
      best_tf32_names += std::string(best_tf32_names.empty() ? "" : " ") + conv2d_pass_name(pass) +
                         "=" + best_tf32_name;
    }
    JsonLine()
        .add("bench", "conv2d_layer")
        .add("device", dev.str())
        .add("layer", c.name)
        .add("n", static_cast<long long>(n))
        .add("best", best_names)
        .add("best_fwd_bwd_ms", best_sum)
        .add("im2col_fwd_bwd_ms", im2col_sum)
        .add("best_frac_of_sgemm", 3 * flops / (best_sum * 1e6) / ref)
        .add("best_tf32", best_tf32_names)
        .add("best_tf32_fwd_bwd_ms", best_tf32_sum)
        .print();
  }
#else
  (void)args;
  TG_THROW("--algos needs a CUDA build");
#endif
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  using namespace tg;
  try {
    bench::Args args;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--cpu-only") {
        args.gpu = false;
      } else if (a == "--gpu-only") {
        args.cpu = false;
      } else if (a == "--algos") {
        args.algos = true;
      } else if (a == "--list") {
        bench::list_cases();
        return 0;
      } else if (a == "--seconds" && i + 1 < argc) {
        args.seconds = std::atof(argv[++i]);
        TG_CHECK(args.seconds > 0, "--seconds: must be > 0, got '", argv[i], "'");
      } else {
        std::fprintf(stderr,
                     "usage: bench_conv2d [--cpu-only | --gpu-only] [--algos] [--seconds S]\n"
                     "bench_conv2d: unknown argument '%s'\n",
                     argv[i]);
        return 1;
      }
    }
    bench::JsonLine()
        .add("bench", "machine")
        .add("cpu", bench::cpu_model())
        .add("blas_threads", blas_num_threads())
        .add("gpu", bench::gpu_name())
        .print();
    const bool gpu = args.gpu && cuda::device_count() > 0;
    if (args.algos) {
      TG_CHECK(gpu, "--algos compares the GPU's algorithms: no CUDA device (",
               cuda::unavailable_reason(), ")");
      bench::run_algos(args);
      return 0;
    }
    if (args.cpu) bench::run_device(Device::cpu(), args);
    if (gpu) bench::run_device(Device::cuda(0), args);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_conv2d: %s\n", e.describe().c_str());
    return 1;
  }
  return 0;
}
