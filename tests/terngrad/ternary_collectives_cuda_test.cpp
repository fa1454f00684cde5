// CUDA vs CPU parity of the packed sum-field kernels (terngrad/ternary_fields.h): bit-identical
// words and accumulators for every field width k and sizes around the word boundaries. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "nn/core/tensor.h"
#include "terngrad/ternary_fields.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

TEST(TernaryFieldsCuda, PackAndUnpackMatchCpuBitForBit) {
  TG_REQUIRE_CUDA();
#if TG_CUDA
  const Device gpu = Device::cuda(0);
  for (int k = 2; k <= 32; k += 3) {
    for (int64_t n : {1, 21, 22, 63, 64, 65, 1000, 100003}) {
      const int32_t offset = 1 << (k - 2);  // values in [-offset, 2^k - offset)
      std::vector<int32_t> v(n);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t range = k == 32 ? (uint64_t{1} << 31) - 16 : uint64_t{1} << k;
        v[i] = static_cast<int32_t>(philox_word(9, k, i) % range) - offset;
      }
      const int64_t m = sum_field_words(n, k);
      std::vector<uint64_t> words(m);
      pack_sum_fields_cpu(v.data(), n, offset, k, words.data());
      Tensor dv = Tensor::from_vector(v, {n}, gpu);
      Tensor dwords = Tensor::empty({m}, DType::u64, gpu);
      {
        cuda::DeviceGuard guard(0);
        pack_sum_fields_cuda(dv.data<int32_t>(), n, offset, k, dwords.data<uint64_t>());
      }
      ASSERT_EQ(dwords.to_vector<uint64_t>(), words) << "k=" << k << " n=" << n;

      std::vector<int32_t> acc(n);
      for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<int32_t>(i % 5) - 2;
      Tensor dacc = Tensor::from_vector(acc, {n}, gpu);
      unpack_sum_fields_accumulate_cpu(words.data(), n, k, offset, acc.data());
      {
        cuda::DeviceGuard guard(0);
        unpack_sum_fields_accumulate_cuda(dwords.data<uint64_t>(), n, k, offset,
                                          dacc.data<int32_t>());
      }
      ASSERT_EQ(dacc.to_vector<int32_t>(), acc) << "k=" << k << " n=" << n;
    }
  }
#endif
}

}  // namespace
}  // namespace tg::tern
