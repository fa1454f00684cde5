// The one factory of the process-group backends: a gloo or nccl communicator by the backend name
// (comm/communicator.h). Part of tg_comm with the backends themselves; tg_comm_core, the transport
// interface without Gloo, does not define it (comm/CMakeLists.txt).
#include "comm/communicator.h"
#include "comm/gloo_comm.h"
#include "comm/nccl_comm.h"
#include "nn/core/error.h"

namespace tg::comm {

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
