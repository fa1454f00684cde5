// CUDA vs CPU parity of the radix-packed sum kernels (terngrad/sum_radix.h): bit-identical words
// and accumulators (and scaled decodes) for levels from 2 to 2^32 and sizes around the word
// boundaries, and identical accumulators from garbage words. Skips without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "nn/core/tensor.h"
#include "terngrad/sum_radix.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

TEST(SumRadixCuda, PackAndUnpackMatchCpuBitForBit) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  const Device gpu = Device::cuda(0);
  const uint64_t two32 = uint64_t{1} << 32;
  for (uint64_t levels :
       {uint64_t{2}, uint64_t{3}, uint64_t{5}, uint64_t{17}, uint64_t{33}, uint64_t{129},
        uint64_t{1025}, uint64_t{65537}, two32 / 2 + 1, two32 - 1, two32}) {
    const int64_t f = digits_per_word(levels);
    for (int64_t n : {int64_t{1}, f - 1, f, f + 1, int64_t{1000}, int64_t{100003}}) {
      if (n < 1) continue;
      // Digits in [0, levels) that int32 reaches with offset levels / 3.
      const int32_t offset = static_cast<int32_t>(levels / 3);
      const uint64_t range = levels < two32 / 2 ? levels : two32 / 2;
      std::vector<int32_t> v(n);
      for (int64_t i = 0; i < n; ++i) {
        v[i] = static_cast<int32_t>(philox_word(11, levels, i) % range) - offset;
      }
      const int64_t m = sum_words(n, levels);
      std::vector<uint64_t> words(m);
      pack_sums_cpu(v.data(), n, offset, levels, words.data());
      Tensor dv = Tensor::from_vector(v, {n}, gpu);
      Tensor dwords = Tensor::empty({m}, DType::u64, gpu);
      {
        cuda::DeviceGuard guard(0);
        pack_sums_cuda(dv.data<int32_t>(), n, offset, levels, dwords.data<uint64_t>());
      }
      ASSERT_EQ(dwords.to_vector<uint64_t>(), words) << "levels=" << levels << " n=" << n;

      // The packed words, then garbage words (any 64-bit value), decoded into the same
      // non-zero accumulators.
      std::vector<uint64_t> garbage(m);
      for (int64_t j = 0; j < m; ++j) {
        garbage[j] =
            uint64_t{philox_word(12, levels, 2 * j)} << 32 | philox_word(12, levels, 2 * j + 1);
      }
      for (const std::vector<uint64_t>* in : {&words, &garbage}) {
        std::vector<int32_t> acc(n);
        for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<int32_t>(i % 5) - 2;
        Tensor dacc = Tensor::from_vector(acc, {n}, gpu);
        Tensor din = Tensor::from_vector(*in, {m}, gpu);
        unpack_sums_accumulate_cpu(in->data(), n, levels, offset, acc.data());
        {
          cuda::DeviceGuard guard(0);
          unpack_sums_accumulate_cuda(din.data<uint64_t>(), n, levels, offset,
                                      dacc.data<int32_t>());
        }
        ASSERT_EQ(dacc.to_vector<int32_t>(), acc)
            << "levels=" << levels << " n=" << n << (in == &garbage ? " (garbage words)" : "");
        // The scaled decode (no accumulator), the same bits as the CPU's.
        const float scale = -0.0123f / 17.0f;
        std::vector<float> out(n);
        unpack_sums_scaled_cpu(in->data(), n, levels, offset, scale, out.data());
        Tensor dout = Tensor::empty({n}, DType::f32, gpu);
        {
          cuda::DeviceGuard guard(0);
          unpack_sums_scaled_cuda(din.data<uint64_t>(), n, levels, offset, scale,
                                  dout.data<float>());
        }
        ASSERT_EQ(dout.to_vector<float>(), out) << "scaled, levels=" << levels << " n=" << n
                                                << (in == &garbage ? " (garbage words)" : "");
      }
    }
  }
#endif
}

}  // namespace
}  // namespace tg::tern
