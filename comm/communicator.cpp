// The communicator name tables. The factory that dispatches on the backend name is
// comm/make_communicator.cpp (in tg_comm, with the backends it makes).
#include "comm/communicator.h"

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

}  // namespace tg::comm
