// Per-worker compressor state (Compressor::state / load_state), what checkpoints carry across a
// resume: for every method, encode -> state -> load_state into a fresh compressor -> encode gives
// the same message bytes as continuing the original; 1-bit SGD's residual is one f32 [total] per
// worker, an absent one round-trips as zeros, snapshots and loads are copies, and a mismatched
// state is refused naming the entry and leaving the compressor as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "terngrad/compressor.h"
#include "tests/terngrad/emulated_reference.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

// Slots like a small net's: conv w, conv b, fc w, fc b.
std::vector<GradSlot> layout() {
  return {{"conv/w", 0, 500}, {"conv/b", 500, 20}, {"fc/w", 520, 1003}, {"fc/b", 1523, 10}};
}
constexpr int64_t kTotal = 1533;
constexpr int kWorkers = 3;

// Worker w's gradient at `step`: fresh values every step, so a residual carried wrongly shows.
Tensor gradient(int64_t step, int worker) {
  Tensor t = Tensor::empty({kTotal});
  init::normal_(t, 0.01f * (worker + 1), 0.1f, 77,
                rng_stream(RngPurpose::test, static_cast<uint64_t>(step), worker));
  return t;
}

std::unique_ptr<Compressor> make(const std::string& method) {
  CompressionOptions o;
  o.method = parse_enum(kMethods, method, "method");
  return make_compressor(o, layout());
}

// The three rounds of one step for kWorkers workers; returns each worker's message bytes.
std::vector<std::vector<uint8_t>> run_step(Compressor& c, int64_t step) {
  std::vector<Tensor> g;
  for (int w = 0; w < kWorkers; ++w) g.push_back(gradient(step, w));
  const std::vector<float> shared = shared_meta(c, g);
  std::vector<std::vector<uint8_t>> msgs;
  Tensor msg = Tensor::empty({static_cast<int64_t>(c.payload_bytes(step))}, DType::u8);
  for (int w = 0; w < kWorkers; ++w) {
    c.encode(g[w], shared.data(), step, w, msg);
    const uint8_t* p = msg.data<uint8_t>();
    msgs.emplace_back(p, p + msg.numel());
  }
  return msgs;
}

std::vector<float> values(const Tensor& t) {
  return t.to(Device::cpu()).contiguous().to_vector<float>();
}

TEST(CompressorState, EveryMethodContinuesBitIdenticallyFromARestoredState) {
  for (const std::string& method : compressor_names()) {
    SCOPED_TRACE(method);
    auto original = make(method);
    for (int64_t step = 0; step < 3; ++step) run_step(*original, step);
    auto restored = make(method);
    for (int w = 0; w < kWorkers; ++w) restored->load_state(w, original->state(w));
    for (int64_t step = 3; step < 6; ++step) {
      const auto a = run_step(*original, step), b = run_step(*restored, step);
      for (int w = 0; w < kWorkers; ++w)
        ASSERT_EQ(a[w], b[w]) << "worker " << w << "'s message at step " << step;
    }
    for (int w = 0; w < kWorkers; ++w) {
      const NamedTensors sa = original->state(w), sb = restored->state(w);
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t i = 0; i < sa.size(); ++i) {
        EXPECT_EQ(sa[i].first, sb[i].first);
        EXPECT_EQ(values(sa[i].second), values(sb[i].second)) << sa[i].first;
      }
    }
  }
}

TEST(CompressorState, StatelessMethodsHaveNoneAndRefuseEntries) {
  for (const std::string method : {"none", "fp16", "terngrad", "qsgd"}) {
    SCOPED_TRACE(method);
    auto c = make(method);
    run_step(*c, 0);
    EXPECT_TRUE(c->state(0).empty());
    EXPECT_TRUE(c->state(7).empty());
    c->load_state(0, {});
    expect_error_with(
        [&] {
          c->load_state(1, {{"residual", Tensor::zeros({kTotal})}});
        },
        {method, "worker 1", "keeps no state", "'residual'"});
  }
}

