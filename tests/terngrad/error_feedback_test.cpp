// TernGrad with error feedback (CompressionOptions::error_feedback): worker w ternarizes
// v = g + e_w with g's scaler s and keeps e_w = v - s * code. Its defining properties, checked
// here:
//   - telescoping: after T steps, sum of what worker w's messages carried + e_w = sum of its
//     gradients (in f32 arithmetic, to a stated tolerance), so nothing is lost, only delayed;
//   - hence the time average of the messages tends to the time average of the gradients, where
//     plain TernGrad with clipping keeps a bias (clipped elements shrink to the scaler);
//   - the scalers are the gradient's, as without feedback (a scaler of v would feed the residual
//     back into itself and grow: see CompressionOptions::error_feedback); the wire is byte for
//     byte plain TernGrad's (same layout; step 0, with zero residuals, the same messages);
//   - the residual is per-worker state that round-trips through state/load_state exactly.
// Exact aggregation across ranks is checked with every other method in
// tests/terngrad/aggregate_test.cpp and comm/reducer_test.cpp; resuming a training run in
// cmd/train_compressor_state_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "nn/core/philox.h"
#include "terngrad/compressor.h"
#include "tests/terngrad/emulated_reference.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

std::vector<GradSlot> layout() {
  return {{"conv/w", 0, 600}, {"conv/b", 600, 6}, {"fc/w", 606, 1200}, {"fc/b", 1806, 10}};
}
constexpr int64_t kTotal = 1816;

// Worker w's gradient at `step`: roughly normal, with every 53rd element 10x larger so that 2.5
// sigma clipping cuts it.
std::vector<float> gradient_values(int64_t step, int worker, float scale = 1.0f) {
  std::vector<float> v(kTotal);
  const uint64_t stream = 5000 + 64 * static_cast<uint64_t>(step) + static_cast<uint64_t>(worker);
  for (int64_t i = 0; i < kTotal; ++i) {
    const float u1 = uniform01(philox_word(11, stream, 2 * i)) + 1e-7f;
    const float u2 = uniform01(philox_word(11, stream, 2 * i + 1));
    float x = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    if (i % 53 == 0) x = 10.0f * (x >= 0 ? 1.0f : -1.0f) + x;
    v[i] = scale * (0.01f * static_cast<float>(worker + 1)) * x;
  }
  return v;
}

Tensor gradient(int64_t step, int worker) {
  return Tensor::from_vector(gradient_values(step, worker), {kTotal});
}

CompressionOptions options(bool feedback, ScalerSharing sharing = ScalerSharing::max) {
  CompressionOptions o;
  o.method = Method::terngrad;
  o.min_size = 8;  // conv/b (6) travels as raw f32
  o.scaler_sharing = sharing;
  o.error_feedback = feedback;
  return o;
}

// What one worker's message carries, decoded on its own: s * code on ternary slots, the floats
// on raw ones (finalize of that one message with workers = 1).
std::vector<float> decode(const Compressor& c, const Tensor& msg, const std::vector<float>& shared,
                          int64_t step) {
  Accumulator acc = c.make_accumulator(Device::cpu());
  c.accumulate(msg, shared.data(), step, acc);
  Tensor out = Tensor::empty({c.total()});
  c.finalize(acc, shared.data(), step, 1, out);
  return out.to_vector<float>();
}

struct Step {
  std::vector<float> shared;
  std::vector<Tensor> msgs;  // per worker
};

// One step of `workers` workers: round 1 (shared scalers), then each worker's message.
Step run_step(Compressor& c, int64_t step, int workers,
              const std::function<Tensor(int64_t, int)>& grad = gradient) {
  std::vector<Tensor> g;
  for (int w = 0; w < workers; ++w) g.push_back(grad(step, w));
  Step s{shared_meta(c, g), {}};
  for (int w = 0; w < workers; ++w) {
    Tensor msg = Tensor::empty({static_cast<int64_t>(c.payload_bytes(step))}, DType::u8);
    c.encode(g[w], s.shared.data(), step, w, msg);
    s.msgs.push_back(msg);
  }
  return s;
}

std::vector<float> residual(const Compressor& c, int worker) {
  return c.state(worker).at(0).second.to_vector<float>();
}

