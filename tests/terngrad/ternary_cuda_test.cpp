// TernGrad kernels on CUDA vs CPU: packed bytes bit-identical in both formats (aligned and
// misaligned g, s below/at/above max|g|, s <= 0), unpack_accumulate and scale_accumulated
// bit-identical, stats equal within 1e-12 relative (double sums in a different order; max|g|
// exact). Batches of many tensors (terngrad/ternary_batch.h, several launches, misaligned
// tensors): packed bytes equal the CPU's, stats and scaled floats equal the CPU emulation of
// the same kernels bit for bit. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "terngrad/ternary_kernels.h"
#include "tests/terngrad/ternary_batch_emulation.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

// The _cuda kernels exist only in a CUDA build (ternary_cuda.cu); a CPU-only build compiles this
// file to one skipped test.
#if TG_CUDA

constexpr uint64_t kSeed = 20170517;
constexpr PackFormat kFormats[] = {PackFormat::two_bit, PackFormat::base3};
// Stats: both sides accumulate in double, in different orders: relative error ~ n * 2^-53.
constexpr double kStatsRel = 1e-12;

// A device buffer of `bytes` bytes on GPU 0 (freed on scope exit).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : p_(cuda::malloc_raw(0, std::max<size_t>(bytes, 16))) {}
  ~DeviceBuffer() { cuda::free_raw(0, p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as(size_t offset_bytes = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + offset_bytes);
  }
  void upload(const void* src, size_t bytes, size_t offset_bytes = 0) {
    if (bytes) cuda::copy_h2d(0, static_cast<char*>(p_) + offset_bytes, src, bytes);
  }
  template <typename T>
  std::vector<T> download(size_t count, size_t offset_bytes = 0) const {
    std::vector<T> v(count);
    if (count)
      cuda::copy_d2h(0, v.data(), static_cast<char*>(p_) + offset_bytes, count * sizeof(T));
    return v;
  }

 private:
  void* p_ = nullptr;
};

std::vector<float> gaussian(int64_t n, float sigma, uint64_t stream) {
  const Tensor t = testing::random_normal({n}, sigma, kSeed, stream);
  const float* p = t.data<float>();
  return std::vector<float>(p, p + n);
}

const std::vector<int64_t> kSizes = {1, 3, 4, 5, 7, 19, 20, 21, 33, 1000, 65537, (1 << 20) + 7};

TEST(TernaryCuda, PackedBytesBitIdentical) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (int64_t n : kSizes) {
    std::vector<float> g = gaussian(n, 1.0f, n);
    if (n > 4) g[1] = 0.0f, g[n - 1] = -0.0f;
    float m = 0;
    for (float v : g) m = std::max(m, std::fabs(v));
    // Offset 0 (16-byte aligned: the float4 path) and 1 float (the scalar path).
    for (size_t offset : {size_t{0}, sizeof(float)}) {
      DeviceBuffer dg(n * sizeof(float) + offset);
      dg.upload(g.data(), n * sizeof(float), offset);
      for (PackFormat f : kFormats) {
        const size_t bytes = packed_bytes(f, n);
        DeviceBuffer dp(bytes);
        for (float s : {0.5f * m, m, 2.0f * m, 0.0f, -1.0f}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                       (f == PackFormat::two_bit ? " two_bit" : " base3") +
                       " s=" + std::to_string(s));
          const uint64_t stream = rng_stream(RngPurpose::ternarize, 11, 2, n);
          std::vector<uint8_t> cpu(bytes);
          ternarize_pack_cpu(g.data(), n, s, kSeed, stream, f, cpu.data());
          ternarize_pack_cuda(dg.as<float>(offset), n, s, kSeed, stream, f, dp.as<uint8_t>());
          const std::vector<uint8_t> gpu = dp.download<uint8_t>(bytes);
          ASSERT_EQ(gpu, cpu);
        }
      }
    }
  }
}

