// The batch kernels of terngrad/ternary_batch.h (what ternary_cuda.cu launches) run on the CPU
// through nn/core/simt.h, against the CPU kernels of ternary_cpu.cpp:
//   - the two-pass rule (decide + refine) equals ternary_rule.h's ternary_keep for every primary
//     byte, on edge values (0, +-s, NaN, inf, denormals, x on and beside integers) and random ones;
//   - ternarize + pack: the same bytes as ternarize_pack_cpu for batches of tensors of every tail
//     length around a unit (64 / 80 elements), aligned and misaligned input and output, s > 0,
//     s = 0, s < 0, s NaN, and batches of more than kMaxSlots tensors (several launches); bytes
//     around each output untouched;
//   - error feedback in the pack launch: the same codes and residual bits as the CPU path;
//   - statistics, and in the same kernel the clipped sum of squares: within 1e-12 relative of
//     tensor_stats_cpu / clipped_sum_sq_cpu (double sums in another order), max
//     exact; the same bits at an aligned and a misaligned address; the per-tensor counters back
//     at zero after every launch;
//   - scale: the same floats as scale_accumulated_cpu; unpack + accumulate: the same integers as
//     unpack_accumulate_many_cpu (several vectors, every byte value).
// A CUDA machine checks the GPU's results against this emulation (ternary_cuda_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nn/core/philox.h"
#include "nn/core/simt.h"
#include "terngrad/ternary_batch.h"
#include "terngrad/ternary_kernels.h"
#include "terngrad/ternary_rule.h"
#include "tests/terngrad/ternary_batch_emulation.h"

