// The communicator name tables and the one factory that dispatches on the backend name.
#include "comm/communicator.h"

#include "comm/gloo_comm.h"
#include "comm/nccl_comm.h"
#include "nn/core/error.h"

namespace tg::comm {

const char* name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

std::unique_ptr<Communicator> make_communicator(const CommOptions& options, Store& store,
                                                const std::string& prefix) {
  switch (options.backend) {
    case Backend::gloo:
      return make_gloo_communicator(options, store, prefix);
    case Backend::nccl:
      return make_nccl_communicator(options, store, prefix);
    case Backend::automatic:
      break;
  }
  TG_THROW(
      "make_communicator: backend 'auto' is the process group's to resolve "
      "(comm/process_group.h); a communicator is made for gloo or nccl");
}

}  // namespace tg::comm