// The norm-preserving rescale's ||clamp(g, -s, s)||^2: both sum in double, in different orders.
TEST(TernaryCuda, ClippedSumOfSquaresMatches) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (int64_t n : kSizes) {
    const std::vector<float> g = gaussian(n, 1.0f, 300 + n);
    DeviceBuffer dg(n * sizeof(float));
    dg.upload(g.data(), n * sizeof(float));
    for (float s : {0.5f, 2.5f, 100.0f}) {
      const double cpu = clipped_sum_sq_cpu(g.data(), n, s);
      const double gpu = clipped_sum_sq_cuda(dg.as<float>(), n, s);
      EXPECT_NEAR(gpu, cpu, kStatsRel * cpu + 1e-30) << "n=" << n << " s=" << s;
    }
  }
}

TEST(TernaryCuda, UnpackAndScaleBitIdentical) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (int64_t n : kSizes) {
    const std::vector<float> g = gaussian(n, 1.0f, 100 + n);
    std::vector<int32_t> acc0(n);
    for (int64_t i = 0; i < n; ++i) acc0[i] = static_cast<int32_t>(i % 9) - 4;
    for (PackFormat f : kFormats) {
      SCOPED_TRACE("n=" + std::to_string(n) + (f == PackFormat::two_bit ? " two_bit" : " base3"));
      const size_t bytes = packed_bytes(f, n);
      std::vector<uint8_t> p(bytes);
      ternarize_pack_cpu(g.data(), n, 1.5f, kSeed, 5, f, p.data());
      // Also every byte value, including the ones the packer never writes (decode as 0).
      for (size_t j = 0; j + 1 < bytes && j < 256; ++j) p[j] = static_cast<uint8_t>(j);
      std::vector<int32_t> cpu = acc0;
      unpack_accumulate_cpu(p.data(), n, f, cpu.data());
      unpack_accumulate_cpu(p.data(), n, f, cpu.data());
      DeviceBuffer dp(bytes), da(n * sizeof(int32_t)), dout(n * sizeof(float));
      dp.upload(p.data(), bytes);
      da.upload(acc0.data(), n * sizeof(int32_t));
      unpack_accumulate_cuda(dp.as<uint8_t>(), n, f, da.as<int32_t>());
      unpack_accumulate_cuda(dp.as<uint8_t>(), n, f, da.as<int32_t>());
      ASSERT_EQ(da.download<int32_t>(n), cpu);
      const float scale = 1.5f / 7.0f;
      std::vector<float> out_cpu(n);
      scale_accumulated_cpu(cpu.data(), n, scale, out_cpu.data());
      scale_accumulated_cuda(da.as<int32_t>(), n, scale, dout.as<float>());
      const std::vector<float> out_gpu = dout.download<float>(n);
      ASSERT_EQ(std::memcmp(out_gpu.data(), out_cpu.data(), n * sizeof(float)), 0);
    }
  }
}

TEST(TernaryCuda, UnpackManyBitIdentical) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (int64_t n : kSizes) {
    for (PackFormat f : kFormats) {
      SCOPED_TRACE("n=" + std::to_string(n) + (f == PackFormat::two_bit ? " two_bit" : " base3"));
      const size_t bytes = packed_bytes(f, n), stride = bytes + 3;  // a gap between vectors
      const int64_t count = 5;
      std::vector<uint8_t> p(count * stride);
      for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<uint8_t>(philox_word(kSeed, 3, j));
      std::vector<int32_t> cpu(n, 7);
      unpack_accumulate_many_cpu(p.data(), count, stride, n, f, cpu.data());
      DeviceBuffer dp(p.size()), da(n * sizeof(int32_t));
      dp.upload(p.data(), p.size());
      const std::vector<int32_t> start(n, 7);
      da.upload(start.data(), n * sizeof(int32_t));
      unpack_accumulate_many_cuda(dp.as<uint8_t>(), count, stride, n, f, da.as<int32_t>());
      ASSERT_EQ(da.download<int32_t>(n), cpu);
    }
  }
}