TEST(CompressorState, OnebitResidualIsOnePerWorkerAndCarriesTheErrorFeedback) {
  auto c = make("onebit");
  // Before any encode every worker's residual is absent: reported as zeros on the host.
  for (int w : {0, 5}) {
    const NamedTensors s = c->state(w);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].first, "residual");
    EXPECT_EQ(s[0].second.dtype(), DType::f32);
    EXPECT_EQ(s[0].second.shape(), Shape({kTotal}));
    EXPECT_TRUE(s[0].second.device().is_cpu());
    EXPECT_EQ(values(s[0].second), std::vector<float>(kTotal, 0.0f));
  }
  run_step(*c, 0);
  // Each worker's residual is its own (different gradients, different errors) and not zero.
  std::vector<std::vector<float>> r;
  for (int w = 0; w < kWorkers; ++w) r.push_back(values(c->state(w)[0].second));
  EXPECT_NE(r[0], r[1]);
  EXPECT_NE(r[1], r[2]);
  EXPECT_NE(r[0], std::vector<float>(kTotal, 0.0f));
  // A worker that never encoded is still absent (zeros), the others untouched by asking.
  EXPECT_EQ(values(c->state(kWorkers)[0].second), std::vector<float>(kTotal, 0.0f));

  // Dropping the residual (a fresh compressor, as a resume that forgot it would) changes the
  // next messages: the round-trip test above is sensitive to it.
  auto fresh = make("onebit");
  EXPECT_NE(run_step(*c, 1), run_step(*fresh, 1));
}

TEST(CompressorState, AnAbsentResidualRoundTripsAsZeros) {
  // Loading the zeros a fresh compressor reports is the same as loading nothing.
  auto a = make("onebit"), b = make("onebit");
  for (int w = 0; w < kWorkers; ++w) b->load_state(w, a->state(w));
  EXPECT_EQ(run_step(*a, 0), run_step(*b, 0));
  EXPECT_EQ(run_step(*a, 1), run_step(*b, 1));
  // Workers 0 and 1 restored, worker 2 absent: mixed states continue alike too.
  auto c = make("onebit"), d = make("onebit");
  run_step(*c, 0);
  for (int w = 0; w < kWorkers - 1; ++w) d->load_state(w, c->state(w));
  auto e = make("onebit");
  for (int w = 0; w < kWorkers - 1; ++w) e->load_state(w, c->state(w));
  e->load_state(kWorkers - 1, make("onebit")->state(kWorkers - 1));
  EXPECT_EQ(run_step(*d, 1), run_step(*e, 1));
}

TEST(CompressorState, SnapshotsAndLoadsAreCopies) {
  auto c = make("onebit");
  run_step(*c, 0);
  NamedTensors snap = c->state(0);
  const std::vector<float> before = values(snap[0].second);
  run_step(*c, 1);  // updates the live residual in place
  EXPECT_EQ(values(snap[0].second), before) << "state() must be a snapshot";

  auto d = make("onebit");
  d->load_state(0, snap);
  snap[0].second.zero_();  // the caller's tensor changes after the load...
  EXPECT_EQ(values(d->state(0)[0].second), before) << "load_state must copy";  // ...not the state
}

TEST(CompressorState, MismatchedStateIsRefusedNamingTheEntryAndChangesNothing) {
  auto c = make("onebit");
  run_step(*c, 0);
  const std::vector<float> kept = values(c->state(1)[0].second);
  const Tensor good = Tensor::zeros({kTotal});
  expect_error_with([&] { c->load_state(1, {}); },
                    {"onebit", "worker 1", "missing entry 'residual'", "got nothing"});
  expect_error_with(
      [&] {
        c->load_state(1, {{"residuals", good}});
      },
      {"worker 1", "unexpected entry 'residuals'", "expected 'residual'"});
  expect_error_with(
      [&] {
        c->load_state(1, {{"residual", good}, {"momentum", good}});
      },
      {"unexpected entry 'momentum'"});
  expect_error_with(
      [&] {
        c->load_state(1, {{"residual", good}, {"residual", good}});
      },
      {"'residual' appears twice"});
  expect_error_with([&] { c->load_state(1, {{"residual", Tensor()}}); }, {"undefined"});
  // Another net's gradient size, another dtype, another rank.
  expect_error_with(
      [&] {
        c->load_state(1, {{"residual", Tensor::zeros({kTotal + 1})}});
      },
      {"worker 1", "f32 [1533]", "[1534]"});
  expect_error_with(
      [&] {
        c->load_state(1, {{"residual", Tensor::zeros({kTotal}, DType::i32)}});
      },
      {"f32 [1533]", "i32"});
  expect_error_with(
      [&] {
        c->load_state(1, {{"residual", Tensor::zeros({3, 511})}});
      },
      {"f32 [1533]", "[3, 511]"});
  expect_error_with([&] { c->load_state(-1, {{"residual", good}}); }, {"worker must be >= 0"});
  expect_error_with([&] { c->state(-2); }, {"worker must be >= 0"});
  EXPECT_EQ(values(c->state(1)[0].second), kept);
}

}  // namespace
}  // namespace tg::tern