TEST(ErrorFeedback, WhatTheMessagesCarryPlusTheResidualIsTheSumOfTheGradients) {
  for (ScalerSharing sharing : {ScalerSharing::max, ScalerSharing::none}) {
    SCOPED_TRACE(enum_name(kScalerSharings, sharing));
    auto c = make_compressor(options(true, sharing), layout());
    constexpr int kWorkers = 3, kSteps = 40;
    std::vector<std::vector<double>> sent(kWorkers, std::vector<double>(kTotal, 0.0));
    std::vector<std::vector<double>> grads = sent, mag = sent;
    for (int64_t step = 0; step < kSteps; ++step) {
      const Step s = run_step(*c, step, kWorkers);
      for (int w = 0; w < kWorkers; ++w) {
        const std::vector<float> d = decode(*c, s.msgs[w], s.shared, step);
        const std::vector<float> g = gradient_values(step, w);
        for (int64_t i = 0; i < kTotal; ++i) {
          sent[w][i] += d[i];
          grads[w][i] += g[i];
          mag[w][i] += std::fabs(d[i]) + std::fabs(g[i]);
        }
      }
    }
    // Each step adds one f32 rounding of |v| and one of |v - s code| to the residual: the
    // identity holds to a few f32 ulps of the magnitudes involved, far below what one dropped
    // code would leave (the scaler, ~2.5 sigma).
    int raw_exact = 0;
    for (int w = 0; w < kWorkers; ++w) {
      const std::vector<float> e = residual(*c, w);
      double worst = 0;
      for (int64_t i = 0; i < kTotal; ++i) {
        const double err = std::fabs(sent[w][i] + e[i] - grads[w][i]);
        worst = std::max(worst, err / (mag[w][i] + 1e-30));
        if (i >= 600 && i < 606) {
          // Raw f32 slot: carried as is, no residual.
          EXPECT_EQ(e[i], 0.0f);
          raw_exact += sent[w][i] == grads[w][i];
        }
      }
      EXPECT_LT(worst, 1e-5) << "worker " << w;
    }
    EXPECT_EQ(raw_exact, kWorkers * 6);
  }
}

