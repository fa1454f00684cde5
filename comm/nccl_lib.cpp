// TG_NCCL_SONAME and TG_NCCL_PATH come from comm/CMakeLists.txt: the SONAME of the NCCL this
// build was configured against (libnccl.so.2) and that file's path.
#include "comm/nccl_lib.h"

#include "nn/core/dynamic_library.h"

namespace tg::comm {

namespace {

NcclApi load_nccl() {
  const DynamicLibrary lib(TG_NCCL_SONAME, TG_NCCL_PATH,
                           "NCCL is needed for comm.backend = nccl: install NCCL (libnccl2) or put "
                           "its folder on LD_LIBRARY_PATH, or use the gloo backend");
  NcclApi a{};
  a.get_unique_id = lib.function<decltype(a.get_unique_id)>("ncclGetUniqueId");
  a.comm_init_rank_config =
      lib.function<decltype(a.comm_init_rank_config)>("ncclCommInitRankConfig");
  a.comm_get_async_error = lib.function<decltype(a.comm_get_async_error)>("ncclCommGetAsyncError");
  a.comm_finalize = lib.function<decltype(a.comm_finalize)>("ncclCommFinalize");
  a.comm_destroy = lib.function<decltype(a.comm_destroy)>("ncclCommDestroy");
  a.comm_abort = lib.function<decltype(a.comm_abort)>("ncclCommAbort");
  a.all_reduce = lib.function<decltype(a.all_reduce)>("ncclAllReduce");
  a.all_gather = lib.function<decltype(a.all_gather)>("ncclAllGather");
  a.broadcast = lib.function<decltype(a.broadcast)>("ncclBroadcast");
  a.send = lib.function<decltype(a.send)>("ncclSend");
  a.recv = lib.function<decltype(a.recv)>("ncclRecv");
  a.group_start = lib.function<decltype(a.group_start)>("ncclGroupStart");
  a.group_end = lib.function<decltype(a.group_end)>("ncclGroupEnd");
  a.get_error_string = lib.function<decltype(a.get_error_string)>("ncclGetErrorString");
  a.get_last_error = lib.function<decltype(a.get_last_error)>("ncclGetLastError");
  return a;
}

}  // namespace

const NcclApi& nccl_api() {
  static const NcclApi api = load_nccl();
  return api;
}

}  // namespace tg::comm
