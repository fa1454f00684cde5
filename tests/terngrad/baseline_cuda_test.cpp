// Baseline compressors on CUDA vs CPU: packed bytes, accumulators and (onebit) residuals
// bit-identical, including special values, partial buckets, every code width class, packed
// buffers at odd byte offsets and several error-feedback steps. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/baseline_kernels.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

#if TG_CUDA
constexpr int kDev = 0;

std::vector<float> normal_vec(int64_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Device copy of a host vector (plus a few spare bytes so that offset views stay in bounds).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes + 16), p_(cuda::malloc_raw(kDev, bytes_)) {}
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size() * sizeof(T)) {
    if (!v.empty()) cuda::copy_h2d(kDev, p_, v.data(), v.size() * sizeof(T));
  }
  ~DeviceBuffer() { cuda::free_raw(kDev, p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as(size_t byte_offset = 0) {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset);
  }
  template <typename T>
  std::vector<T> get(size_t count, size_t byte_offset = 0) {
    std::vector<T> v(count);
    if (count) cuda::copy_d2h(kDev, v.data(), as<char>(byte_offset), count * sizeof(T));
    return v;
  }

 private:
  size_t bytes_;
  void* p_;
};

// Float vectors equal bit for bit (NaNs with any payload count as equal).
void expect_same(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::isnan(gpu[i]) && std::isnan(cpu[i])) continue;
    uint32_t a, b;
    std::memcpy(&a, &gpu[i], 4);
    std::memcpy(&b, &cpu[i], 4);
    ASSERT_EQ(a, b) << what << ": first mismatch at " << i << " (gpu " << gpu[i] << ", cpu "
                    << cpu[i] << ")";
  }
}
#endif

TEST(BaselineCuda, Fp16BitIdentical) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  cuda::DeviceGuard guard(kDev);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 8, 1000, 1 << 20}) {
    for (size_t offset : {0, 1}) {  // packed buffer at an even and an odd address
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      std::vector<float> g = normal_vec(n, n, 1000.0f);
      const float specials[] = {65520.0f, 65504.0f, 6e-8f, 0x1p-25f, 1e-40f, -0.0f,
                                inf,      -inf,     NAN,   -NAN,     1e5f,   0x1.8p-24f};
      for (int64_t k = 0; k < static_cast<int64_t>(std::size(specials)); ++k)
        g[(k * (n / 12 + 1)) % n] = specials[k];
      const std::vector<float> acc0 = normal_vec(n, n + 1);
      const size_t bytes = fp16_packed_bytes(n);

      std::vector<uint8_t> p_cpu(bytes);
      fp16_pack_cpu(g.data(), n, p_cpu.data());
      std::vector<float> a_cpu = acc0;
      fp16_unpack_accumulate_cpu(p_cpu.data(), n, 0.5f, a_cpu.data());

      DeviceBuffer dg(g), dp(bytes), da(acc0);
      fp16_pack_cuda(dg.as<float>(), n, dp.as<uint8_t>(offset));
      EXPECT_EQ(dp.get<uint8_t>(bytes, offset), p_cpu);
      fp16_unpack_accumulate_cuda(dp.as<uint8_t>(offset), n, 0.5f, da.as<float>());
      expect_same(da.get<float>(n), a_cpu, "fp16 accumulator");
    }
  }
#endif
}

