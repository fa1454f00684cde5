// conv2d: naive direct-convolution references (double accumulation) for the forward pass and
// each gradient, optimized CPU kernels vs those references over strides, paddings, groups,
// window sizes and chunkings, finite-difference gradient checks, and argument errors.
// Letters: N batch, C/K input/output channels, H W input, R S filter, P Q output.
#include "nn/ops/conv2d.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "tests/nn/ops/conv2d_test_util.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using testing::expect_close;
using testing::random_uniform;

// f32 GEMM sums of up to ~600 products of O(1) values against a double reference.
constexpr double kAtol = 2e-4, kRtol = 1e-4;

// Visits every (n, k, c, r, s, p, q) whose input pixel lies inside x (padding read as zero is
// skipped): the whole convolution as explicit loops. c is the global input channel.
void for_each_tap(const Conv2dShape& s,
                  const std::function<void(int64_t n, int64_t k, int64_t c, int64_t r, int64_t sc,
                                           int64_t p, int64_t q, int64_t h, int64_t w)>& fn) {
  const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t cl = 0; cl < Cg; ++cl)
        for (int64_t r = 0; r < s.R; ++r)
          for (int64_t sc = 0; sc < s.S; ++sc)
            for (int64_t p = 0; p < s.P; ++p)
              for (int64_t q = 0; q < s.Q; ++q) {
                const int64_t h = p * s.stride_h - s.pad_top + r;
                const int64_t w = q * s.stride_w - s.pad_left + sc;
                if (h < 0 || h >= s.H || w < 0 || w >= s.W) continue;
                fn(n, k, (k / Kg) * Cg + cl, r, sc, p, q, h, w);
              }
}

int64_t x_at(const Conv2dShape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * s.C + c) * s.H + h) * s.W + w;
}
int64_t w_at(const Conv2dShape& s, int64_t k, int64_t c, int64_t r, int64_t sc) {
  return ((k * (s.C / s.groups) + c % (s.C / s.groups)) * s.R + r) * s.S + sc;
}
int64_t y_at(const Conv2dShape& s, int64_t n, int64_t k, int64_t p, int64_t q) {
  return ((n * s.K + k) * s.P + p) * s.Q + q;
}

std::vector<double> ref_forward(const Conv2dShape& s, const std::vector<double>& x,
                                const std::vector<double>& w, const std::vector<double>* bias) {
  std::vector<double> y(s.N * s.K * s.P * s.Q, 0.0);
  for_each_tap(s, [&](int64_t n, int64_t k, int64_t c, int64_t r, int64_t sc, int64_t p, int64_t q,
                      int64_t h, int64_t ww) {
    y[y_at(s, n, k, p, q)] += w[w_at(s, k, c, r, sc)] * x[x_at(s, n, c, h, ww)];
  });
  if (bias)
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k)
        for (int64_t j = 0; j < s.P * s.Q; ++j) y[(n * s.K + k) * s.P * s.Q + j] += (*bias)[k];
  return y;
}

std::vector<double> ref_backward_data(const Conv2dShape& s, const std::vector<double>& dy,
                                      const std::vector<double>& w) {
  std::vector<double> dx(s.N * s.C * s.H * s.W, 0.0);
  for_each_tap(s, [&](int64_t n, int64_t k, int64_t c, int64_t r, int64_t sc, int64_t p, int64_t q,
                      int64_t h, int64_t ww) {
    dx[x_at(s, n, c, h, ww)] += w[w_at(s, k, c, r, sc)] * dy[y_at(s, n, k, p, q)];
  });
  return dx;
}

std::vector<double> ref_backward_weight(const Conv2dShape& s, const std::vector<double>& x,
                                        const std::vector<double>& dy) {
  std::vector<double> dw(s.K * (s.C / s.groups) * s.R * s.S, 0.0);
  for_each_tap(s, [&](int64_t n, int64_t k, int64_t c, int64_t r, int64_t sc, int64_t p, int64_t q,
                      int64_t h, int64_t ww) {
    dw[w_at(s, k, c, r, sc)] += x[x_at(s, n, c, h, ww)] * dy[y_at(s, n, k, p, q)];
  });
  return dw;
}

