// Optimizers (nn/optim/optimizer.h) on the CPU against naive double-precision loops that spell
// out TF's update rules, over several steps with random gradients (fixed seeds); Adam's bias
// correction; checkpoint state round trips; every error path.
#include "nn/optim/optimizer.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/testing/errors.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

using namespace tg::testing;

// The f32 kernels round once per operation; after kSteps steps of O(1) weights the drift from
// the double reference stays within a few ulp of 1 (ulp = 1.2e-7).
constexpr double kWeightAtol = 1e-6;
constexpr double kWeightRtol = 1e-6;
// Adam's slots: short f32 recurrences, a few ulp relative; v sums positive terms, but m can
// cancel to near 0, so its error is bounded by the ulp of its largest term (0.1 |g| <= ~1.5).
constexpr double kSlotRtol = 1e-5;
constexpr double kMAtol = 5e-7;
constexpr int kSteps = 8;
constexpr int64_t kN = 4099;      // not a multiple of the vector width
constexpr int64_t kBigN = 70001;  // above the OpenMP threshold of optim_cpu.cpp

double lr_at(int k) {
  return 0.1 * (1.0 - k / 16.0);
}

Tensor grad_at(int64_t n, int k, float std = 1.0f) {
  return random_normal({n}, std, /*seed=*/777, /*stream=*/k);
}

std::unique_ptr<Optimizer> make(const std::string& name) {
  OptimizerOptions o;
  o.name = name;
  return make_optimizer(o);
}

const Tensor& find_state(const std::vector<std::pair<std::string, Tensor>>& s,
                         const std::string& name) {
  for (const auto& [n, t] : s) {
    if (n == name) return t;
  }
  ADD_FAILURE() << "state has no entry '" << name << "'";
  static const Tensor none;
  return none;
}

// ---- against the naive loops -------------------------------------------------------------

TEST(Optimizer, SgdMatchesReference) {
  for (const int64_t n : {kN, kBigN}) {
    SCOPED_TRACE(n);
    Tensor w = random_normal({n}, 1.0f, 1);
    std::vector<double> ref = to_doubles(w);
    auto opt = make("sgd");
    EXPECT_EQ(opt->name(), "sgd");
    for (int k = 0; k < kSteps; ++k) {
      const Tensor g = grad_at(n, k);
      opt->step(w, g, lr_at(k));
      const std::vector<double> gd = to_doubles(g);
      for (int64_t i = 0; i < n; ++i) ref[i] -= lr_at(k) * gd[i];
    }
    expect_close(w, ref, kWeightAtol, kWeightRtol, "sgd weights");
  }
}

TEST(Optimizer, MomentumMatchesReference) {
  for (const int64_t n : {kN, kBigN}) {
    SCOPED_TRACE(n);
    Tensor w = random_normal({n}, 1.0f, 2);
    std::vector<double> ref = to_doubles(w), acc(n, 0.0);
    auto opt = make("momentum");  // momentum 0.9
    EXPECT_EQ(opt->name(), "momentum");
    for (int k = 0; k < kSteps; ++k) {
      const Tensor g = grad_at(n, k);
      opt->step(w, g, lr_at(k));
      const std::vector<double> gd = to_doubles(g);
      for (int64_t i = 0; i < n; ++i) {
        acc[i] = 0.9 * acc[i] + gd[i];
        ref[i] -= lr_at(k) * acc[i];
      }
    }
    expect_close(w, ref, kWeightAtol, kWeightRtol, "momentum weights");
    expect_close(find_state(opt->state(), "momentum/accum"), acc, 1e-6, kSlotRtol,
                 "momentum accumulator");
  }
}

