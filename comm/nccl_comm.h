// The NCCL communicator: CUDA buffers, one GPU per rank, the unique id handed out through the
// rendezvous store. In a build without CUDA (or where NCCL cannot work: a CPU device, no GPU,
// two ranks on one GPU) the factory throws a clear error naming why.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace tg::comm {

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options, Store& store,
                                                     const std::string& prefix);

}  // namespace tg::comm