std::vector<double> ref_backward_bias(const Conv2dShape& s, const std::vector<double>& dy) {
  std::vector<double> db(s.K, 0.0);
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t j = 0; j < s.P * s.Q; ++j) db[k] += dy[(n * s.K + k) * s.P * s.Q + j];
  return db;
}

using testing::conv_opts;

// A case states the output size and leading padding TensorFlow gives, so the shape rule is
// checked too (pad_before = total / 2, the odd pixel after).
struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
  int64_t P, Q, pad_top, pad_left;
};
const Case kCases[] = {
    {"same_s1_even_total", {2, 3, 7, 6}, {4, 3, 3, 3}, conv_opts(1, 1, Padding::same), 7, 6, 1, 1},
    {"same_s1_odd_total_even_filter",
     {2, 3, 6, 7},
     {5, 3, 4, 2},
     conv_opts(1, 1, Padding::same),
     6,
     7,
     1,
     0},
    {"same_s2_odd_and_even_total",
     {3, 2, 8, 9},
     {4, 2, 3, 3},
     conv_opts(2, 2, Padding::same),
     4,
     5,
     0,
     1},
    {"valid_s2x1", {2, 3, 9, 7}, {4, 3, 3, 2}, conv_opts(2, 1, Padding::valid), 4, 6, 0, 0},
    {"explicit_pad_1x2_s2",
     {2, 2, 5, 6},
     {3, 2, 3, 3},
     conv_opts(2, 2, Padding::explicit_pad, 1, 2),
     3,
     4,
     1,
     2},
    {"groups2_same",
     {2, 4, 6, 6},
     {6, 2, 3, 3},
     conv_opts(1, 1, Padding::same, 0, 0, 2),
     6,
     6,
     1,
     1},
    {"groups3_explicit_s2",
     {2, 6, 7, 7},
     {9, 2, 3, 3},
     conv_opts(2, 2, Padding::explicit_pad, 1, 1, 3),
     4,
     4,
     1,
     1},
    {"alexnet_conv1_like_11x11_s4_valid",
     {2, 3, 27, 27},
     {8, 3, 11, 11},
     conv_opts(4, 4, Padding::valid),
     5,
     5,
     0,
     0},
    {"11x11_s4_same", {1, 3, 23, 23}, {4, 3, 11, 11}, conv_opts(4, 4, Padding::same), 6, 6, 4, 4},
    {"1x1", {3, 5, 4, 5}, {7, 5, 1, 1}, conv_opts(1, 1, Padding::same), 4, 5, 0, 0},
    {"1x1_s2_valid", {2, 3, 5, 6}, {4, 3, 1, 1}, conv_opts(2, 2, Padding::valid), 3, 3, 0, 0},
    {"window_equals_input",
     {2, 2, 5, 5},
     {3, 2, 5, 5},
     conv_opts(1, 1, Padding::valid),
     1,
     1,
     0,
     0},
    {"lenet_conv2", {2, 20, 14, 14}, {50, 20, 5, 5}, conv_opts(1, 1, Padding::same), 14, 14, 2, 2},
    // Stride 1 with Q == W but P > H: the shifted-plane im2col's guard zeros cover 2 rows.
    {"explicit_pad_s1_taller_output",
     {2, 3, 5, 6},
     {4, 3, 3, 3},
     conv_opts(1, 1, Padding::explicit_pad, 2, 1),
     7,
     6,
     2,
     1},
};

struct Inputs {
  Tensor x, w, b;
};
Inputs make_inputs(const Shape& xs, const Shape& ws, uint64_t seed) {
  return {random_uniform(xs, -1, 1, seed, 0), random_uniform(ws, -1, 1, seed, 1),
          random_uniform({ws[0]}, -1, 1, seed, 2)};
}

TEST(Conv2d, ShapeFollowsTensorFlowPadding) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
    EXPECT_EQ(s.P, c.P);
    EXPECT_EQ(s.Q, c.Q);
    EXPECT_EQ(s.pad_top, c.pad_top);
    EXPECT_EQ(s.pad_left, c.pad_left);
  }
}