namespace tg::tern {
namespace {

constexpr uint64_t kSeed = 20170517;

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// ---- the rule --------------------------------------------------------------------------------

bool two_pass_keep(float g, float s, uint32_t b, uint64_t stream, uint64_t i) {
  const float c = keep_scale(s);
  bool pending = false;
  const uint32_t v = batch::decide(g, s, c, b, pending);
  if (pending) {
    EXPECT_EQ(v, 1u);
    return batch::refine_keep(g, c, kSeed, stream, i);
  }
  if (v != 1u) {
    EXPECT_EQ(v, g > 0.0f ? 2u : 0u) << "g=" << g;
  }
  return v != 1u;
}

TEST(TernaryBatch, TwoPassRuleEqualsTheRule) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> scalers = {1.0f, 0.37f, 3.0e-3f, 1.0e-38f, 1.0e-44f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.2f);
  int64_t checked = 0, refined = 0;
  for (float s : scalers) {
    std::vector<float> gs = {0.0f,
                             -0.0f,
                             s,
                             -s,
                             std::nextafter(s, 0.0f),
                             std::nextafter(s, inf),
                             inf,
                             -inf,
                             nan,
                             1.0e-45f,
                             -1.0e-45f,
                             1.0e-40f,
                             2.0f * s};
    for (int k = 0; k <= 256; ++k) {  // x = a * 256 / s on and beside every integer
      const float g = s * static_cast<float>(k) / 256.0f;
      gs.push_back(g);
      gs.push_back(-std::nextafter(g, 0.0f));
      gs.push_back(std::nextafter(g, inf));
    }
    for (int k = 0; k < 2000; ++k) gs.push_back((k % 2 ? -1.0f : 1.0f) * s * u(rng));
    for (size_t j = 0; j < gs.size(); ++j) {
      const float g = gs[j];
      const float c = keep_scale(s);
      for (uint32_t b = 0; b < 256; ++b) {
        const uint64_t stream = rng_stream(RngPurpose::test, b), i = j;
        const bool want = ternary_keep(g, s, c, b, kSeed, stream, i);
        bool pending = false;
        batch::decide(g, s, c, b, pending);
        refined += pending;
        ASSERT_EQ(two_pass_keep(g, s, b, stream, i), want) << "g=" << g << " s=" << s << " b=" << b;
        ++checked;
      }
    }
  }
  EXPECT_GT(refined, 1000) << "the refine pass was hardly exercised";
  EXPECT_GT(checked, 1000000);
}

// ---- ternarize + pack --------------------------------------------------------------------------

// One tensor of a test batch: its gradient, scaler, and where it sits in memory.
struct Case {
  int64_t n;
  float s;
  size_t g_offset;    // floats past a 16-byte boundary
  size_t out_offset;  // bytes past a 16-byte boundary
};

// Runs the batch on the emulated GPU and each tensor through ternarize_pack_cpu; returns false
// (with a failure) on the first difference.
void check_batch(const std::vector<Case>& cases, PackFormat f, uint32_t seed) {
  constexpr size_t kGuard = 16;  // bytes around each output that must stay untouched
  constexpr uint8_t kFill = 0xA7;
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<float>> gmem;  // aligned storage + offset
  std::vector<std::vector<uint8_t>> got, want;
  std::vector<PackTask> tasks;
  for (size_t t = 0; t < cases.size(); ++t) {
    const Case& c = cases[t];
    std::vector<float> g = gaussian(c.n, seed + static_cast<uint32_t>(t));
    if (c.n > 3) g[2] = 0.0f;
    grads.push_back(g);
    gmem.emplace_back(static_cast<size_t>(c.n) + c.g_offset + 8);
    const size_t bytes = packed_bytes(f, c.n);
    got.emplace_back(bytes + 2 * kGuard + 16, kFill);
    want.emplace_back(bytes, 0);
  }
  for (size_t t = 0; t < cases.size(); ++t) {
    const Case& c = cases[t];
    // std::vector<float> storage is 16-byte aligned from the allocator (operator new); place g
    // at the requested offset past a 16-byte boundary.
    float* base = gmem[t].data();
    const size_t skew = (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16 / sizeof(float);
    float* g = base + skew + c.g_offset;
    std::memcpy(g, grads[t].data(), static_cast<size_t>(c.n) * sizeof(float));
    uint8_t* o = got[t].data() + kGuard;
    o += (16 - reinterpret_cast<uintptr_t>(o) % 16) % 16 + c.out_offset;
    const uint64_t stream = rng_stream(RngPurpose::ternarize, 7, 1, t);
    tasks.push_back({g, c.n, c.s, stream, o});
    ternarize_pack_cpu(grads[t].data(), c.n, c.s, kSeed, stream, f, want[t].data());
  }
  const std::vector<batch::PackArgs> plans = batch::plan_pack(tasks.data(), tasks.size(), kSeed, f);
  EXPECT_EQ(plans.size(), (cases.size() + batch::kMaxSlots - 1) / batch::kMaxSlots);
  emulated_pack(tasks, kSeed, f);
  for (size_t t = 0; t < cases.size(); ++t) {
    const Case& c = cases[t];
    SCOPED_TRACE("tensor " + std::to_string(t) + " n=" + std::to_string(c.n) +
                 " s=" + std::to_string(c.s) + " g_offset=" + std::to_string(c.g_offset) +
                 " out_offset=" + std::to_string(c.out_offset) +
                 (f == PackFormat::two_bit ? " two_bit" : " base3"));
    const uint8_t* o = tasks[t].out;
    const std::vector<uint8_t> bytes(o, o + want[t].size());
    ASSERT_EQ(bytes, want[t]);
    for (const uint8_t* p = got[t].data(); p < o; ++p) ASSERT_EQ(*p, kFill) << "before the output";
    for (const uint8_t* p = o + want[t].size(); p < got[t].data() + got[t].size(); ++p)
      ASSERT_EQ(*p, kFill) << "after the output";
  }
}

TEST(TernaryBatch, PackEqualsCpuOnEveryTail) {
  for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
    std::vector<Case> cases;
    // Every length up to two units and a bit, then a few multi-block tensors.
    for (int64_t n = 1; n <= 170; ++n)
      cases.push_back({n, 1.5f, static_cast<size_t>(n % 4), static_cast<size_t>(n % 16)});
    for (int64_t n : {int64_t{8192}, int64_t{8193}, int64_t{10240 + 79}, int64_t{3 * 8192 + 5}})
      cases.push_back({n, 2.0f, 0, 0});
    check_batch(cases, f, 11);  // 174 tensors: three launches
  }
}

TEST(TernaryBatch, PackHandlesScalersAndAlignment) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
    std::vector<Case> cases;
    for (float s : {0.2f, 1.0f, 3.0f, 1e-30f, 0.0f, -1.0f, nan})
      for (size_t go : {size_t{0}, size_t{1}, size_t{3}})
        for (size_t oo : {size_t{0}, size_t{1}, size_t{5}})
          cases.push_back({1000 + static_cast<int64_t>(go * 7 + oo), s, go, oo});
    check_batch(cases, f, 29);
  }
}

