// conv2d on CUDA vs CPU: forward and every gradient through the tape, and the raw kernels
// across several chunkings. Skips without a GPU.
#include "nn/ops/conv2d.h"

#include "tests/nn/ops/conv2d_test_util.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// cuBLAS and OpenBLAS sum up to ~600 f32 products in different orders; the im2col/col2im
// copies are exact and col2im sums in the same (r, s) order on both.
constexpr double kAtol = 2e-4, kRtol = 1e-4;

using testing::conv_opts;

struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
};
const Case kCases[] = {
    {"same_s1", {2, 3, 7, 6}, {4, 3, 3, 3}, conv_opts(1, 1, Padding::same)},
    {"same_s1_even_filter", {2, 3, 6, 7}, {5, 3, 4, 2}, conv_opts(1, 1, Padding::same)},
    {"same_s2", {3, 2, 8, 9}, {4, 2, 3, 3}, conv_opts(2, 2, Padding::same)},
    {"valid_s2x1", {2, 3, 9, 7}, {4, 3, 3, 2}, conv_opts(2, 1, Padding::valid)},
    {"explicit_s2", {2, 2, 5, 6}, {3, 2, 3, 3}, conv_opts(2, 2, Padding::explicit_pad, 1, 2)},
    {"groups2", {2, 4, 6, 6}, {6, 2, 3, 3}, conv_opts(1, 1, Padding::same, 0, 0, 2)},
    {"alexnet_conv1_like", {2, 3, 35, 35}, {16, 3, 11, 11}, conv_opts(4, 4, Padding::valid)},
    {"1x1", {3, 5, 4, 5}, {7, 5, 1, 1}, conv_opts(1, 1, Padding::same)},
    {"lenet_conv2", {64, 20, 14, 14}, {50, 20, 5, 5}, conv_opts(1, 1, Padding::same)},
    {"single_image", {1, 8, 12, 10}, {6, 8, 5, 3}, conv_opts(1, 2, Padding::same)},
};

std::vector<Tensor> run(const Case& c, Tensor x, Tensor w, Tensor b, const Tensor& dy_host) {
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y = conv2d(x, w, b, c.o);
  backward(y, dy_host.to(y.device()));
  return {y.to(Device::cpu()), x.grad().to(Device::cpu()), w.grad().to(Device::cpu()),
          b.grad().to(Device::cpu())};
}

TEST(Conv2dCuda, ParityForwardBackward) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor x = testing::random_uniform(c.x, -1, 1, seed, 0);
    const Tensor w = testing::random_uniform(c.w, -1, 1, seed, 1);
    const Tensor b = testing::random_uniform({c.w[0]}, -1, 1, seed, 2);
    const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
    const Tensor dy = testing::random_uniform({s.N, s.K, s.P, s.Q}, -1, 1, seed, 3);
    ++seed;
    const auto cpu = run(c, x.clone(), w.clone(), b.clone(), dy);
    const auto gpu_r = run(c, x.to(gpu), w.to(gpu), b.to(gpu), dy);
    const char* names[] = {"y", "dx", "dw", "dbias"};
    for (int k = 0; k < 4; ++k) testing::expect_close(gpu_r[k], cpu[k], kAtol, kRtol, names[k]);
    // Without bias: the forward scatter and the in-place single-image path without a bias add.
    testing::expect_close(conv2d(x.to(gpu), w.to(gpu), Tensor(), c.o).to(Device::cpu()),
                          conv2d(x, w, Tensor(), c.o), kAtol, kRtol, "y without bias");
  }
}

struct BudgetOverride {
  explicit BudgetOverride(int64_t floats) { conv2d_set_workspace_budget_for_testing(floats); }
  ~BudgetOverride() { conv2d_set_workspace_budget_for_testing(0); }
};

// The raw kernels on both devices with the same chunking (including a one-image last chunk).
TEST(Conv2dCuda, KernelParityAcrossChunks) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Shape xs{5, 4, 9, 8}, wsh{6, 2, 3, 3};
  const Conv2dShape s = conv2d_shape(xs, wsh, conv_opts(2, 1, Padding::same, 0, 0, 2));
  const int64_t per_image = (2 * 3 * 3 + 6) * s.P * s.Q;
  const Tensor x = testing::random_uniform(xs, -1, 1, 7, 0),
               w = testing::random_uniform(wsh, -1, 1, 7, 1);
  const Tensor b = testing::random_uniform({s.K}, -1, 1, 7, 2);
  const Tensor dy = testing::random_uniform({s.N, s.K, s.P, s.Q}, -1, 1, 7, 3);
  const Tensor xg = x.to(gpu), wg = w.to(gpu), bg = b.to(gpu), dyg = dy.to(gpu);
  for (int64_t nb : {1, 2, 3, 5}) {
    SCOPED_TRACE("images per chunk " + std::to_string(nb));
    BudgetOverride budget(nb * per_image + per_image / 2);
    ASSERT_EQ(conv2d_chunk_images(s), nb);
    const int64_t nws = conv2d_workspace_floats(s);
    Tensor ws_c = Tensor::empty({nws}), ws_g = Tensor::full({nws}, 1e30, DType::f32, gpu);
    Tensor y_c = Tensor::empty({s.N, s.K, s.P, s.Q}),
           y_g = Tensor::full(y_c.shape(), 7.0, DType::f32, gpu);
    Tensor dx_c = Tensor::empty(xs), dx_g = Tensor::full(xs, 7.0, DType::f32, gpu);
    Tensor dw_c = Tensor::empty(wsh), dw_g = Tensor::full(wsh, 7.0, DType::f32, gpu);
    Tensor db_c = Tensor::empty({s.K}), db_g = Tensor::full({s.K}, 7.0, DType::f32, gpu);
    conv2d_forward_cpu(s, x.data<float>(), w.data<float>(), b.data<float>(), y_c.data<float>(),
                       ws_c.data<float>());
    conv2d_backward_data_cpu(s, dy.data<float>(), w.data<float>(), dx_c.data<float>(),
                             ws_c.data<float>());
    conv2d_backward_weight_cpu(s, x.data<float>(), dy.data<float>(), dw_c.data<float>(),
                               db_c.data<float>(), ws_c.data<float>());
#if TG_CUDA  // the raw CUDA kernels exist only in a CUDA build
    {
      cuda::DeviceGuard guard(gpu.index);
      conv2d_forward_cuda(s, xg.data<float>(), wg.data<float>(), bg.data<float>(),
                          y_g.data<float>(), ws_g.data<float>());
      conv2d_backward_data_cuda(s, dyg.data<float>(), wg.data<float>(), dx_g.data<float>(),
                                ws_g.data<float>());
      conv2d_backward_weight_cuda(s, xg.data<float>(), dyg.data<float>(), dw_g.data<float>(),
                                  db_g.data<float>(), ws_g.data<float>());
    }
#endif
    testing::expect_close(y_g.to(Device::cpu()), y_c, kAtol, kRtol, "y");
    testing::expect_close(dx_g.to(Device::cpu()), dx_c, kAtol, kRtol, "dx");
    testing::expect_close(dw_g.to(Device::cpu()), dw_c, kAtol, kRtol, "dw");
    testing::expect_close(db_g.to(Device::cpu()), db_c, kAtol, kRtol, "dbias");
  }
}

}  // namespace
}  // namespace tg