TEST(Conv2d, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c.x, c.w, seed++);
    const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
    const auto xd = testing::to_doubles(in.x), wd = testing::to_doubles(in.w),
               bd = testing::to_doubles(in.b);
    Tensor y = conv2d(in.x, in.w, in.b, c.o);
    EXPECT_EQ(y.shape(), (Shape{s.N, s.K, s.P, s.Q}));
    expect_close(y, ref_forward(s, xd, wd, &bd), kAtol, kRtol, std::string(c.name) + " y");
    expect_close(conv2d(in.x, in.w, Tensor(), c.o), ref_forward(s, xd, wd, nullptr), kAtol, kRtol,
                 std::string(c.name) + " y without bias");
  }
}

TEST(Conv2d, BackwardMatchesReference) {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    Inputs in = make_inputs(c.x, c.w, seed++);
    const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
    in.x.set_requires_grad(true);
    in.w.set_requires_grad(true);
    in.b.set_requires_grad(true);
    Tensor y = conv2d(in.x, in.w, in.b, c.o);
    const Tensor dy = random_uniform(y.shape(), -1, 1, seed, 3);
    backward(y, dy);
    const auto xd = testing::to_doubles(in.x), wd = testing::to_doubles(in.w),
               dyd = testing::to_doubles(dy);
    expect_close(in.x.grad(), ref_backward_data(s, dyd, wd), kAtol, kRtol,
                 std::string(c.name) + " dx");
    expect_close(in.w.grad(), ref_backward_weight(s, xd, dyd), kAtol, kRtol,
                 std::string(c.name) + " dw");
    expect_close(in.b.grad(), ref_backward_bias(s, dyd), kAtol, kRtol,
                 std::string(c.name) + " dbias");
  }
}

// Only the requested gradients are computed; each matches the reference on its own.
TEST(Conv2d, PartialGradients) {
  const Case& c = kCases[6];  // groups3_explicit_s2
  const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE("only input " + std::to_string(which));
    Inputs in = make_inputs(c.x, c.w, 50);
    Tensor* ts[3] = {&in.x, &in.w, &in.b};
    ts[which]->set_requires_grad(true);
    Tensor y = conv2d(in.x, in.w, in.b, c.o);
    const Tensor dy = random_uniform(y.shape(), -1, 1, 51);
    backward(y, dy);
    const auto dyd = testing::to_doubles(dy);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(ts[j]->grad().defined(), j == which);
    const std::vector<double> ref =
        which == 0   ? ref_backward_data(s, dyd, testing::to_doubles(in.w))
        : which == 1 ? ref_backward_weight(s, testing::to_doubles(in.x), dyd)
                     : ref_backward_bias(s, dyd);
    expect_close(ts[which]->grad(), ref, kAtol, kRtol, "grad");
  }
}

// Restores the default workspace budget when a test ends, pass or fail.
struct BudgetOverride {
  explicit BudgetOverride(int64_t floats) { conv2d_set_workspace_budget_for_testing(floats); }
  ~BudgetOverride() { conv2d_set_workspace_budget_for_testing(0); }
};

