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

std::vector<std::string> backend_names() {
  return {"gloo", "nccl", "local"};
}

std::unique_ptr<Communicator> make_communicator(const CommOptions& options, Store& store,
                                                const std::string& prefix) {
  if (options.backend == "gloo") return make_gloo_communicator(options, store, prefix);
  if (options.backend == "nccl") return make_nccl_communicator(options, store, prefix);
  TG_CHECK(options.backend != "local",
           "communicator backend 'local' runs ranks as threads of one process and meets through "
           "no store: create it with make_local_group");
  TG_THROW("unknown communicator backend '", options.backend, "' (known: gloo, nccl, local)");
}

}  // namespace tg::comm