// A constant gradient: a_k = g (1 - m^k) / (1 - m) after k steps, not g (the TF rule adds the
// raw gradient, no (1 - m) damping), and w moves by lr * sum of the a_k.
TEST(Optimizer, MomentumAccumulatesConstantGradient) {
  OptimizerOptions o;
  o.name = "momentum";
  o.momentum = 0.5;
  auto opt = make_optimizer(o);
  Tensor w = Tensor::zeros({3});
  const Tensor g = Tensor::from_vector<float>({1.0f, -2.0f, 0.0f}, {3});
  double moved = 0.0;
  for (int k = 1; k <= 5; ++k) {
    opt->step(w, g, 0.1);
    const double a = (1.0 - std::pow(0.5, k)) / (1.0 - 0.5);
    moved += 0.1 * a;
    expect_close(find_state(opt->state(), "momentum/accum"), {a, -2.0 * a, 0.0}, 1e-7, 1e-7,
                 "accumulator after step " + std::to_string(k));
  }
  expect_close(w, {-moved, 2.0 * moved, 0.0}, 1e-7, 1e-6, "weights");
}

// Adam in TF's form with TF's f32 scalars (1 - beta formed in f32) and lr_t in double.
TEST(Optimizer, AdamMatchesReference) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double omb1 = 1.0f - static_cast<float>(b1), omb2 = 1.0f - static_cast<float>(b2);
  for (const int64_t n : {kN, kBigN}) {
    SCOPED_TRACE(n);
    Tensor w = random_normal({n}, 1.0f, 3);
    std::vector<double> ref = to_doubles(w), m(n, 0.0), v(n, 0.0);
    auto opt = make("adam");
    EXPECT_EQ(opt->name(), "adam");
    for (int k = 0; k < kSteps; ++k) {
      // Gradients of mixed scales, so v spans several decades.
      const Tensor g = grad_at(n, k, k % 2 ? 0.01f : 3.0f);
      const double lr = 1e-3 * (k + 1);
      opt->step(w, g, lr);
      const double t = k + 1;
      const double lr_t = lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t));
      const std::vector<double> gd = to_doubles(g);
      for (int64_t i = 0; i < n; ++i) {
        m[i] += (gd[i] - m[i]) * omb1;
        v[i] += (gd[i] * gd[i] - v[i]) * omb2;
        ref[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
      }
    }
    const auto state = opt->state();
    expect_close(w, ref, kWeightAtol, kWeightRtol, "adam weights");
    expect_close(find_state(state, "adam/m"), m, kMAtol, kSlotRtol, "adam m");
    expect_close(find_state(state, "adam/v"), v, 1e-12, kSlotRtol, "adam v");
    EXPECT_EQ(find_state(state, "adam/step").item<int64_t>(), kSteps);
  }
}

// Step 1: m = (1-b1) g, v = (1-b2) g^2, lr_t = lr sqrt(1-b2)/(1-b1), so |dw| = lr for any g
// with |g| >> eps / sqrt(1-b2) = 3e-7. Tolerance: the f32 form of 1 - b2 (1.0f - 0.999f is
// 4.7e-5 above 1e-3) shifts it by 2.3e-5, eps by at most 3.2e-5 at |g| = 1e-2.
TEST(Optimizer, AdamFirstStepMovesByLr) {
  constexpr double kRtol = 1e-4;
  const std::vector<float> gv = {1e-2f, -1e-2f, 0.37f, -5.0f, 123.0f, -1e3f, 0.0f};
  const int64_t n = static_cast<int64_t>(gv.size());
  for (const double lr : {1e-3, 0.1}) {
    SCOPED_TRACE(lr);
    auto opt = make("adam");
    Tensor w = Tensor::full({n}, 0.5);
    opt->step(w, Tensor::from_vector<float>(gv, {n}), lr);
    const std::vector<float> wv = w.to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double dw = 0.5 - wv[i];
      if (gv[i] == 0.0f) {
        EXPECT_EQ(wv[i], 0.5f) << "a zero gradient moves nothing (0 / (0 + eps))";
      } else {
        EXPECT_NEAR(dw, std::copysign(lr, gv[i]), kRtol * lr) << "g = " << gv[i];
      }
    }
  }
}

// ---- checkpoint state ----------------------------------------------------------------------

