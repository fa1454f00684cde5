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

namespace {

bool any_route(const AggregateStats& b, SlotRoute r) {
  return std::find(b.routes.begin(), b.routes.end(), r) != b.routes.end();
}

}  // namespace

std::string describe_route(std::span<const AggregateStats> buckets) {
  std::string route;
  const auto add = [&](const std::string& part) { route += (route.empty() ? "" : " + ") + part; };
  const auto ternary = std::find_if(buckets.begin(), buckets.end(),
                                    [](const AggregateStats& b) { return b.ternary_path; });
  if (ternary != buckets.end())
    add(std::string("ternary codes by ") + name(ternary->bucket_algorithm));
  int64_t elementwise = 0, bytes = 0;
  bool ring = false;
  for (const AggregateStats& b : buckets) {
    if (!b.elementwise_path) continue;
    ++elementwise;
    bytes = b.elementwise_bytes;
    ring = ring || any_route(b, SlotRoute::ring);
  }
  if (elementwise > 0)
    add(ring ? "fp32 by ring allreduce"
             : std::string(bytes == 2 ? "fp16" : "fp32") + " by reduce-scatter + allgather");
  const auto ternaries = std::count_if(buckets.begin(), buckets.end(),
                                       [](const AggregateStats& b) { return b.ternary_path; });
  if (static_cast<int64_t>(buckets.size()) > ternaries + elementwise)
    add("whole messages by allgather");
  return tg::detail::concat(route, " in ", buckets.size(),
                            buckets.size() == 1 ? " bucket" : " buckets");
}

}  // namespace tg::tern