// The kernel API directly, with the budget capped so the batch runs in several chunks,
// including a last chunk of one image (the GEMM then writes y / reads dy in place).
TEST(Conv2d, KernelsMatchReferenceAcrossChunks) {
  // 10 images: one per chunk gives 10 image tasks (the task path needs 8), 2, 3 or 5 per chunk
  // the chunk path.
  const Shape xs{10, 4, 9, 8}, wsh{6, 2, 3, 3};
  const Conv2dShape s = conv2d_shape(xs, wsh, conv_opts(2, 1, Padding::same, 0, 0, 2));
  const int64_t per_image = (2 * 3 * 3 + 6) * s.P * s.Q;
  const Inputs in = make_inputs(xs, wsh, 7);
  const Tensor dy = random_uniform({s.N, s.K, s.P, s.Q}, -1, 1, 7, 3);
  const auto xd = testing::to_doubles(in.x), wd = testing::to_doubles(in.w),
             bd = testing::to_doubles(in.b), dyd = testing::to_doubles(dy);
  for (int64_t nb : {1, 2, 3, 5}) {
    SCOPED_TRACE("images per chunk " + std::to_string(nb));
    BudgetOverride budget(nb * per_image + per_image / 2);
    ASSERT_EQ(conv2d_chunk_images(s), nb);
    ASSERT_EQ(conv2d_workspace_floats(s), nb * per_image);
    std::vector<float> ws(conv2d_workspace_floats(s), std::nanf(""));  // garbage must not leak
    Tensor y = Tensor::full({s.N, s.K, s.P, s.Q}, 7.0);
    Tensor dx = Tensor::full(xs, 7.0), dw = Tensor::full(wsh, 7.0), db = Tensor::full({s.K}, 7.0);
    conv2d_forward_cpu(s, in.x.data<float>(), in.w.data<float>(), in.b.data<float>(),
                       y.data<float>(), ws.data());
    expect_close(y, ref_forward(s, xd, wd, &bd), kAtol, kRtol, "y");
    conv2d_backward_data_cpu(s, dy.data<float>(), in.w.data<float>(), dx.data<float>(), ws.data());
    expect_close(dx, ref_backward_data(s, dyd, wd), kAtol, kRtol, "dx");
    conv2d_backward_weight_cpu(s, in.x.data<float>(), dy.data<float>(), dw.data<float>(),
                               db.data<float>(), ws.data());
    expect_close(dw, ref_backward_weight(s, xd, dyd), kAtol, kRtol, "dw");
    expect_close(db, ref_backward_bias(s, dyd), kAtol, kRtol, "dbias");
    // Either output of the weight kernel alone.
    Tensor dw2 = Tensor::full(wsh, 7.0), db2 = Tensor::full({s.K}, 7.0);
    conv2d_backward_weight_cpu(s, in.x.data<float>(), dy.data<float>(), dw2.data<float>(), nullptr,
                               ws.data());
    conv2d_backward_weight_cpu(s, nullptr, dy.data<float>(), nullptr, db2.data<float>(), nullptr);
    expect_close(dw2, ref_backward_weight(s, xd, dyd), kAtol, kRtol, "dw alone");
    expect_close(db2, ref_backward_bias(s, dyd), kAtol, kRtol, "dbias alone");
  }
}

// A named convolution problem (input and filter shapes, options), for the kernel-level tests.
struct ShapeCase {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
};

// Stride 1 with Q == W runs the shifted-plane im2col / col2im (one masked pass per col row over
// a zero-guarded plane copy): asymmetric SAME padding (even filter) and explicit padding taller
// than the filter reach, each on the image-task path (17 images, 1-2 per task: 9-17 tasks) and
// the one-chunk path (all images, every step split across the threads).
TEST(Conv2d, ShiftedPlaneKernelsMatchReference) {
  const ShapeCase cases[] = {
      {"same_even_filter", {17, 3, 6, 7}, {5, 3, 4, 2}, conv_opts(1, 1, Padding::same)},
      {"explicit_pad_2x1",
       {17, 2, 5, 6},
       {4, 2, 3, 3},
       conv_opts(1, 1, Padding::explicit_pad, 2, 1)},
      {"groups2_5x5", {17, 4, 6, 6}, {6, 2, 5, 5}, conv_opts(1, 1, Padding::same, 0, 0, 2)},
  };
  uint64_t seed = 300;
  for (const ShapeCase& c : cases) {
    const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
    ASSERT_EQ(s.Q, s.W);
    const int64_t per_image = (s.C / s.groups * s.R * s.S + s.K) * s.P * s.Q;
    const Inputs in = make_inputs(c.x, c.w, seed);
    const Tensor dy = random_uniform({s.N, s.K, s.P, s.Q}, -1, 1, seed++, 3);
    const auto xd = testing::to_doubles(in.x), wd = testing::to_doubles(in.w),
               bd = testing::to_doubles(in.b), dyd = testing::to_doubles(dy);
    for (int64_t nb : {int64_t{1}, int64_t{2}, s.N}) {
      SCOPED_TRACE(std::string(c.name) + ", images per chunk " + std::to_string(nb));
      BudgetOverride budget(nb * per_image + per_image / 2);
      ASSERT_EQ(conv2d_chunk_images(s), nb);
      std::vector<float> ws(conv2d_workspace_floats(s), std::nanf(""));
      Tensor y = Tensor::full({s.N, s.K, s.P, s.Q}, 7.0);
      Tensor dx = Tensor::full(c.x, 7.0), dw = Tensor::full(c.w, 7.0),
             db = Tensor::full({s.K}, 7.0);
      conv2d_forward_cpu(s, in.x.data<float>(), in.w.data<float>(), in.b.data<float>(),
                         y.data<float>(), ws.data());
      expect_close(y, ref_forward(s, xd, wd, &bd), kAtol, kRtol, "y");
      conv2d_backward_data_cpu(s, dy.data<float>(), in.w.data<float>(), dx.data<float>(),
                               ws.data());
      expect_close(dx, ref_backward_data(s, dyd, wd), kAtol, kRtol, "dx");
      conv2d_backward_weight_cpu(s, in.x.data<float>(), dy.data<float>(), dw.data<float>(),
                                 db.data<float>(), ws.data());
      expect_close(dw, ref_backward_weight(s, xd, dyd), kAtol, kRtol, "dw");
      expect_close(db, ref_backward_bias(s, dyd), kAtol, kRtol, "dbias");
    }
  }
}