// Error feedback in the pack launch: the codes of v = residual + g and residual = v - s * code,
// against the CPU path (which the compressor's error-feedback tests check against the library's
// reference): the same bytes and the same residual bits, misaligned residuals and tails included.
TEST(TernaryBatch, PackWithResidualEqualsCpu) {
  for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
    std::vector<std::vector<float>> g, res_gpu, res_cpu;
    std::vector<std::vector<uint8_t>> out_gpu, out_cpu;
    std::vector<int64_t> ns;
    for (int t = 0; t < 70; ++t) ns.push_back(t < 66 ? 1 + 13 * t : 9000 + 7 * t);
    for (size_t t = 0; t < ns.size(); ++t) {
      g.push_back(gaussian(ns[t] + 1, 40 + static_cast<uint32_t>(t)));
      std::vector<float> r = gaussian(ns[t] + 1, 90 + static_cast<uint32_t>(t));
      for (float& v : r) v *= 0.3f;
      res_gpu.push_back(r);
      res_cpu.push_back(r);
      out_gpu.emplace_back(packed_bytes(f, ns[t]));
      out_cpu.emplace_back(packed_bytes(f, ns[t]));
    }
    std::vector<PackTask> emu, cpu;
    for (size_t t = 0; t < ns.size(); ++t) {
      const size_t skew = t % 2;  // odd tensors: residual and g 4 bytes off
      const float s = t % 9 == 8 ? 0.0f : 1.2f;
      const uint64_t stream = rng_stream(RngPurpose::ternarize, 5, 2, t);
      const bool ef = t % 5 != 4;  // a mixed batch: launches with and without residuals
      emu.push_back({g[t].data() + skew, ns[t], s, stream, out_gpu[t].data(), nullptr,
                     ef ? res_gpu[t].data() + skew : nullptr});
      cpu.push_back({g[t].data() + skew, ns[t], s, stream, out_cpu[t].data(), nullptr,
                     ef ? res_cpu[t].data() + skew : nullptr});
    }
    EXPECT_GT(batch::plan_pack(emu.data(), emu.size(), kSeed, f).size(), 20u);
    emulated_pack(emu, kSeed, f);
    ternarize_pack_batch_cpu(cpu.data(), cpu.size(), kSeed, f);
    for (size_t t = 0; t < ns.size(); ++t) {
      SCOPED_TRACE("tensor " + std::to_string(t));
      ASSERT_EQ(out_gpu[t], out_cpu[t]);
      ASSERT_EQ(res_gpu[t], res_cpu[t]);
    }
  }
  // And the CPU path is v's codes and v - s * code, spelled out for one tensor.
  const int64_t n = 333;
  std::vector<float> g = gaussian(n, 1), r = gaussian(n, 2), v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = r[i] + g[i];
  std::vector<uint8_t> want(packed_bytes(PackFormat::two_bit, n)), got(want.size());
  ternarize_pack_cpu(v.data(), n, 1.5f, kSeed, 77, PackFormat::two_bit, want.data());
  const PackTask t{g.data(), n, 1.5f, 77, got.data(), nullptr, r.data()};
  ternarize_pack_batch_cpu(&t, 1, kSeed, PackFormat::two_bit);
  EXPECT_EQ(got, want);
  std::vector<int32_t> code(n, 0);
  unpack_accumulate_cpu(want.data(), n, PackFormat::two_bit, code.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r[i], v[i] - static_cast<float>(code[i]) * 1.5f) << i;
}

TEST(TernaryBatch, PackChecksArguments) {
  float g[4] = {1, 2, 3, 4};
  uint8_t out[4];
  PackTask bad{g, -1, 1.0f, 0, out};
  EXPECT_THROW(batch::plan_pack(&bad, 1, kSeed, PackFormat::two_bit), Error);
  PackTask null_out{g, 4, 1.0f, 0, nullptr};
  EXPECT_THROW(batch::plan_pack(&null_out, 1, kSeed, PackFormat::two_bit), Error);
  PackTask empty{nullptr, 0, 1.0f, 0, nullptr};
  EXPECT_TRUE(batch::plan_pack(&empty, 1, kSeed, PackFormat::two_bit).empty());
  EXPECT_THROW(batch::plan_pack(&empty, 1, kSeed, static_cast<PackFormat>(7)), Error);
}

// ---- statistics ----------------------------------------------------------------------------

void expect_close(double got, double want, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), 1e-12 * std::max(1.0, std::fabs(want))) << what;
}

