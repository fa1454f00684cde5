// CUDA parity of the finer grids (terngrad/grid_kernels.h): grid_quantize_pack_cuda writes the
// bytes grid_quantize_pack_cpu writes, and grid_unpack_accumulate_cuda adds the integers the CPU
// adds, for sizes around the bytes' boundaries, scalers that clip, do not clip and are zero, and
// NaN elements. Skips itself without a GPU (label `cuda`).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "terngrad/grid_kernels.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

// The _cuda kernels exist only in a CUDA build (grid_cuda.cu); a CPU-only build compiles this file
// to one skipped test.
#if TG_CUDA

template <typename T>
std::vector<T> round_trip_bytes(const std::vector<T>& host, void* dev) {
  std::vector<T> out(host.size());
  if (!host.empty()) cuda::copy_d2h(0, out.data(), dev, host.size() * sizeof(T));
  return out;
}

TEST(GridCuda, PackAndUnpackBitIdentical) {
  TG_REQUIRE_CUDA();
  cuda::DeviceGuard guard(0);
  for (int levels : {4, 5}) {
    for (int64_t n : {1, 2, 3, 4, 5, 7, 12, 13, 1000, 65537}) {
      std::vector<float> g(n);
      for (int64_t i = 0; i < n; ++i) g[i] = (uniform01(philox_word(3, 77, i)) - 0.5f) * 4.0f;
      if (n > 3) g[2] = std::numeric_limits<float>::quiet_NaN();
      const size_t bytes = grid_packed_bytes(levels, n);
      void* dg = cuda::malloc_raw(0, n * sizeof(float));
      void* dp = cuda::malloc_raw(0, bytes);
      void* da = cuda::malloc_raw(0, n * sizeof(int32_t));
      cuda::copy_h2d(0, dg, g.data(), n * sizeof(float));
      for (float s : {0.5f, 1.0f, 3.0f, 0.0f}) {
        SCOPED_TRACE("levels=" + std::to_string(levels) + " n=" + std::to_string(n) +
                     " s=" + std::to_string(s));
        const uint64_t stream = rng_stream(RngPurpose::ternarize, 4, 1, n);
        std::vector<uint8_t> cpu(bytes);
        grid_quantize_pack_cpu(g.data(), n, s, levels, 9, stream, cpu.data());
        grid_quantize_pack_cuda(static_cast<float*>(dg), n, s, levels, 9, stream,
                                static_cast<uint8_t*>(dp));
        std::vector<uint8_t> gpu(bytes);
        cuda::copy_d2h(0, gpu.data(), dp, bytes);
        ASSERT_EQ(gpu, cpu);
        std::vector<int32_t> acc(n, 5);
        cuda::copy_h2d(0, da, acc.data(), n * sizeof(int32_t));
        grid_unpack_accumulate_cpu(cpu.data(), n, levels, acc.data());
        grid_unpack_accumulate_cuda(static_cast<uint8_t*>(dp), n, levels,
                                    static_cast<int32_t*>(da));
        ASSERT_EQ(round_trip_bytes(acc, da), acc);
      }
      cuda::free_raw(0, dg);
      cuda::free_raw(0, dp);
      cuda::free_raw(0, da);
    }
  }
}

#else
TEST(GridCuda, BuiltWithoutCuda) {
  TG_REQUIRE_CUDA();
}
#endif

}  // namespace
}  // namespace tg::tern