TEST(TernaryCuda, StatsParity) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{100003},
                    int64_t{(1 << 22) + 5}}) {
    std::vector<float> g = gaussian(n, 0.2f, 200 + n);
    for (float& v : g) v -= 0.03f;
    DeviceBuffer dg(n * sizeof(float));
    dg.upload(g.data(), n * sizeof(float));
    TensorStats cpu, gpu;
    tensor_stats_cpu(g.data(), n, &cpu);
    tensor_stats_cuda(dg.as<float>(), n, &gpu);
    SCOPED_TRACE("n=" + std::to_string(n));
    EXPECT_EQ(gpu.n, n);
    EXPECT_EQ(gpu.max_abs, cpu.max_abs);
    EXPECT_NEAR(gpu.sum, cpu.sum, kStatsRel * cpu.l1);
    EXPECT_NEAR(gpu.sum_sq, cpu.sum_sq, kStatsRel * cpu.sum_sq);
    EXPECT_NEAR(gpu.l1, cpu.l1, kStatsRel * cpu.l1);
    EXPECT_NEAR(gpu.sigma(), cpu.sigma(), 1e-9 * (1 + cpu.sigma()));
    // Deterministic run to run.
    TensorStats again;
    tensor_stats_cuda(dg.as<float>(), n, &again);
    EXPECT_EQ(std::memcmp(&again, &gpu, sizeof(gpu)), 0);
  }
}

// A batch of 150 tensors of sizes 1 .. ~150k in one device buffer, each at its own misalignment
// (g by 0..3 floats, outputs by 0..15 bytes): three launches per call.
struct DeviceBatch {
  std::vector<std::vector<float>> grads;
  std::vector<size_t> g_at, out_at;  // byte offsets into the buffers
  size_t g_bytes = 0, out_bytes = 0;
  DeviceBatch(PackFormat f) {
    for (int t = 0; t < 150; ++t) {
      const int64_t n = t < 140 ? 1 + 37 * t : 150000 + 1111 * t;
      grads.push_back(gaussian(n, 0.5f, 300 + t));
      g_bytes = (g_bytes + 15) / 16 * 16 + sizeof(float) * (t % 4);
      g_at.push_back(g_bytes);
      g_bytes += n * sizeof(float);
      out_bytes = (out_bytes + 15) / 16 * 16 + t % 16;
      out_at.push_back(out_bytes);
      out_bytes += packed_bytes(f, n);
    }
  }
};

TEST(TernaryCuda, BatchPackEqualsCpu) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (PackFormat f : kFormats) {
    const DeviceBatch b(f);
    DeviceBuffer dg(b.g_bytes), dp(b.out_bytes + 16);
    std::vector<PackTask> tasks;
    std::vector<uint8_t> want(b.out_bytes + 16, 0xA7);
    cuda::copy_h2d(0, dp.as<uint8_t>(), want.data(), want.size());
    for (size_t t = 0; t < b.grads.size(); ++t) {
      const int64_t n = static_cast<int64_t>(b.grads[t].size());
      dg.upload(b.grads[t].data(), n * sizeof(float), b.g_at[t]);
      const float s = t % 10 == 9 ? 0.0f : 1.0f;  // some all-zero-code tensors
      const uint64_t stream = rng_stream(RngPurpose::ternarize, 3, 0, t);
      tasks.push_back({dg.as<float>(b.g_at[t]), n, s, stream, dp.as<uint8_t>(b.out_at[t])});
      ternarize_pack_cpu(b.grads[t].data(), n, s, kSeed, stream, f, want.data() + b.out_at[t]);
    }
    ternarize_pack_batch_cuda(tasks.data(), tasks.size(), kSeed, f);
    ASSERT_EQ(dp.download<uint8_t>(want.size()), want)
        << (f == PackFormat::two_bit ? "two_bit" : "base3");
  }
}