TEST(TernaryBatch, StatsMatchCpuAndAlignment) {
  // Sizes: below a group of 4, around one block's chunk, several blocks, the block cap.
  const std::vector<int64_t> sizes = {0, 1, 3, 4, 5, 255, 1024, 4095, 4096, 4097, 40000, 70001};
  std::vector<std::vector<float>> store;
  store.reserve(2 * sizes.size());  // pointers into it stay valid
  std::vector<StatsTask> aligned, skewed;
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<float> g = gaussian(sizes[t], 100 + static_cast<uint32_t>(t));
    for (float& v : g) v = v * 0.01f + 0.003f;  // a non-zero mean
    if (sizes[t] > 10) g[7] = -7.5f;            // the max, negative
    float* at[2];
    for (int k = 0; k < 2; ++k) {
      store.emplace_back(g.size() + 8);
      float* base = store.back().data();
      base += (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16 / sizeof(float);
      at[k] = base + 5 * k;  // the second copy 16 + 4 bytes past a 16-byte boundary
      std::memcpy(at[k], g.data(), g.size() * sizeof(float));
    }
    aligned.push_back({at[0], sizes[t]});
    skewed.push_back({at[1], sizes[t]});
  }
  const std::vector<TensorStats> a = emulated_stats(aligned), b = emulated_stats(skewed);
  for (size_t t = 0; t < sizes.size(); ++t) {
    SCOPED_TRACE("n=" + std::to_string(sizes[t]));
    TensorStats want;
    tensor_stats_cpu(aligned[t].g, sizes[t], &want);
    EXPECT_EQ(a[t].n, sizes[t]);
    EXPECT_EQ(a[t].max_abs, want.max_abs);
    expect_close(a[t].sum, want.sum, "sum");
    expect_close(a[t].sum_sq, want.sum_sq, "sum_sq");
    expect_close(a[t].l1, want.l1, "l1");
    // The same values at another alignment: the same bits (float4 or scalar loads, one order).
    EXPECT_EQ(a[t].sum, b[t].sum);
    EXPECT_EQ(a[t].sum_sq, b[t].sum_sq);
    EXPECT_EQ(a[t].l1, b[t].l1);
    EXPECT_EQ(a[t].max_abs, b[t].max_abs);
  }
}

TEST(TernaryBatch, StatsOverManyLaunches) {
  // 150 small tensors: three launches, each electing its last blocks with the same counters.
  std::vector<std::vector<float>> store;
  store.reserve(150);
  std::vector<StatsTask> tasks;
  for (int t = 0; t < 150; ++t) {
    store.push_back(gaussian(1 + 97 * t, static_cast<uint32_t>(t)));
    tasks.push_back({store.back().data(), static_cast<int64_t>(store.back().size())});
  }
  const std::vector<TensorStats> got = emulated_stats(tasks);
  for (size_t t = 0; t < tasks.size(); ++t) {
    TensorStats want;
    tensor_stats_cpu(tasks[t].g, tasks[t].n, &want);
    ASSERT_EQ(got[t].max_abs, want.max_abs) << t;
    expect_close(got[t].sum_sq, want.sum_sq, "sum_sq of tensor " + std::to_string(t));
  }
}

TEST(TernaryBatch, ClippedSumOfSquaresMatchesCpu) {
  // The statistics kernel in its clipped mode: the sum of min(g_i^2, s^2), s below, inside and
  // above the values' range, and s = 0.
  std::vector<std::vector<float>> store;
  store.reserve(8);
  std::vector<StatsTask> tasks;
  std::vector<float> scalers = {0.5f, 1.0f, 2.5f, 100.0f, 0.0f, 1.0f, 0.1f, 3.0f};
  const int64_t sizes[] = {1, 5, 4096, 40001, 333, 0, 70000, 17};
  for (size_t t = 0; t < 8; ++t) {
    store.push_back(gaussian(sizes[t], 500 + static_cast<uint32_t>(t)));
    tasks.push_back({store.back().data(), sizes[t]});
  }
  const std::vector<TensorStats> got = emulated_stats(tasks, scalers.data());
  std::vector<double> cpu(8);
  clipped_sum_sq_batch_cpu(tasks.data(), tasks.size(), scalers.data(), cpu.data());
  for (size_t t = 0; t < 8; ++t) {
    SCOPED_TRACE("n=" + std::to_string(sizes[t]) + " s=" + std::to_string(scalers[t]));
    EXPECT_EQ(cpu[t], clipped_sum_sq_cpu(tasks[t].g, tasks[t].n, scalers[t]));
    // The CPU sums sequentially: its rounding error grows to n * 2^-53 of the sum.
    EXPECT_LE(std::fabs(got[t].sum_sq - cpu[t]),
              std::max(1e-12, 2.0 * sizes[t] * std::ldexp(1.0, -53)) * std::max(1.0, cpu[t]))
        << "clipped sum of squares";
    EXPECT_EQ(got[t].sum, 0.0);
  }
  EXPECT_EQ(got[4].sum_sq, 0.0);  // s = 0 clips everything to 0
}

