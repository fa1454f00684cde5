#include "terngrad/exchange/route.h"

#include <algorithm>
#include <iterator>

#include "nn/core/error.h"

namespace tg::tern {

const char* name(Route r) {
  for (const auto& e : kRouteNames)
    if (e.value == r) return e.name.data();  // the table's literals end in '\0'
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