TEST(TernaryCuda, BatchPackWithResidualEqualsCpu) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (PackFormat f : kFormats) {
    const DeviceBatch b(f);
    DeviceBuffer dg(b.g_bytes), dr(b.g_bytes), dp(b.out_bytes + 16);
    std::vector<PackTask> tasks, cpu;
    std::vector<std::vector<float>> res;
    std::vector<uint8_t> want(b.out_bytes + 16, 0);
    cuda::copy_h2d(0, dp.as<uint8_t>(), want.data(), want.size());
    for (size_t t = 0; t < b.grads.size(); ++t) {
      const int64_t n = static_cast<int64_t>(b.grads[t].size());
      res.push_back(gaussian(n, 0.2f, 700 + t));
      dg.upload(b.grads[t].data(), n * sizeof(float), b.g_at[t]);
      dr.upload(res[t].data(), n * sizeof(float), b.g_at[t]);
      const float s = t % 10 == 9 ? 0.0f : 0.8f;
      const uint64_t stream = rng_stream(RngPurpose::ternarize, 4, 1, t);
      tasks.push_back({dg.as<float>(b.g_at[t]), n, s, stream, dp.as<uint8_t>(b.out_at[t]), nullptr,
                       dr.as<float>(b.g_at[t])});
      cpu.push_back(
          {b.grads[t].data(), n, s, stream, want.data() + b.out_at[t], nullptr, res[t].data()});
    }
    ternarize_pack_batch_cuda(tasks.data(), tasks.size(), kSeed, f);
    ternarize_pack_batch_cpu(cpu.data(), cpu.size(), kSeed, f);
    ASSERT_EQ(dp.download<uint8_t>(want.size()), want);
    for (size_t t = 0; t < b.grads.size(); ++t)
      ASSERT_EQ(dr.download<float>(b.grads[t].size(), b.g_at[t]), res[t]) << "residual " << t;
  }
}

TEST(TernaryCuda, BatchStatsEqualEmulationBitForBit) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  const DeviceBatch b(PackFormat::two_bit);
  DeviceBuffer dg(b.g_bytes);
  std::vector<StatsTask> dev, host;
  std::vector<std::vector<float>> hmem;
  hmem.reserve(b.grads.size());
  for (size_t t = 0; t < b.grads.size(); ++t) {
    const int64_t n = static_cast<int64_t>(b.grads[t].size());
    dg.upload(b.grads[t].data(), n * sizeof(float), b.g_at[t]);
    dev.push_back({dg.as<float>(b.g_at[t]), n});
    hmem.push_back(b.grads[t]);
    host.push_back({hmem.back().data(), n});
  }
  std::vector<TensorStats> gpu(dev.size()), again(dev.size());
  tensor_stats_batch_cuda(dev.data(), dev.size(), gpu.data());
  tensor_stats_batch_cuda(dev.data(), dev.size(), again.data());
  const std::vector<TensorStats> emu = emulated_stats(host);
  for (size_t t = 0; t < dev.size(); ++t) {
    SCOPED_TRACE("tensor " + std::to_string(t));
    EXPECT_EQ(gpu[t].n, host[t].n);
    EXPECT_EQ(gpu[t].sum, emu[t].sum);
    EXPECT_EQ(gpu[t].sum_sq, emu[t].sum_sq);
    EXPECT_EQ(gpu[t].l1, emu[t].l1);
    EXPECT_EQ(gpu[t].max_abs, emu[t].max_abs);
    EXPECT_EQ(std::memcmp(&gpu[t], &again[t], sizeof(TensorStats)), 0);
    TensorStats one;  // a batch of one: the same kernel, the same bits
    tensor_stats_cuda(dev[t].g, dev[t].n, &one);
    EXPECT_EQ(std::memcmp(&one, &gpu[t], sizeof(TensorStats)), 0);
  }
  // The clipped mode (the rescale's clipped sum of squares) too.
  const std::vector<float> scalers(dev.size(), 0.7f);
  std::vector<double> clipped(dev.size());
  clipped_sum_sq_batch_cuda(dev.data(), dev.size(), scalers.data(), clipped.data());
  const std::vector<TensorStats> emu_clipped = emulated_stats(host, scalers.data());
  for (size_t t = 0; t < dev.size(); ++t) EXPECT_EQ(clipped[t], emu_clipped[t].sum_sq) << t;
}