TEST(Optimizer, StateNamesShapesAndSnapshot) {
  auto sgd = make("sgd");
  Tensor w = random_normal({kN}, 1.0f, 4);
  sgd->step(w, grad_at(kN, 0), 0.1);
  EXPECT_TRUE(sgd->state().empty());

  auto mom = make("momentum");
  EXPECT_TRUE(mom->state().empty()) << "no slots before the first step";
  mom->step(w, grad_at(kN, 0), 0.1);
  auto ms = mom->state();
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].first, "momentum/accum");
  EXPECT_EQ(ms[0].second.shape(), Shape({kN}));
  EXPECT_EQ(ms[0].second.dtype(), DType::f32);
  const Tensor before = ms[0].second.clone();
  mom->step(w, grad_at(kN, 1), 0.1);
  expect_bitwise_equal(ms[0].second, before, "state() is a snapshot, later steps leave it");

  auto adam = make("adam");
  EXPECT_TRUE(adam->state().empty());
  for (int k = 0; k < 3; ++k) adam->step(w, grad_at(kN, k), 0.01);
  auto as = adam->state();
  ASSERT_EQ(as.size(), 3u);
  EXPECT_EQ(as[0].first, "adam/m");
  EXPECT_EQ(as[1].first, "adam/v");
  EXPECT_EQ(as[2].first, "adam/step");
  EXPECT_EQ(as[0].second.shape(), Shape({kN}));
  EXPECT_EQ(as[1].second.shape(), Shape({kN}));
  EXPECT_EQ(as[2].second.dtype(), DType::i64);
  EXPECT_EQ(as[2].second.device(), Device::cpu());
  EXPECT_EQ(as[2].second.item<int64_t>(), 3);
}

// Save after 3 steps, continue 4 more; a fresh optimizer loaded from the save continues from
// the saved weights with the same gradients to the same bits.
TEST(Optimizer, StateRoundTripContinuesBitIdentically) {
  for (const std::string name : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(name);
    auto a = make(name);
    Tensor w = random_normal({kN}, 1.0f, 5);
    for (int k = 0; k < 3; ++k) a->step(w, grad_at(kN, k), lr_at(k) * 0.1);
    const auto saved = a->state();
    Tensor w_saved = w.clone();
    for (int k = 3; k < 7; ++k) a->step(w, grad_at(kN, k), lr_at(k) * 0.1);

    auto b = make(name);
    b->load_state(saved);
    for (int k = 3; k < 7; ++k) b->step(w_saved, grad_at(kN, k), lr_at(k) * 0.1);
    expect_bitwise_equal(w_saved, w, "weights");
    const auto sa = a->state(), sb = b->state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].first, sb[i].first);
      if (sa[i].second.dtype() == DType::f32) {
        expect_bitwise_equal(sb[i].second, sa[i].second, sa[i].first);
      } else {
        EXPECT_EQ(sb[i].second.item<int64_t>(), sa[i].second.item<int64_t>()) << sa[i].first;
      }
    }
  }
}

// Loading into an optimizer that already has slots copies into them; loading an empty state
// resets to a fresh optimizer (Adam's step count included).
TEST(Optimizer, LoadIntoLiveSlotsAndReset) {
  Tensor w0 = random_normal({kN}, 1.0f, 6);
  auto ref = make("adam");
  Tensor w_ref = w0.clone();
  ref->step(w_ref, grad_at(kN, 0), 0.01);
  const auto saved = ref->state();
  Tensor w1 = w_ref.clone();
  ref->step(w_ref, grad_at(kN, 1), 0.01);

  auto live = make("adam");
  Tensor w = w0.clone();
  for (int k = 0; k < 5; ++k) live->step(w, grad_at(kN, 9 + k), 0.01);
  live->load_state(saved);
  live->step(w1, grad_at(kN, 1), 0.01);
  expect_bitwise_equal(w1, w_ref, "continued from the loaded state");

  live->load_state({});
  EXPECT_TRUE(live->state().empty());
  auto fresh = make("adam");
  Tensor wa = w0.clone(), wb = w0.clone();
  live->step(wa, grad_at(kN, 2), 0.01);
  fresh->step(wb, grad_at(kN, 2), 0.01);
  expect_bitwise_equal(wa, wb, "after reset = fresh (step count back to 0)");
}

