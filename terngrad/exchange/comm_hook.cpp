#include "terngrad/exchange/comm_hook.h"

#include <algorithm>

#include "nn/core/error.h"

namespace tg::tern {

CompressionHook::CompressionHook(Compressor& compressor, AggregateOptions options)
    : c_(compressor), o_(std::move(options)) {}

void CompressionHook::run(comm::Communicator& comm, const comm::GradBucket& bucket) {
  if (buckets_.size() != bucket.count) buckets_.assign(bucket.count, AggregateStats{});
  TG_CHECK(bucket.index < bucket.count, "compression hook: bucket ", bucket.index, " of ",
           bucket.count);
  Tensor out = bucket.out;
  buckets_[bucket.index] =
      aggregate(c_, comm, bucket.local_grads, bucket.step, out, o_, bucket.slots, &collectives_);
}

double compression_seconds(std::span<const AggregateStats> buckets) {
  double s = 0;
  for (const AggregateStats& b : buckets) s += b.encode_s + b.reduce_s;
  return s;
}

std::string describe_route(std::span<const AggregateStats> buckets) {
  std::string route;
  const auto add = [&](const std::string& part) { route += (route.empty() ? "" : " + ") + part; };
  // The ternary buckets' routes (the cost model picks per bucket): "by sharded", or with several
  // "by sharded (3 buckets), allgather (1 bucket)".
  std::string by;
  int routes = 0;
  for (Route r : kBucketRoutes) {
    const auto k = std::count_if(buckets.begin(), buckets.end(), [&](const AggregateStats& b) {
      return b.ternary_path && b.bucket_route == r;
    });
    if (k == 0) continue;
    by += tg::detail::concat(routes++ ? ", " : "", name(r), " (", k,
                             k == 1 ? " bucket)" : " buckets)");
  }
  if (routes == 1) by = by.substr(0, by.find(" ("));
  if (routes > 0) add("ternary codes by " + by);
  int64_t elementwise = 0, bytes = 0;
  bool ring = false, gathered = false, folded = false;
  for (const AggregateStats& b : buckets) {
    if (!b.elementwise_path) continue;
    ++elementwise;
    bytes = b.elementwise_bytes;
    ring = ring || b.took(Route::ring);
    gathered = gathered || b.took(Route::allgather);
    folded = folded || b.took(Route::hierarchical);
  }
  if (elementwise > 0)
    add(ring ? "fp32 by ring allreduce"
             : std::string(bytes == 2 ? "fp16" : "fp32") +
                   (gathered ? " by allgather, summed in worker order"
                    : folded ? " by a fold along the nodes, summed in worker order"
                             : " by reduce-scatter + allgather"));
  const auto ternaries = std::count_if(buckets.begin(), buckets.end(),
                                       [](const AggregateStats& b) { return b.ternary_path; });
  if (static_cast<int64_t>(buckets.size()) > ternaries + elementwise)
    add("whole messages by allgather");
  return tg::detail::concat(route, " in ", buckets.size(),
                            buckets.size() == 1 ? " bucket" : " buckets");
}

}  // namespace tg::tern