TEST(ErrorFeedback, RemovesTheClippingBiasOfTheTimeAverage) {
  // Gradients g_t = mu + noise_t whose mean mu has an element in 53 two sigma out (a
  // persistent direction that 2.5 sigma clipping cuts). Plain TernGrad's messages average to
  // E[clip(g_t)], short of mu on those elements; with error feedback the average of the messages
  // is the average of the gradients up to residual / T, and stays bounded (the scaler is g's).
  constexpr int kSteps = 400;
  const auto mean_of = [](int64_t i) { return i % 53 == 0 ? 0.02f : 0.0f; };
  const auto noisy = [&](int64_t step, int) {
    std::vector<float> v(kTotal);
    for (int64_t i = 0; i < kTotal; ++i) {
      const uint64_t stream = 9000 + static_cast<uint64_t>(step);
      const float u1 = uniform01(philox_word(13, stream, 2 * i)) + 1e-7f;
      const float u2 = uniform01(philox_word(13, stream, 2 * i + 1));
      v[i] = mean_of(i) + 0.01f * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
    return Tensor::from_vector(v, {kTotal});
  };
  double err[2] = {0, 0}, residual_norm = 0, grad_norm = 0;
  for (bool feedback : {false, true}) {
    auto c = make_compressor(options(feedback), layout());
    std::vector<double> sent(kTotal, 0.0), grads(kTotal, 0.0);
    for (int64_t step = 0; step < kSteps; ++step) {
      const Step s = run_step(*c, step, 1, noisy);
      const std::vector<float> d = decode(*c, s.msgs[0], s.shared, step);
      const std::vector<float> g = noisy(step, 0).to_vector<float>();
      for (int64_t i = 0; i < kTotal; ++i) {
        sent[i] += d[i];
        grads[i] += g[i];
      }
    }
    // Relative error of the time average on the persistent elements.
    double e2 = 0, n2 = 0;
    for (int64_t i = 0; i < kTotal; i += 53) {
      e2 += (sent[i] - grads[i]) * (sent[i] - grads[i]);
      n2 += grads[i] * grads[i];
    }
    err[feedback] = std::sqrt(e2 / n2);
    if (feedback) {
      for (float x : residual(*c, 0)) residual_norm += static_cast<double>(x) * x;
      for (float x : noisy(kSteps - 1, 0).to_vector<float>())
        grad_norm += static_cast<double>(x) * x;
    }
  }
  // Measured with these seeds: plain 0.082 (the clipping bias, E[(g - s)+] / mu = 0.07, plus the
  // sampling noise of a 400-step average), error feedback 0.0019 (the residual also cancels the
  // noise); the final residual 1.04 gradients.
  EXPECT_GT(err[0], 0.05);
  EXPECT_LT(err[1], 0.01);
  EXPECT_LT(std::sqrt(residual_norm / grad_norm), 3.0);
}

TEST(ErrorFeedback, ScalersAreTheGradientsAndTheWireIsUnchanged) {
  auto plain = make_compressor(options(false), layout());
  auto ef = make_compressor(options(true), layout());
  for (int64_t step : {0, 5}) {
    EXPECT_EQ(ef->payload_bytes(step), plain->payload_bytes(step));
    const WireLayout a = ef->wire(step), b = plain->wire(step);
    ASSERT_EQ(a.slots.size(), b.slots.size());
    for (size_t t = 0; t < a.slots.size(); ++t) {
      EXPECT_EQ(a.slots[t].coding, b.slots[t].coding);
      EXPECT_EQ(a.slots[t].bytes, b.slots[t].bytes);
    }
  }
  // Step 0, every residual zero: the very same messages.
  const Step s0 = run_step(*ef, 0, 2), p0 = run_step(*plain, 0, 2);
  EXPECT_EQ(s0.shared, p0.shared);
  for (int w = 0; w < 2; ++w)
    EXPECT_EQ(
        std::memcmp(s0.msgs[w].data<uint8_t>(), p0.msgs[w].data<uint8_t>(), s0.msgs[w].numel()), 0);
  // Step 1: the scaler candidates are the gradient's, as without feedback; the messages differ
  // (the residuals are not zero any more).
  const Step s1 = run_step(*ef, 1, 2), p1 = run_step(*plain, 1, 2);
  EXPECT_EQ(s1.shared, p1.shared);
  const std::vector<float> e = residual(*ef, 1);
  EXPECT_NE(e, std::vector<float>(kTotal, 0.0f));
  EXPECT_NE(std::memcmp(s1.msgs[1].data<uint8_t>(), p1.msgs[1].data<uint8_t>(), s1.msgs[1].numel()),
            0);
  std::vector<float> meta(ef->num_meta());
  ef->local_meta(gradient(2, 1), meta.data());
  // Asking for worker 1's meta did not change its residual.
  EXPECT_EQ(residual(*ef, 1), e);
}

TEST(ErrorFeedback, ResidualRoundTripsAndDroppingItChangesTheMessages) {
  for (ScalerSharing sharing : {ScalerSharing::max, ScalerSharing::none}) {
    SCOPED_TRACE(enum_name(kScalerSharings, sharing));
    auto a = make_compressor(options(true, sharing), layout());
    for (int64_t step = 0; step < 3; ++step) run_step(*a, step, 2);
    auto b = make_compressor(options(true, sharing), layout());
    for (int w = 0; w < 2; ++w) {
      const NamedTensors st = a->state(w);
      ASSERT_EQ(st.size(), 1u);
      EXPECT_EQ(st[0].first, "residual");
      EXPECT_EQ(st[0].second.shape(), Shape({kTotal}));
      b->load_state(w, st);
    }
    auto fresh = make_compressor(options(true, sharing), layout());
    const Step sa = run_step(*a, 3, 2), sb = run_step(*b, 3, 2), sf = run_step(*fresh, 3, 2);
    EXPECT_EQ(sa.shared, sb.shared);
    for (int w = 0; w < 2; ++w) {
      const int64_t n = sa.msgs[w].numel();
      EXPECT_EQ(std::memcmp(sa.msgs[w].data<uint8_t>(), sb.msgs[w].data<uint8_t>(), n), 0);
      EXPECT_NE(std::memcmp(sa.msgs[w].data<uint8_t>(), sf.msgs[w].data<uint8_t>(), n), 0);
      EXPECT_EQ(residual(*a, w), residual(*b, w));
    }
  }
  // Without error feedback terngrad keeps no state, and says so for a residual.
  auto plain = make_compressor(options(false), layout());
  EXPECT_TRUE(plain->state(0).empty());
  expect_error_with(
      [&] {
        plain->load_state(0, {{"residual", Tensor::zeros({kTotal})}});
      },
      {"terngrad", "keeps no state"});
  // With it, a mismatched residual is refused naming the method.
  auto ef = make_compressor(options(true), layout());
  expect_error_with(
      [&] {
        ef->load_state(0, {{"residual", Tensor::zeros({kTotal - 1})}});
      },
      {"terngrad (error feedback)", "worker 0", "f32 [1816]", "[1815]"});
}

TEST(ErrorFeedback, OtherMethodsIgnoreTheOptionLikeEveryTernGradKey) {
  // As clip or pack: the option is TernGrad's (onebit always keeps a residual).
  for (Method m : {Method::none, Method::fp16, Method::qsgd}) {
    CompressionOptions o;
    o.method = m;
    o.error_feedback = true;
    auto c = make_compressor(o, layout());
    run_step(*c, 0, 2);
    EXPECT_TRUE(c->state(0).empty()) << enum_name(kMethods, m);
  }
}

}  // namespace
}  // namespace tg::tern