// ---- scale -----------------------------------------------------------------------------------

TEST(TernaryBatch, ScaleEqualsCpu) {
  std::vector<std::vector<int32_t>> acc;
  std::vector<std::vector<float>> got, want;
  std::vector<ScaleTask> tasks;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> d(-8, 8);
  for (int t = 0; t < 80; ++t) {
    const int64_t n = 1 + 53 * t;
    acc.emplace_back(static_cast<size_t>(n) + 1);
    for (int32_t& v : acc.back()) v = d(rng);
    got.emplace_back(static_cast<size_t>(n) + 1, -99.0f);
    want.emplace_back(static_cast<size_t>(n), 0.0f);
  }
  for (int t = 0; t < 80; ++t) {
    const int64_t n = static_cast<int64_t>(want[t].size());
    const size_t skew = t % 2;  // odd tensors misaligned
    const float scale = 0.013f * static_cast<float>(t + 1);
    tasks.push_back({acc[t].data() + skew, n, scale, got[t].data() + skew});
    scale_accumulated_cpu(acc[t].data() + skew, n, scale, want[t].data());
  }
  emulated_scale(tasks);
  for (int t = 0; t < 80; ++t) {
    const float* o = tasks[t].out;
    ASSERT_EQ(std::vector<float>(o, o + want[t].size()), want[t]) << "tensor " << t;
  }
}

// ---- unpack + accumulate ---------------------------------------------------------------------

TEST(TernaryBatch, UnpackEqualsCpu) {
  // 90 tensors (two launches), 1 to 3 vectors each at a stride longer than a vector, random
  // bytes: every byte value, including those the packer never writes (decoded as code 0).
  for (PackFormat f : {PackFormat::two_bit, PackFormat::base3}) {
    std::mt19937 rng(17);
    std::vector<std::vector<uint8_t>> packed;
    std::vector<std::vector<int32_t>> got, want;
    std::vector<UnpackTask> tasks;
    for (int t = 0; t < 90; ++t) {
      const int64_t n = 1 + 41 * t, count = 1 + t % 3;
      const size_t stride = packed_bytes(f, n) + t % 7;
      packed.emplace_back(stride * count);
      for (uint8_t& b : packed.back()) b = static_cast<uint8_t>(rng());
      got.emplace_back(static_cast<size_t>(n), t);
      want.emplace_back(static_cast<size_t>(n), t);
    }
    for (int t = 0; t < 90; ++t) {
      const int64_t n = static_cast<int64_t>(got[t].size()), count = 1 + t % 3;
      const size_t stride = packed[t].size() / count;
      tasks.push_back({packed[t].data(), count, stride, n, got[t].data()});
      unpack_accumulate_many_cpu(packed[t].data(), count, stride, n, f, want[t].data());
    }
    emulated_unpack(tasks, f);
    for (int t = 0; t < 90; ++t) ASSERT_EQ(got[t], want[t]) << "tensor " << t;
  }
}

// The CPU batch calls are the per-tensor kernels in order.
TEST(TernaryBatch, CpuBatchCallsEqualPerTensorCalls) {
  const std::vector<float> g = gaussian(5000, 9);
  std::vector<PackTask> tasks;
  std::vector<std::vector<uint8_t>> out;
  for (int t = 0; t < 5; ++t) out.emplace_back(packed_bytes(PackFormat::base3, 1000));
  for (int t = 0; t < 5; ++t)
    tasks.push_back({g.data() + 1000 * t, 1000, 1.0f, uint64_t(t), out[t].data()});
  ternarize_pack_batch_cpu(tasks.data(), tasks.size(), kSeed, PackFormat::base3);
  for (int t = 0; t < 5; ++t) {
    std::vector<uint8_t> want(packed_bytes(PackFormat::base3, 1000));
    ternarize_pack_cpu(g.data() + 1000 * t, 1000, 1.0f, kSeed, t, PackFormat::base3, want.data());
    EXPECT_EQ(out[t], want);
  }
  std::vector<StatsTask> st = {{g.data(), 5000}, {g.data(), 0}};
  TensorStats res[2], one;
  tensor_stats_batch_cpu(st.data(), 2, res);
  tensor_stats_cpu(g.data(), 5000, &one);
  EXPECT_EQ(res[0].sum, one.sum);
  EXPECT_EQ(res[1].n, 0);
  EXPECT_THROW(tensor_stats_batch_cpu(nullptr, 1, res), Error);
}

}  // namespace
}  // namespace tg::tern