TEST(Optimizer, ZeroElements) {
  for (const std::string name : {"sgd", "momentum", "adam"}) {
    auto opt = make(name);
    Tensor w = Tensor::zeros({0});
    EXPECT_NO_THROW(opt->step(w, Tensor::zeros({0}), 0.1)) << name;
  }
}

// ---- errors --------------------------------------------------------------------------------

TEST(Optimizer, MakeOptimizerErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  OptimizerOptions o;
  o.name = "rmsprop";
  expect_error_with([&] { make_optimizer(o); },
                    {"unknown optimizer 'rmsprop' (known: sgd, momentum, adam)"});

  o.name = "momentum";
  for (const double m : {1.0, -0.1, 1.5, nan}) {
    o.momentum = m;
    expect_error_with([&] { make_optimizer(o); },
                      {"optimizer 'momentum': momentum must be in [0, 1)"});
  }
  o.momentum = 0.0;
  EXPECT_NO_THROW(make_optimizer(o));

  o = OptimizerOptions{};
  o.name = "adam";
  o.momentum = 7.0;  // not adam's field: ignored
  EXPECT_NO_THROW(make_optimizer(o));
  o.beta1 = 1.0;
  expect_error_with([&] { make_optimizer(o); },
                    {"optimizer 'adam': beta1 must be in [0, 1), got 1"});
  o.beta1 = 0.9;
  o.beta2 = -0.5;
  expect_error_with([&] { make_optimizer(o); },
                    {"optimizer 'adam': beta2 must be in [0, 1), got -0.5"});
  o.beta2 = 0.999;
  for (const double e : {0.0, -1e-8, nan, std::numeric_limits<double>::infinity()}) {
    o.epsilon = e;
    expect_error_with([&] { make_optimizer(o); },
                      {"optimizer 'adam': epsilon must be finite and > 0"});
  }
}

TEST(Optimizer, StepArgumentErrors) {
  for (const std::string name : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(name);
    auto opt = make(name);
    Tensor w = Tensor::zeros({6});
    expect_error_with([&] { opt->step(w, Tensor::zeros({5}), 0.1); },
                      {name + " step: params have 6 elements but grads have 5"});
    expect_error_with([&] { opt->step(w, Tensor::zeros({6}, DType::i32), 0.1); },
                      {name + " grads must be f32"});
    Tensor wi = Tensor::zeros({6}, DType::i64);
    expect_error_with([&] { opt->step(wi, Tensor::zeros({6}), 0.1); },
                      {name + " params must be f32"});
    Tensor undefined;
    expect_error_with([&] { opt->step(undefined, Tensor::zeros({6}), 0.1); },
                      {name + " step: params are undefined"});
    Tensor strided = Tensor::zeros({6, 2}).slice(1, 0, 1);
    expect_error_with(
        [&] {
          opt->step(strided, Tensor::zeros({6, 1}), 0.1);
        },
        {"must be contiguous"});
    for (const double lr : {-0.1, std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity()}) {
      expect_error_with([&] { opt->step(w, Tensor::zeros({6}), lr); },
                        {name + " step: learning rate must be finite and >= 0"});
    }
  }
}

