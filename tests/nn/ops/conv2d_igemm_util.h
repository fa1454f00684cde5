// Shared by the implicit-GEMM tests: the conv shapes of the paper's five nets, and the kernels of
// nn/ops/conv2d_igemm.h run on the CPU through nn/core/simt.h's emulation (a reference for the
// indexing on any machine, and for the GPU's bits on a GPU machine).
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "nn/ops/conv2d.h"
#include "nn/ops/conv2d_igemm.h"
#include "nn/ops/conv2d_kernels.h"
#include "tests/nn/ops/conv2d_test_util.h"
#include "tests/testing/op_harness.h"

namespace tg::testing {

struct NetConv {
  const char* name;
  Shape x, w;  // [N, C, H, W], [K, C/groups, R, S]
  Conv2dOptions o;
};

// The conv shapes of LeNet, CifarNet, AlexNet, GoogLeNet and VGG-A as nn/nets builds them (SAME
// padding throughout; AlexNet's two columns as groups = 2 where a column sees only its half),
// full channel counts and image sizes, `batch` images.
inline std::vector<NetConv> net_convs(int64_t batch = 1) {
  const int64_t n = batch;
  const Conv2dOptions same = conv_opts(1, 1, Padding::same);
  const Conv2dOptions g2 = conv_opts(1, 1, Padding::same, 0, 0, 2);
  return {
      {"lenet_conv1", {n, 1, 28, 28}, {20, 1, 5, 5}, same},
      {"lenet_conv2", {n, 20, 14, 14}, {50, 20, 5, 5}, same},
      {"cifarnet_conv1", {n, 3, 24, 24}, {64, 3, 5, 5}, same},
      {"cifarnet_conv2", {n, 64, 12, 12}, {64, 64, 5, 5}, same},
      {"alexnet_conv1", {n, 3, 224, 224}, {96, 3, 11, 11}, conv_opts(4, 4, Padding::same)},
      {"alexnet_conv2", {n, 96, 27, 27}, {256, 48, 5, 5}, g2},
      {"alexnet_conv3", {n, 256, 13, 13}, {384, 256, 3, 3}, same},
      {"alexnet_conv4", {n, 384, 13, 13}, {384, 192, 3, 3}, g2},
      {"alexnet_conv5", {n, 384, 13, 13}, {256, 192, 3, 3}, g2},
      {"googlenet_conv1_7x7s2", {n, 3, 224, 224}, {64, 3, 7, 7}, conv_opts(2, 2, Padding::same)},
      {"googlenet_conv2c_3x3", {n, 64, 56, 56}, {192, 64, 3, 3}, same},
      {"googlenet_mixed3b_1x1", {n, 192, 28, 28}, {64, 192, 1, 1}, same},
      {"googlenet_mixed3b_3x3", {n, 96, 28, 28}, {128, 96, 3, 3}, same},
      {"googlenet_mixed3b_5x5", {n, 16, 28, 28}, {32, 16, 5, 5}, same},
      {"vgg_conv1", {n, 3, 224, 224}, {64, 3, 3, 3}, same},
      {"vgg_conv3_1", {n, 128, 56, 56}, {256, 128, 3, 3}, same},
      {"vgg_conv5_1", {n, 512, 14, 14}, {512, 512, 3, 3}, same},
  };
}

// The same geometries shrunk (channels and images) so the CPU emulation runs them in seconds,
// plus odd sizes: N = 1, odd H x W, unequal strides, asymmetric SAME padding, a filter wider
// than tall, M over one 128-row tile.
inline std::vector<NetConv> small_convs() {
  return {
      {"lenet 5x5 valid", {2, 1, 12, 12}, {6, 1, 5, 5}, conv_opts(1, 1, Padding::valid)},
      {"cifarnet 5x5 same", {2, 6, 8, 8}, {10, 6, 5, 5}, conv_opts(1, 1, Padding::same)},
      {"alexnet 11x11/4", {2, 3, 31, 31}, {16, 3, 11, 11}, conv_opts(4, 4, Padding::valid)},
      {"alexnet 5x5 pad2 g2",
       {2, 8, 9, 9},
       {12, 4, 5, 5},
       conv_opts(1, 1, Padding::explicit_pad, 2, 2, 2)},
      {"alexnet 3x3 pad1",
       {3, 6, 7, 7},
       {10, 6, 3, 3},
       conv_opts(1, 1, Padding::explicit_pad, 1, 1)},
      {"googlenet 7x7/2 pad3",
       {2, 3, 15, 15},
       {8, 3, 7, 7},
       conv_opts(2, 2, Padding::explicit_pad, 3, 3)},
      {"googlenet 1x1", {2, 20, 5, 5}, {36, 20, 1, 1}, conv_opts(1, 1, Padding::same)},
      {"googlenet 5x5 same", {1, 4, 6, 6}, {6, 4, 5, 5}, conv_opts(1, 1, Padding::same)},
      {"vgg 3x3 same, K odd", {1, 5, 8, 8}, {33, 5, 3, 3}, conv_opts(1, 1, Padding::same)},
      {"odd: N1 7x9 3x2 /2,1 same", {1, 3, 7, 9}, {5, 3, 3, 2}, conv_opts(2, 1, Padding::same)},
      {"odd: 4x4 filter same /2", {2, 2, 9, 8}, {3, 2, 4, 4}, conv_opts(2, 2, Padding::same)},
      {"M over 128: 1x1 K130", {1, 9, 4, 4}, {130, 9, 1, 1}, conv_opts(1, 1, Padding::same)},
  };
}

// Runs `pass` of the implicit GEMM `a` on the CPU through the SIMT emulation: the same kernel
// bodies, blocks and thread counts as conv2d_cuda.cu's launch. Outputs and workspace are host
// arrays; `workspace` needs a.splits * G * M * N floats when split.
template <class Tl, class Prob>
void emulate_tile(const Prob& pr, int groups, int splits, float* partial) {
  const unsigned gx = static_cast<unsigned>((pr.N() + Tl::BN - 1) / Tl::BN),
                 gy = static_cast<unsigned>((pr.M() + Tl::BM - 1) / Tl::BM);
  if (gx == 0 || gy == 0) return;
  simt::launch(
      {gx, gy, static_cast<unsigned>(groups * splits)}, {static_cast<unsigned>(Tl::kThreads), 1, 1},
      [&](const simt::Dim3& b, const simt::Dim3& t) {
        igemm::igemm_block<Tl>(pr, splits, partial, static_cast<int>(b.x), static_cast<int>(b.y),
                               static_cast<int>(b.z), static_cast<int>(t.x));
      });
  if (splits > 1) {
    const int64_t total = int64_t{groups} * pr.M() * pr.N();
    for (int64_t e = 0; e < total; ++e) igemm::igemm_reduce_element(pr, splits, partial, e);
  }
}

template <class Prob>
void emulate(const Conv2dAlgo& a, const Prob& pr, int groups, float* workspace) {
  igemm::with_tiling(a, [&]<class Tl>() { emulate_tile<Tl>(pr, groups, a.splits, workspace); });
}

// One pass on host arrays: forward writes y, backward_data dx, backward_weight dw.
inline void emulate_pass(const Conv2dAlgo& a, Conv2dPass p, const Conv2dShape& s, const float* x,
                         const float* w, const float* bias, const float* dy, float* out) {
  const igemm::Dims d = igemm::dims_of(s);
  const Conv2dGemmDims g = conv2d_gemm_dims(s, p);
  std::vector<float> ws(static_cast<size_t>(std::max<int64_t>(1, a.splits * s.groups * g.m * g.n)));
  const int G = static_cast<int>(s.groups);
  switch (p) {
    case Conv2dPass::forward:
      return emulate(a, igemm::Forward{d, x, w, bias, out}, G, ws.data());
    case Conv2dPass::backward_data:
      return emulate(a, igemm::BackwardData{d, dy, w, out}, G, ws.data());
    case Conv2dPass::backward_weight:
      return emulate(a, igemm::BackwardWeight{d, x, dy, out}, G, ws.data());
  }
}

// A shape's inputs, uniform in [-1, 1) from (seed, stream): x, w, bias, dy (host).
struct ConvData {
  Conv2dShape s;
  Tensor x, w, bias, dy;
};

inline ConvData make_conv_data(const NetConv& c, uint64_t seed) {
  ConvData d;
  d.s = conv2d_shape(c.x, c.w, c.o);
  d.x = random_uniform(c.x, -1, 1, seed, 0);
  d.w = random_uniform(c.w, -1, 1, seed, 1);
  d.bias = random_uniform({c.w[0]}, -1, 1, seed, 2);
  d.dy = random_uniform({d.s.N, d.s.K, d.s.P, d.s.Q}, -1, 1, seed, 3);
  return d;
}

// What a pass writes: y, dx or dw.
inline Shape pass_output_shape(const Conv2dShape& s, Conv2dPass p) {
  switch (p) {
    case Conv2dPass::forward:
      return {s.N, s.K, s.P, s.Q};
    case Conv2dPass::backward_data:
      return {s.N, s.C, s.H, s.W};
    case Conv2dPass::backward_weight:
      return {s.K, s.C / s.groups, s.R, s.S};
  }
  return {};
}

// The CPU reference (im2col + OpenBLAS) of a pass.
inline Tensor cpu_pass(const ConvData& d, Conv2dPass p) {
  Tensor out = Tensor::empty(pass_output_shape(d.s, p));
  std::vector<float> ws(static_cast<size_t>(std::max<int64_t>(conv2d_workspace_floats(d.s), 1)));
  switch (p) {
    case Conv2dPass::forward:
      conv2d_forward_cpu(d.s, d.x.data<float>(), d.w.data<float>(), d.bias.data<float>(),
                         out.data<float>(), ws.data());
      break;
    case Conv2dPass::backward_data:
      conv2d_backward_data_cpu(d.s, d.dy.data<float>(), d.w.data<float>(), out.data<float>(),
                               ws.data());
      break;
    case Conv2dPass::backward_weight:
      conv2d_backward_weight_cpu(d.s, d.x.data<float>(), d.dy.data<float>(), out.data<float>(),
                                 nullptr, ws.data());
      break;
  }
  return out;
}

// The data with every element mapped by f (x, w, bias, dy).
template <class F>
ConvData map_conv_data(const ConvData& d, F&& f) {
  ConvData out = d;
  for (Tensor* t : {&out.x, &out.w, &out.bias, &out.dy}) {
    *t = t->clone();
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = f(p[i]);
  }
  return out;
}

// TF32 results against references. A TF32 pass computes the products of the TF32-rounded
// operands: it is checked against the CPU reference of the rounded data (fp32 summation
// differences only) or of the data itself (the rounding too), with a tolerance per output
// proportional to the sum of its products' magnitudes, |a| * |b| summed: the same pass on the
// absolute values. Returns the largest |got - want| / (that sum + 1).
inline double max_scaled_error(const Tensor& got, const Tensor& want, const Tensor& magnitude) {
  double worst = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double e = std::abs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]) /
                     (static_cast<double>(magnitude.data<float>()[i]) + 1.0);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// The same pass of the implicit GEMM `a`, emulated; the output starts as NaNs, so an element
// the kernel fails to write shows.
inline Tensor emulated_pass(const ConvData& d, Conv2dPass p, const Conv2dAlgo& a) {
  Tensor out = Tensor::empty(pass_output_shape(d.s, p));
  std::memset(out.data<float>(), 0xFF, sizeof(float) * static_cast<size_t>(out.numel()));
  emulate_pass(a, p, d.s, d.x.data<float>(), d.w.data<float>(), d.bias.data<float>(),
               d.dy.data<float>(), out.data<float>());
  return out;
}

}  // namespace tg::testing