// Training must end with the same parameters whatever the thread count: each kernel returns the
// same bits with 1, 2, 3 and 4 OpenMP threads, on the image-task path (its dw summed from
// per-run partials), on the chunk path (few images: tiled GEMMs), and with groups and stride.
TEST(Conv2d, SameBitsForAnyThreadCount) {
  const ShapeCase cases[] = {
      {"lenet_conv2_b64_tasks", {64, 20, 14, 14}, {50, 20, 5, 5}, conv_opts(1, 1, Padding::same)},
      {"lenet_conv2_b3_chunk", {3, 20, 14, 14}, {50, 20, 5, 5}, conv_opts(1, 1, Padding::same)},
      {"cifarnet_conv1_b16", {16, 3, 24, 24}, {64, 3, 5, 5}, conv_opts(1, 1, Padding::same)},
      {"groups2_stride2", {12, 4, 19, 19}, {8, 2, 5, 5}, conv_opts(2, 2, Padding::same, 0, 0, 2)},
  };
  const int saved = omp_get_max_threads();
  uint64_t seed = 500;
  for (const ShapeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dShape s = conv2d_shape(c.x, c.w, c.o);
    const Inputs in = make_inputs(c.x, c.w, seed);
    const Tensor dy = random_uniform({s.N, s.K, s.P, s.Q}, -1, 1, seed++, 3);
    std::vector<float> ws(conv2d_workspace_floats(s));
    std::vector<Tensor> first;
    for (int threads : {1, 2, 3, 4}) {
      omp_set_num_threads(threads);
      Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}), dx = Tensor::empty(c.x),
             dw = Tensor::empty(c.w), db = Tensor::empty({s.K});
      conv2d_forward_cpu(s, in.x.data<float>(), in.w.data<float>(), in.b.data<float>(),
                         y.data<float>(), ws.data());
      conv2d_backward_data_cpu(s, dy.data<float>(), in.w.data<float>(), dx.data<float>(),
                               ws.data());
      conv2d_backward_weight_cpu(s, in.x.data<float>(), dy.data<float>(), dw.data<float>(),
                                 db.data<float>(), ws.data());
      const std::vector<Tensor> now = {y, dx, dw, db};
      if (threads == 1) {
        first = now;
        continue;
      }
      const char* names[] = {"y", "dx", "dw", "dbias"};
      for (size_t i = 0; i < now.size(); ++i)
        EXPECT_EQ(std::memcmp(now[i].data<float>(), first[i].data<float>(), now[i].nbytes()), 0)
            << names[i] << " with " << threads << " threads differs from 1 thread";
    }
  }
  omp_set_num_threads(saved);
}

TEST(Conv2d, DefaultBudgetKeepsLeNetBatchInFewChunks) {
  const Conv2dShape s = conv2d_shape({64, 20, 14, 14}, {50, 20, 5, 5}, {});
  EXPECT_GE(conv2d_chunk_images(s) * s.P * s.Q, 4096) << "GEMM N dimension too small";
  EXPECT_LT(conv2d_chunk_images(s), s.N) << "LeNet batch in one 27 MB chunk: not cache-sized";
  EXPECT_LE(conv2d_workspace_floats(s) * 4, int64_t{64} << 20) << "workspace above 64 MB";
}