TEST(Optimizer, LoadStateErrors) {
  const Tensor f = Tensor::zeros({kN});
  const Tensor step3 = Tensor::from_vector<int64_t>({3}, {1});

  auto sgd = make("sgd");
  expect_error_with(
      [&] {
        sgd->load_state({{"momentum/accum", f}});
      },
      {"sgd load_state: unexpected entry 'momentum/accum' (expected nothing"});

  auto mom = make("momentum");
  expect_error_with(
      [&] {
        mom->load_state({{"momentum", f}});
      },
      {"momentum load_state: unexpected entry 'momentum' (expected momentum/accum"});
  expect_error_with(
      [&] {
        mom->load_state({{"momentum/accum", f}, {"momentum/accum", f}});
      },
      {"entry 'momentum/accum' appears twice"});
  expect_error_with(
      [&] {
        mom->load_state({{"momentum/accum", Tensor::zeros({2, 3})}});
      },
      {"'momentum/accum' must be a 1-D f32 tensor, got Tensor(f32, cpu, [2, 3])"});
  expect_error_with(
      [&] {
        mom->load_state({{"momentum/accum", Tensor::zeros({3}, DType::i32)}});
      },
      {"'momentum/accum' must be a 1-D f32 tensor"});
  expect_error_with([&] { mom->load_state({{"momentum/accum", Tensor()}}); }, {"is undefined"});

  auto adam = make("adam");
  expect_error_with(
      [&] {
        adam->load_state({{"adam/m", f}, {"adam/v", f}});
      },
      {"adam load_state: missing entry 'adam/step' (expected adam/m, adam/v, adam/step; "
       "got adam/m, adam/v)"});
  expect_error_with(
      [&] {
        adam->load_state({{"adam/m", f}, {"adam/v", Tensor::zeros({5})}, {"adam/step", step3}});
      },
      {"'adam/m' has 4099 elements but 'adam/v' has 5"});
  expect_error_with(
      [&] {
        adam->load_state({{"adam/m", f}, {"adam/v", f}, {"adam/step", Tensor::full({1}, 3.0)}});
      },
      {"'adam/step' must be a 1-element i64 tensor, got Tensor(f32, cpu, [1])"});
  expect_error_with(
      [&] {
        adam->load_state(
            {{"adam/m", f}, {"adam/v", f}, {"adam/step", Tensor::from_vector<int64_t>({0}, {1})}});
      },
      {"'adam/step' must be >= 1"});
  expect_error_with(
      [&] {
        adam->load_state({{"adam/m", f}, {"adam/v", f}, {"adam/step", step3}, {"adam/t", step3}});
      },
      {"unexpected entry 'adam/t'"});

  // Into live slots: the size must match them; a failed load changes nothing.
  Tensor w = random_normal({kN}, 1.0f, 7), w_ref = w.clone();
  auto ref = make("adam");
  for (int k = 0; k < 2; ++k) {
    adam->step(w, grad_at(kN, k), 0.01);
    ref->step(w_ref, grad_at(kN, k), 0.01);
  }
  const Tensor small = Tensor::zeros({kN - 1});
  expect_error_with(
      [&] {
        adam->load_state({{"adam/m", small}, {"adam/v", small}, {"adam/step", step3}});
      },
      {"'adam/m' has 4098 elements but this optimizer's slot has 4099"});
  expect_error_with(
      [&] {
        adam->load_state(
            {{"adam/m", f}, {"adam/v", f}, {"adam/step", Tensor::from_vector<int64_t>({-1}, {1})}});
      },
      {"must be >= 1"});
  adam->step(w, grad_at(kN, 2), 0.01);
  ref->step(w_ref, grad_at(kN, 2), 0.01);
  expect_bitwise_equal(w, w_ref, "a failed load_state changed nothing");
}

// A state restored into a fresh optimizer is checked against the parameters at the next step.
TEST(Optimizer, RestoredSlotOfWrongSizeThrowsAtStep) {
  auto mom = make("momentum");
  mom->load_state({{"momentum/accum", Tensor::zeros({10})}});
  Tensor w = Tensor::zeros({12});
  expect_error_with([&] { mom->step(w, Tensor::zeros({12}), 0.1); },
                    {"optimizer slot 'momentum/accum' has 10 elements but the parameters have 12"});
  auto adam = make("adam");
  adam->load_state({{"adam/m", Tensor::zeros({10})},
                    {"adam/v", Tensor::zeros({10})},
                    {"adam/step", Tensor::from_vector<int64_t>({4}, {1})}});
  expect_error_with([&] { adam->step(w, Tensor::zeros({12}), 0.1); },
                    {"optimizer slot 'adam/m' has 10 elements but the parameters have 12"});
  EXPECT_EQ(find_state(adam->state(), "adam/step").item<int64_t>(), 4)
      << "a rejected step does not count";
}

}  // namespace
}  // namespace tg
