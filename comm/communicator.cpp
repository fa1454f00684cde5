// The communicator name tables. The factory that dispatches on the backend name is
// comm/make_communicator.cpp (in tg_comm, with the backends it makes).
#include "comm/communicator.h"

#include <vector>

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

namespace {

template <class Spec>
void check_list(const char* backend, int rank, int size, std::span<const Spec> list,
                const char* what) {
  std::vector<bool> seen(static_cast<size_t>(size), false);
  for (const Spec& e : list) {
    TG_CHECK(e.peer >= 0 && e.peer < size && e.peer != rank, backend, " exchange on rank ", rank,
             ": ", what, " peer ", e.peer, " (expected another rank of 0 .. ", size - 1, ")");
    TG_CHECK(!seen[static_cast<size_t>(e.peer)], backend, " exchange on rank ", rank, ": ", what,
             " peer ", e.peer, " listed twice (one entry per peer)");
    seen[static_cast<size_t>(e.peer)] = true;
    TG_CHECK(e.data != nullptr || e.bytes == 0, backend, " exchange on rank ", rank, ": null ",
             what, " buffer for ", e.bytes, " bytes with peer ", e.peer);
  }
}

}  // namespace

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

void check_exchange(const char* backend, int rank, int size, std::span<const SendSpec> sends,
                    std::span<const RecvSpec> recvs) {
  check_list(backend, rank, size, sends, "send");
  check_list(backend, rank, size, recvs, "receive");
}

}  // namespace tg::comm