TEST(Conv2d, NonContiguousInputs) {
  const Tensor big = random_uniform({2, 3, 7, 10}, -1, 1, 9);
  const Tensor x = big.slice(3, 2, 8);  // [2, 3, 7, 6], row stride 10
  const Tensor w = random_uniform({4, 3, 3, 3}, -1, 1, 10);
  const Conv2dShape s = conv2d_shape(x.shape(), w.shape(), {});
  expect_close(conv2d(x, w, Tensor()),
               ref_forward(s, testing::to_doubles(x.contiguous()), testing::to_doubles(w), nullptr),
               kAtol, kRtol, "strided x");
}

TEST(Conv2d, EmptyBatch) {
  Tensor x = Tensor::zeros({0, 3, 5, 5});
  Tensor w = random_uniform({4, 3, 3, 3}, -1, 1, 11), b = random_uniform({4}, -1, 1, 12);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y = conv2d(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{0, 4, 5, 5}));
  backward(y, Tensor::zeros(y.shape()));
  expect_close(w.grad(), std::vector<double>(w.numel(), 0.0), 0, 0, "dw of an empty batch");
  expect_close(b.grad(), std::vector<double>(4, 0.0), 0, 0, "dbias of an empty batch");
}

TEST(Conv2d, Gradcheck) {
  struct Small {
    Shape x, w;
    Conv2dOptions o;
  };
  const Small cases[] = {
      {{2, 2, 5, 4}, {3, 2, 3, 3}, conv_opts(1, 1, Padding::same)},
      {{1, 2, 6, 5}, {2, 2, 3, 2}, conv_opts(2, 2, Padding::same)},
      {{2, 4, 5, 5}, {4, 2, 3, 3}, conv_opts(2, 1, Padding::explicit_pad, 1, 2, 2)},
      {{1, 3, 7, 6}, {2, 3, 4, 4}, conv_opts(3, 2, Padding::valid)},
  };
  uint64_t seed = 200;
  for (const Small& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    Inputs in = make_inputs(c.x, c.w, seed++);
    in.x.set_requires_grad(true);
    in.w.set_requires_grad(true);
    in.b.set_requires_grad(true);
    const Conv2dOptions o = c.o;
    testing::gradcheck([o](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], o); },
                       {in.x, in.w, in.b});
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Conv2d, Errors) {
  const Tensor x = Tensor::zeros({2, 20, 8, 8}), w = Tensor::zeros({50, 20, 5, 5});
  // dtype
  EXPECT_THROW(conv2d(Tensor::zeros({2, 20, 8, 8}, DType::i32), w, Tensor()), Error);
  EXPECT_THROW(conv2d(x, w, Tensor::zeros({50}, DType::i32)), Error);
  // channels
  const std::string msg = error_of([&] { conv2d(x, Tensor::zeros({50, 3, 5, 5}), Tensor()); });
  EXPECT_NE(msg.find("weight has 3 input channels per group but x has 20 channels (groups=1)"),
            std::string::npos)
      << msg;
  Conv2dOptions g3;
  g3.groups = 3;
  EXPECT_THROW(conv2d(x, w, Tensor(), g3), Error);  // 3 does not divide 20
  // window larger than the input under VALID
  Conv2dOptions valid;
  valid.padding = Padding::valid;
  const std::string vmsg = error_of([&] {
    conv2d(Tensor::zeros({1, 20, 4, 8}), w, Tensor(), valid);
  });
  EXPECT_NE(vmsg.find("VALID"), std::string::npos) << vmsg;
  // ranks, bias shape, strides
  EXPECT_THROW(conv2d(Tensor::zeros({20, 8, 8}), w, Tensor()), Error);
  EXPECT_THROW(conv2d(x, w, Tensor::zeros({49})), Error);
  Conv2dOptions s0;
  s0.stride_h = 0;
  EXPECT_THROW(conv2d(x, w, Tensor(), s0), Error);
  EXPECT_THROW(conv2d(Tensor(), w, Tensor()), Error);
}

}  // namespace
}  // namespace tg
