// gemm_cuda (nn/core/blas.h, cuBLAS) against the naive double loop of gemm_reference.h and
// against gemm_cpu on the same inputs: every transpose combination, sizes 0 and 1, odd sizes,
// leading dimensions larger than the matrix (the padding of C must stay untouched), alpha/beta
// including beta = 0 over a C full of NaN. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "nn/core/blas.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"
#include "tests/nn/core/gemm_reference.h"
#include "tests/testing/op_harness.h"

namespace tg {
namespace {

// Both are bounded by gemm_testing::tolerance against the reference, so they are within twice it
// of each other; summation orders differ (cuBLAS tiles and may split k), so no bit equality.
TEST(GemmCuda, EdgeCasesMatchTheNaiveLoopAndTheCpu) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  gemm_testing::for_each_case([&](const gemm_testing::Case& cs, const gemm_testing::Operands& o,
                                  const std::vector<double>& want) {
    auto upload = [&](const std::vector<float>& v) {
      return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(gpu);
    };
    const Tensor a = upload(o.a), b = upload(o.b), c = upload(o.c);
    GemmArgs g = o.g;
    g.a = a.data<float>();
    g.b = b.data<float>();
    g.c = c.data<float>();
    gemm(gpu, g);
    cuda::synchronize(0);
    const std::vector<float> got = c.to(Device::cpu()).to_vector<float>();
    std::string first;
    EXPECT_EQ(gemm_testing::mismatches(cs, o, got, want, &first), 0) << "vs reference: " << first;

    std::vector<float> cpu = o.c;
    GemmArgs h = o.g;
    h.a = o.a.data();
    h.b = o.b.data();
    h.c = cpu.data();
    gemm(Device::cpu(), h);
    const std::vector<double> cpu_d(cpu.begin(), cpu.end());
    EXPECT_EQ(gemm_testing::mismatches(cs, o, got, cpu_d, &first, 2.0), 0)
        << "vs gemm_cpu: " << first;
  });
}

}  // namespace
}  // namespace tg
