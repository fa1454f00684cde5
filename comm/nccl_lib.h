// NCCL, opened on first use (nn/core/dynamic_library.h) rather than linked: only a process that
// builds an NCCL communicator loads it. CUDA builds only; include from comm/nccl_comm.cpp.
#pragma once

#include <nccl.h>

namespace tg::comm {

// The NCCL functions the communicator calls, typed from nccl.h.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config;
  decltype(&ncclCommGetAsyncError) comm_get_async_error;
  decltype(&ncclCommFinalize) comm_finalize;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommAbort) comm_abort;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclGetErrorString) get_error_string;
  decltype(&ncclGetLastError) get_last_error;
};

// Loads NCCL on the first call (thread-safe; a failed load throws tg::Error naming the library
// and what to do, and the next call tries again).
const NcclApi& nccl_api();

}  // namespace tg::comm
