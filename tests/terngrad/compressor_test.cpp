// The compressor layer: the three rounds (meta + max, encode, accumulate + finalize) for N
// emulated workers against hand-computed references, TernGrad's exclusion rules and wire sizes,
// exactness (order independence, the (s/N){-N..N} grid), and the baselines' plumbing.
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "terngrad/baseline_kernels.h"
#include "tests/terngrad/ternary_reference.h"
#include "tests/testing/errors.h"

namespace tg::tern {
namespace {

using tg::testing::expect_error_with;

// Slots like a small net's: conv w, conv b, fc w, fc b (the last two are the "logits").
std::vector<GradSlot> layout() {
  return {{"conv/w", 0, 500}, {"conv/b", 500, 20}, {"fc/w", 520, 1003}, {"fc/b", 1523, 10}};
}
constexpr int64_t kTotal = 1533;

std::vector<Tensor> gradients(int workers, uint64_t seed = 5) {
  std::vector<Tensor> g;
  for (int w = 0; w < workers; ++w) {
    Tensor t = Tensor::empty({kTotal});
    init::normal_(t, 0.01f * (w + 1), 0.1f, seed, rng_stream(RngPurpose::test, w));
    g.push_back(t);
  }
  return g;
}

// The reference code's training-step semantics, written out element by element.
std::vector<double> reference_terngrad(const std::vector<Tensor>& g,
                                       const std::vector<GradSlot>& slots, double clip,
                                       int64_t step, uint64_t seed) {
  const int n = static_cast<int>(g.size());
  std::vector<double> out(kTotal, 0.0);
  for (size_t t = 0; t < slots.size(); ++t) {
    const GradSlot& sl = slots[t];
    float s = 0;
    for (int w = 0; w < n; ++w) {
      // The statistics kernel is checked against a naive loop in ternary_test.cpp; using it here
      // keeps the scaler bit-identical, so the comparison below can be exact.
      TensorStats st;
      tensor_stats_cpu(g[w].data<float>() + sl.offset, sl.numel, &st);
      const float sw = static_cast<float>(clip > 0 ? clip * st.sigma() : st.max_abs);
      s = w == 0 ? sw : std::max(s, sw);
    }
    for (int64_t i = 0; i < sl.numel; ++i) {
      int codes = 0;
      for (int w = 0; w < n; ++w) {
        const float gi = g[w].data<float>()[sl.offset + i];
        const uint64_t stream = rng_stream(RngPurpose::ternarize, step, w, t);
        codes += reference_code(gi, s, seed, stream, static_cast<uint64_t>(i));
      }
      out[sl.offset + i] = static_cast<double>(s / static_cast<float>(n)) * codes;
    }
  }
  return out;
}

TEST(Compressor, TernGradAggregateEqualsTheHandComputedReference) {
  for (int workers : {1, 2, 4, 8}) {
    for (double clip : {2.5, 0.0}) {
      SCOPED_TRACE(::testing::Message() << workers << " workers, clip " << clip);
      CompressionOptions o;
      o.method = ::tg::tern::Method::terngrad;
      o.clip = clip;
      auto c = make_compressor(o, layout());
      auto g = gradients(workers);
      Tensor out = Tensor::empty({kTotal});
      aggregate_local(*c, g, /*step=*/7, out);
      const auto ref = reference_terngrad(g, layout(), clip, 7, o.seed);
      const float* p = out.data<float>();
      int64_t mismatches = 0;
      for (int64_t i = 0; i < kTotal; ++i) mismatches += p[i] != static_cast<float>(ref[i]);
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(Compressor, SharedScalerAggregatesLieOnTheGridAndIgnoreMessageOrder) {
  constexpr int kWorkers = 4;
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  auto c = make_compressor(o, layout());
  auto g = gradients(kWorkers);
  std::vector<float> shared(c->num_meta()), meta(c->num_meta());
  for (int w = 0; w < kWorkers; ++w) {
    c->local_meta(g[w], meta.data());
    for (size_t i = 0; i < meta.size(); ++i) shared[i] = w ? std::max(shared[i], meta[i]) : meta[i];
  }
  std::vector<Tensor> msgs;
  for (int w = 0; w < kWorkers; ++w) {
    msgs.push_back(Tensor::empty({static_cast<int64_t>(c->payload_bytes(3))}, DType::u8));
    c->encode(g[w], shared.data(), 3, w, msgs.back());
  }
  Tensor fwd = Tensor::empty({kTotal}), rev = Tensor::empty({kTotal});
  Accumulator a = c->make_accumulator(Device::cpu()), b = c->make_accumulator(Device::cpu());
  for (int w = 0; w < kWorkers; ++w) c->accumulate(msgs[w], shared.data(), 3, a);
  for (int w = kWorkers - 1; w >= 0; --w) c->accumulate(msgs[w], shared.data(), 3, b);
  c->finalize(a, shared.data(), 3, kWorkers, fwd);
  c->finalize(b, shared.data(), 3, kWorkers, rev);
  EXPECT_EQ(std::memcmp(fwd.raw_data(), rev.raw_data(), fwd.nbytes()), 0);
  for (size_t t = 0; t < layout().size(); ++t) {
    const GradSlot sl = layout()[t];  // a copy: layout() returns a temporary
    const float step = shared[t] / kWorkers;
    for (int64_t i = 0; i < sl.numel; ++i) {
      const float v = fwd.data<float>()[sl.offset + i];
      const float k = std::round(v / step);
      ASSERT_LE(std::fabs(k), kWorkers);
      ASSERT_EQ(v, step * k) << "slot " << sl.name << " element " << i;
    }
  }
}

TEST(Compressor, TernGradWireSizesAndExclusionRules) {
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  auto c = make_compressor(o, layout());
  EXPECT_EQ(c->payload_bytes(0), 125u + 5u + 251u + 3u);  // ceil(n / 4) per slot
  o.pack = PackFormat::base3;
  EXPECT_EQ(make_compressor(o, layout())->payload_bytes(0), 100u + 4u + 201u + 2u);
  o.pack = PackFormat::two_bit;

  // min_size keeps the biases fp32 (4 bytes per element), quantize_logits = false the fc pair.
  o.min_size = 21;
  EXPECT_EQ(make_compressor(o, layout())->payload_bytes(0), 125u + 80u + 251u + 40u);
  o.min_size = 1;
  o.quantize_logits = false;
  auto nl = make_compressor(o, layout());
  EXPECT_EQ(nl->payload_bytes(0), 125u + 5u + 4012u + 40u);
  // Excluded slots are averaged in fp32: with one worker they come back unchanged.
  auto g = gradients(1);
  Tensor out = Tensor::empty({kTotal});
  aggregate_local(*nl, g, 0, out);
  for (int64_t i = 520; i < kTotal; ++i) ASSERT_EQ(out.data<float>()[i], g[0].data<float>()[i]);

  // Without scaler sharing each message carries its own scaler (4 bytes per ternary slot).
  o.quantize_logits = true;
  o.scaler_sharing = ::tg::tern::ScalerSharing::none;
  auto ns = make_compressor(o, layout());
  EXPECT_EQ(ns->num_meta(), 0);
  EXPECT_EQ(ns->payload_bytes(0), 125u + 5u + 251u + 3u + 16u);
}

TEST(Compressor, NoSharingUsesEachWorkersOwnScaler) {
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  o.scaler_sharing = ::tg::tern::ScalerSharing::none;
  o.clip = 0;  // scaler = max|g| of the worker's own tensor
  auto c = make_compressor(o, layout());
  auto g = gradients(2);
  Tensor out = Tensor::empty({kTotal});
  aggregate_local(*c, g, 1, out);
  // Each worker's contribution is (s_w / 2) * code, so every value is a sum of one of
  // {0, +-s_0/2} and one of {0, +-s_1/2}.
  const GradSlot sl = layout()[2];
  float s[2];
  for (int w = 0; w < 2; ++w) {
    float m = 0;
    for (int64_t i = 0; i < sl.numel; ++i)
      m = std::max(m, std::fabs(g[w].data<float>()[sl.offset + i]));
    s[w] = m;
  }
  for (int64_t i = 0; i < sl.numel; ++i) {
    const float v = out.data<float>()[sl.offset + i];
    bool found = false;
    for (int a = -1; a <= 1 && !found; ++a)
      for (int b = -1; b <= 1 && !found; ++b)
        found = std::fabs(v - (a * s[0] + b * s[1]) / 2) <= 1e-6f * (s[0] + s[1]);
    ASSERT_TRUE(found) << "element " << i << " = " << v;
  }
}

TEST(Compressor, FloatingGradEpochSendsFp32) {
  CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  o.floating_grad_epoch = 2;
  o.steps_per_epoch = 10;
  auto c = make_compressor(o, layout());
  EXPECT_EQ(c->payload_bytes(5), 384u);              // epoch 0: ternary
  EXPECT_EQ(c->payload_bytes(15), c->fp32_bytes());  // epoch 1 = F - 1: fp32
  EXPECT_EQ(c->payload_bytes(25), 384u);             // epoch 2
  auto g = gradients(2);
  Tensor out = Tensor::empty({kTotal});
  aggregate_local(*c, g, 15, out);
  for (int64_t i = 0; i < kTotal; ++i) {
    const float want = (g[0].data<float>()[i] + g[1].data<float>()[i]) * 0.5f;
    ASSERT_NEAR(out.data<float>()[i], want, 1e-6f);
  }
}

TEST(Compressor, NoneIsTheExactMeanAndBaselinesReportTheirKernelSizes) {
  auto g = gradients(3);
  CompressionOptions o;
  auto none = make_compressor(o, layout());
  EXPECT_EQ(none->payload_bytes(0), none->fp32_bytes());
  Tensor out = Tensor::empty({kTotal});
  aggregate_local(*none, g, 0, out);
  for (int64_t i = 0; i < kTotal; ++i) {
    const double want =
        (double(g[0].data<float>()[i]) + g[1].data<float>()[i] + g[2].data<float>()[i]) / 3;
    ASSERT_NEAR(out.data<float>()[i], want, 1e-6);
  }
  size_t fp16 = 0, qsgd = 0, onebit = 0;
  for (const GradSlot& sl : layout()) {
    fp16 += fp16_packed_bytes(sl.numel);
    qsgd += qsgd_packed_bytes(sl.numel, 4, 512);
    onebit += onebit_packed_bytes(sl.numel);
  }
  o.method = ::tg::tern::Method::fp16;
  auto c16 = make_compressor(o, layout());
  EXPECT_EQ(c16->payload_bytes(0), fp16);
  aggregate_local(*c16, g, 0, out);
  for (int64_t i = 0; i < kTotal; ++i) {
    const double want =
        (double(g[0].data<float>()[i]) + g[1].data<float>()[i] + g[2].data<float>()[i]) / 3;
    // fp16 keeps 11 significant bits: each addend is off by at most 2^-11 of itself.
    const double mag = (std::fabs(g[0].data<float>()[i]) + std::fabs(g[1].data<float>()[i]) +
                        std::fabs(g[2].data<float>()[i])) /
                       3;
    ASSERT_NEAR(out.data<float>()[i], want, mag / 2048 + 1e-7);
  }
  o.method = ::tg::tern::Method::qsgd;
  EXPECT_EQ(make_compressor(o, layout())->payload_bytes(0), qsgd);
  o.method = ::tg::tern::Method::onebit;
  auto c1 = make_compressor(o, layout());
  EXPECT_EQ(c1->payload_bytes(0), onebit);
  aggregate_local(*c1, g, 0, out);  // runs, with per-worker error feedback
  for (int64_t i = 0; i < kTotal; ++i) ASSERT_TRUE(std::isfinite(out.data<float>()[i]));
}

// Every slot is compressed on its own, so the rounds over any split of the layout into ranges give
// the bits of the whole (what lets comm/reducer.h bucket freely); each range's wire layout is its
// slots' part of the whole message, and the codings are what terngrad/exchange/aggregate.h routes
// by.
TEST(Compressor, SlotRangesGiveTheBitsOfTheWholeAndDescribeTheirWire) {
  const std::vector<Tensor> g = gradients(3);
  for (const auto& m_entry : kMethods) {
    for (const auto& s_entry : kScalerSharings) {
      const Method method = m_entry.value;
      const ScalerSharing sharing = s_entry.value;
      const std::string method_name(m_entry.name), sharing_name(s_entry.name);
      CompressionOptions o;
      o.method = method;
      o.scaler_sharing = sharing;
      o.min_size = 50;  // terngrad: conv/b and fc/b go as f32
      auto whole = make_compressor(o, layout());
      auto split = make_compressor(o, layout());
      for (int64_t step = 0; step < 2; ++step) {  // two steps: 1-bit residuals carry over
        Tensor a = Tensor::empty({kTotal}), b = Tensor::full({kTotal}, 99.0f);
        aggregate_local(*whole, g, step, a);
        for (SlotRange r : {SlotRange{3, 4}, SlotRange{1, 3}, SlotRange{0, 1}})
          aggregate_local(*split, g, step, b, r);
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0)
            << method_name << " sharing " << sharing_name << " step " << step;
        const WireLayout all = whole->wire(step);
        EXPECT_EQ(static_cast<size_t>(all.bytes), whole->payload_bytes(step));
        const WireLayout mid = whole->wire(step, {1, 3});
        ASSERT_EQ(mid.slots.size(), 2u);
        EXPECT_EQ(mid.bytes, all.slots[1].bytes + all.slots[2].bytes);
        EXPECT_EQ(mid.slots[0].offset, 0);
        EXPECT_EQ(mid.slots[1].offset, all.slots[1].bytes);
        const std::string m = method_name;
        const SlotCoding expect_fc_w =
            m == "none"   ? SlotCoding::f32
            : m == "fp16" ? SlotCoding::f16
            : m == "terngrad"
                ? (sharing == ScalerSharing::max ? SlotCoding::ternary : SlotCoding::opaque)
                : SlotCoding::opaque;
        EXPECT_EQ(all.slots[2].coding, expect_fc_w) << method_name << " " << sharing_name;
        if (m == "terngrad") {
          EXPECT_EQ(all.slots[1].coding, SlotCoding::f32);  // under min_size
        }
      }
    }
  }
  auto c = make_compressor({}, layout());
  expect_error_with([&] { c->wire(0, {2, 5}); }, {"slot range [2, 5)", "4 slots"});
  expect_error_with([&] { c->wire(0, {2, 2}); }, {"slot range"});
}

TEST(Compressor, BadOptionsAreErrorsNamingTheKey) {
  // Names outside the enums' tables are refused where text is parsed, naming the known ones.
  expect_error_with([&] { parse_enum(kMethods, "sparsify", "compression.method"); },
                    {"compression.method", "'sparsify'", "terngrad", "qsgd"});
  expect_error_with([&] { parse_enum(kScalerSharings, "mean", "compression.scaler_sharing"); },
                    {"compression.scaler_sharing", "'mean'", "max, none"});
  CompressionOptions o;
  o.method = Method::terngrad;
  o.clip = -1;
  expect_error_with([&] { make_compressor(o, layout()); }, {"compression.clip"});
  o.clip = 2.5;
  o.floating_grad_epoch = 3;
  expect_error_with([&] { make_compressor(o, layout()); }, {"floating_grad_epoch"});
  std::vector<GradSlot> gap = {{"a", 0, 10}, {"b", 11, 5}};
  o.floating_grad_epoch = 0;
  expect_error_with([&] { make_compressor(o, gap); }, {"'b'", "start at 10"});
}

}  // namespace
}  // namespace tg::tern