TEST(BaselineCuda, QsgdBitIdentical) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  cuda::DeviceGuard guard(kDev);
  struct Case {
    int64_t n;
    int levels;
    int64_t bucket;
  };
  // Buckets below, at and above the 256-thread block; code widths 2, 3, 9, 17 bits.
  const Case cases[] = {
      {1, 4, 512},       {1000, 4, 128},    {4097, 1, 512}, {100000, 255, 512}, {5000, 3, 1},
      {3000, 65535, 64}, {70001, 16, 2048}, {999, 2, 300},  {1 << 20, 4, 8192}, {12345, 7, 33}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    for (size_t offset : {0, 3}) {
      SCOPED_TRACE("n " + std::to_string(c.n) + " s " + std::to_string(c.levels) + " bucket " +
                   std::to_string(c.bucket) + " offset " + std::to_string(offset));
      std::vector<float> g = normal_vec(c.n, seed);
      for (int64_t i = 0; i < std::min<int64_t>(c.bucket, c.n); ++i) g[i] = 0.0f;  // a zero bucket
      if (c.n > 3 * c.bucket) g[2 * c.bucket + 1] = 1e30f;                         // a huge spike
      const uint64_t stream = rng_stream(RngPurpose::test, seed, 1, 2);
      const size_t bytes = qsgd_packed_bytes(c.n, c.levels, c.bucket);
      const std::vector<float> acc0 = normal_vec(c.n, seed + 100);

      std::vector<uint8_t> p_cpu(bytes);
      qsgd_pack_cpu(g.data(), c.n, c.levels, c.bucket, 42, stream, p_cpu.data());
      std::vector<float> a_cpu = acc0;
      qsgd_unpack_accumulate_cpu(p_cpu.data(), c.n, c.levels, c.bucket, 0.25f, a_cpu.data());

      DeviceBuffer dg(g), dp(bytes), da(acc0);
      qsgd_pack_cuda(dg.as<float>(), c.n, c.levels, c.bucket, 42, stream, dp.as<uint8_t>(offset));
      const std::vector<uint8_t> p_gpu = dp.get<uint8_t>(bytes, offset);
      for (size_t k = 0; k < bytes; ++k) ASSERT_EQ(p_gpu[k], p_cpu[k]) << "byte " << k;
      qsgd_unpack_accumulate_cuda(dp.as<uint8_t>(offset), c.n, c.levels, c.bucket, 0.25f,
                                  da.as<float>());
      expect_same(da.get<float>(c.n), a_cpu, "qsgd accumulator");
    }
    ++seed;
  }
#endif
}

// Several error-feedback steps: bytes and residuals stay identical as the residual evolves.
TEST(BaselineCuda, OnebitBitIdentical) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  cuda::DeviceGuard guard(kDev);
  for (int64_t n : {0, 1, 9, 4096, 4097, 300001, 1 << 22}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const size_t bytes = onebit_packed_bytes(n);
    std::vector<float> r_cpu(n, 0.0f), a_cpu(n, 0.0f);
    DeviceBuffer dr(r_cpu), dp(bytes), da(a_cpu);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = normal_vec(n, 1000 * step + n, 1.0f + step);
      const size_t offset = step;  // 0, 1, 2: odd header offsets too
      std::vector<uint8_t> p_cpu(bytes);
      onebit_pack_cpu(g.data(), r_cpu.data(), n, p_cpu.data());
      onebit_unpack_accumulate_cpu(p_cpu.data(), n, 1.0f / 3.0f, a_cpu.data());

      DeviceBuffer dg(g);
      onebit_pack_cuda(dg.as<float>(), dr.as<float>(), n, dp.as<uint8_t>(offset));
      const std::vector<uint8_t> p_gpu = dp.get<uint8_t>(bytes, offset);
      for (size_t k = 0; k < bytes; ++k)
        ASSERT_EQ(p_gpu[k], p_cpu[k]) << "step " << step << " byte " << k;
      expect_same(dr.get<float>(n), r_cpu, "onebit residual");
      onebit_unpack_accumulate_cuda(dp.as<uint8_t>(offset), n, 1.0f / 3.0f, da.as<float>());
      expect_same(da.get<float>(n), a_cpu, "onebit accumulator");
    }
  }
#endif
}

TEST(BaselineCuda, RejectsBadArguments) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  EXPECT_THROW(qsgd_pack_cuda(nullptr, 10, 0, 4, 1, 1, nullptr), Error);
  EXPECT_THROW(qsgd_unpack_accumulate_cuda(nullptr, 10, 4, 0, 1.0f, nullptr), Error);
  EXPECT_THROW(fp16_pack_cuda(nullptr, -1, nullptr), Error);
  EXPECT_THROW(onebit_pack_cuda(nullptr, nullptr, -1, nullptr), Error);
#endif
}

}  // namespace
}  // namespace tg::tern
