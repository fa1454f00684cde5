// Cross-checks our Philox 4x32-10 against NVIDIA's: cuRAND's host-side generator (runs on the
// CPU, no GPU needed) with CURAND_RNG_PSEUDO_PHILOX4_32_10 emits, for seed s, word k of group j
// as Philox(counter = (0, 0, j_lo, j_hi), key = s) for its first 65536 groups, i.e. exactly our
// philox_block(s, stream = j, block = 0). Skipped in a CPU-only build (no cuRAND).
#include "nn/core/philox.h"

#include <vector>

#include "tests/testing/op_harness.h"

#if TG_CUDA
#include <curand.h>
#endif

namespace tg {
namespace {

TEST(PhiloxCurand, MatchesCurandHostGenerator) {
#if TG_CUDA
  for (uint64_t seed : {0ULL, 123ULL, 0x0123456789abcdefULL}) {
    curandGenerator_t g = nullptr;
    ASSERT_EQ(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10),
              CURAND_STATUS_SUCCESS);
    ASSERT_EQ(curandSetPseudoRandomGeneratorSeed(g, seed), CURAND_STATUS_SUCCESS);
    std::vector<unsigned int> out(4 * 4096);
    ASSERT_EQ(curandGenerate(g, out.data(), out.size()), CURAND_STATUS_SUCCESS);
    curandDestroyGenerator(g);
    int mismatches = 0;
    for (size_t j = 0; j < out.size() / 4; ++j) {
      const Philox4 r = philox_block(seed, j, 0);
      for (int k = 0; k < 4; ++k) mismatches += r.v[k] != out[4 * j + k];
    }
    EXPECT_EQ(mismatches, 0) << "seed " << seed;
  }
#else
  GTEST_SKIP() << "built without CUDA: cuRAND not available";
#endif
}

}  // namespace
}  // namespace tg
