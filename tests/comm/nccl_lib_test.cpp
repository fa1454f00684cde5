// NCCL on demand (comm/nccl_lib.h), without a GPU: in a CUDA build the NCCL this build was
// configured against opens by its SONAME, every function of the table resolves, and one that
// needs no device answers. A CPU-only build has no table: skipped.
#if TG_CUDA
#include "comm/nccl_lib.h"
#endif

#include <gtest/gtest.h>

#include <string>

namespace tg {
namespace {

TEST(NcclLib, OpensAndEveryFunctionResolves) {
#if TG_CUDA
  const comm::NcclApi& api = comm::nccl_api();
  for (const void* f :
       {reinterpret_cast<const void*>(api.get_unique_id),
        reinterpret_cast<const void*>(api.comm_init_rank_config),
        reinterpret_cast<const void*>(api.comm_get_async_error),
        reinterpret_cast<const void*>(api.comm_finalize),
        reinterpret_cast<const void*>(api.comm_destroy),
        reinterpret_cast<const void*>(api.comm_abort),
        reinterpret_cast<const void*>(api.all_reduce),
        reinterpret_cast<const void*>(api.all_gather), reinterpret_cast<const void*>(api.broadcast),
        reinterpret_cast<const void*>(api.send), reinterpret_cast<const void*>(api.recv),
        reinterpret_cast<const void*>(api.group_start),
        reinterpret_cast<const void*>(api.group_end),
        reinterpret_cast<const void*>(api.get_error_string),
        reinterpret_cast<const void*>(api.get_last_error)}) {
    EXPECT_NE(f, nullptr);
  }
  EXPECT_EQ(std::string(api.get_error_string(ncclSuccess)), "no error");
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace tg
