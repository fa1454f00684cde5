// cuBLAS on demand (nn/core/cuda_libs.h), without a GPU: in a CUDA build the library this build
// was configured against opens by its SONAME and every function of the table resolves (a wrong
// symbol name, such as cublasSgemm for the exported cublasSgemm_v2, fails here rather than on
// the first GEMM of a GPU run). A CPU-only build has no table: skipped.
#if TG_CUDA
#include "nn/core/cuda_libs.h"
#endif

#include <gtest/gtest.h>

namespace tg {
namespace {

TEST(CudaLibs, CublasOpensAndEveryFunctionResolves) {
#if TG_CUDA
  const cuda::CublasApi& api = cuda::cublas_api();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.set_math_mode, nullptr);
  EXPECT_NE(api.sgemm, nullptr);
  EXPECT_NE(api.saxpy, nullptr);
  EXPECT_NE(api.sscal, nullptr);
  EXPECT_EQ(&cuda::cublas_api(), &api);  // loaded once
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace tg