TEST(TernaryCuda, BatchScaleEqualsCpu) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  std::vector<ScaleTask> tasks;
  std::vector<int32_t> acc;
  std::vector<size_t> at;
  for (int t = 0; t < 100; ++t) {
    at.push_back(acc.size() + t % 3);
    acc.resize(at.back() + 1 + 211 * t, 0);
    for (size_t i = at.back(); i < acc.size(); ++i) acc[i] = static_cast<int32_t>(i % 17) - 8;
  }
  DeviceBuffer da(acc.size() * sizeof(int32_t)), dout(acc.size() * sizeof(float));
  da.upload(acc.data(), acc.size() * sizeof(int32_t));
  std::vector<float> want(acc.size(), 0.0f);
  cuda::memset_async(0, dout.as<float>(), 0, acc.size() * sizeof(float));
  for (int t = 0; t < 100; ++t) {
    const int64_t n = 1 + 211 * t;
    const float scale = 0.37f / static_cast<float>(t + 1);
    tasks.push_back({da.as<int32_t>(at[t] * 4), n, scale, dout.as<float>(at[t] * 4)});
    scale_accumulated_cpu(acc.data() + at[t], n, scale, want.data() + at[t]);
  }
  scale_accumulated_batch_cuda(tasks.data(), tasks.size());
  EXPECT_EQ(dout.download<float>(acc.size()), want);
}

TEST(TernaryCuda, BatchUnpackEqualsCpu) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (PackFormat f : kFormats) {
    std::vector<uint8_t> packed;
    std::vector<int32_t> acc;
    std::vector<size_t> p_at, a_at;
    std::vector<int64_t> ns;
    for (int t = 0; t < 100; ++t) {
      const int64_t n = 1 + 301 * t, count = 1 + t % 3;
      const size_t stride = packed_bytes(f, n) + t % 5;
      p_at.push_back(packed.size());
      for (size_t i = 0; i < stride * count; ++i)
        packed.push_back(static_cast<uint8_t>(i * 37 + t));
      a_at.push_back(acc.size() + t % 4);
      acc.resize(a_at.back() + n, t);
      ns.push_back(n);
    }
    DeviceBuffer dp(packed.size()), da(acc.size() * sizeof(int32_t));
    dp.upload(packed.data(), packed.size());
    da.upload(acc.data(), acc.size() * sizeof(int32_t));
    std::vector<UnpackTask> tasks;
    std::vector<int32_t> want = acc;
    for (int t = 0; t < 100; ++t) {
      const int64_t count = 1 + t % 3;
      const size_t stride = packed_bytes(f, ns[t]) + t % 5;
      tasks.push_back({dp.as<uint8_t>(p_at[t]), count, stride, ns[t], da.as<int32_t>(a_at[t] * 4)});
      unpack_accumulate_many_cpu(packed.data() + p_at[t], count, stride, ns[t], f,
                                 want.data() + a_at[t]);
    }
    unpack_accumulate_batch_cuda(tasks.data(), tasks.size(), f);
    EXPECT_EQ(da.download<int32_t>(acc.size()), want);
  }
}

#else
TEST(TernaryCuda, BuiltWithoutCuda) {
  TG_REQUIRE_CUDA();
}
#endif

}  // namespace
}  // namespace tg::tern
