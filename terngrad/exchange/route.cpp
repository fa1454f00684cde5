#include "terngrad/exchange/route.h"

#include <algorithm>
#include <iterator>

#include "nn/core/error.h"

namespace tg::tern {

const char* name(Route r) {
  switch (r) {
    case Route::automatic:
      return "auto";
    case Route::ps:
      return "ps";
    case Route::allgather:
      return "allgather";
    case Route::packed_allreduce:
      return "packed-allreduce";
    case Route::sharded:
      return "sharded";
    case Route::hierarchical:
      return "hierarchical";
    case Route::ring:
      return "ring";
    case Route::message:
      return "message";
    case Route::reduce_scatter:
      return "reduce-scatter";
    case Route::gathered:
      return "gathered";
  }
  return "?";
}

bool is_bucket_route(Route r) {
  return std::find(std::begin(kBucketRoutes), std::end(kBucketRoutes), r) !=
         std::end(kBucketRoutes);
}

Route bucket_route_for(Route asked) {
  if (asked == Route::automatic || asked == Route::ring) return Route::automatic;
  TG_CHECK(is_bucket_route(asked), "route '", name(asked),
           "' is not a ternary bucket route (expected auto, ring, ps, allgather, packed-allreduce, "
           "sharded or hierarchical)");
  return asked;
}

}  // namespace tg::tern
