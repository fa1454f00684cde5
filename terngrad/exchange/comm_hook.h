// The Reducer's communication hook for every compressor (PyTorch's ddp_comm_hooks' place): each
// bucket the Reducer (comm/reducer.h) hands over is aggregated by aggregate()
// (terngrad/exchange/aggregate.h) with this rank's compressor and the run's AggregateOptions. The
// same hook serves workers emulated in one process (over comm::make_self_communicator) and
// processes.
//
// The hook keeps what each bucket of the last step did (AggregateStats, in launch order), for
// its owner to read after Reducer::finish(); the functions below put a step's buckets into
// numbers and words. It owns the thread the ternary path issues its chunks' collectives on, for
// the run's lifetime.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "comm/reducer.h"
#include "nn/core/worker_thread.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::tern {

class CompressionHook final : public comm::CommHook {
 public:
  // compressor: not owned, alive as long as the hook.
  CompressionHook(Compressor& compressor, AggregateOptions options);

  void run(comm::Communicator& comm, const comm::GradBucket& bucket) override;

  // The buckets of the last step, in launch order (read after Reducer::finish()).
  const std::vector<AggregateStats>& last_step() const { return buckets_; }

 private:
  Compressor& c_;
  AggregateOptions o_;
  WorkerThread collectives_;
  std::vector<AggregateStats> buckets_;
};

// A step's compression seconds: the buckets' encoding and reduction (local meta, encode,
// accumulate, finalize), without their collectives.
double compression_seconds(std::span<const AggregateStats> buckets);

// How a step's gradients travelled, in words, for the log (a change of route is logged):
// "ternary codes by allgather in 3 buckets", "fp32 by reduce-scatter + allgather in 2 buckets",
// "ternary codes by ps + whole messages by allgather in 4 buckets", ...
std::string describe_route(std::span<const AggregateStats> buckets);

}  // namespace tg::tern
