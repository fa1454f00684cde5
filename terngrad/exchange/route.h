// How gradients travel between ranks: one enum for what a run asks for (the config's
// comm.algorithm), the route each ternary bucket took, and how each slot of a bucket travelled
// (AggregateStats::routes). terngrad/exchange/aggregate.h says which path runs which route;
// terngrad/exchange/ternary_collectives.h runs the bucket routes, from the plans and costs of
// terngrad/exchange/plan.h.
//
//   automatic         ("auto") each ternary bucket by the cost model (plan.h: fewest bytes over
//                     the slowest link, then fewest bytes on the busiest rank)
//   ps                bucket: the paper's parameter server at rank 0
//   allgather         asked: every slot in whole messages, allgathered (the generic path);
//                     bucket: every rank's codes to every rank; slot: f32/f16 values of every
//                     rank to every rank (the elementwise path where that moves no more bytes:
//                     aggregate.h)
//   packed_allreduce  bucket: each rank's code sums in base-(2N + 1) words, added by the
//                     backend's allreduce (a ring)
//   sharded           bucket: each chunk cut into P shards; every rank sends shard q's codes to
//                     rank q, which sums them and sends the sums back to everyone
//   hierarchical      bucket: sharded with the node layout: codes summed inside a node first,
//                     only node sums and the final sums cross between nodes; slot: f32/f16
//                     values folded in worker order along the nodes, only partial sums and
//                     averages crossing (the elementwise path over nodes: aggregate.h)
//   ring              asked: f32 slots by a plain ring allreduce (not bit-identical to one
//                     process), codes as automatic
//   message           slot: inside whole messages allgathered (generic path)
//   reduce_scatter    slot: exact f32/f16 reduce-scatter + allgather (elementwise path)
//   gathered          slot: raw fp32 in the block allgathered beside a ternary bucket
#pragma once

#include <cstdint>

#include "nn/core/enum_names.h"

namespace tg::tern {

enum class Route : uint8_t {
  automatic,
  ps,
  allgather,
  packed_allreduce,
  sharded,
  hierarchical,
  ring,
  message,
  reduce_scatter,
  gathered,
};

// Every route's name (name() below reads it).
inline constexpr EnumTable<Route, 10> kRouteNames = {{{Route::automatic, "auto"},
                                                      {Route::ps, "ps"},
                                                      {Route::allgather, "allgather"},
                                                      {Route::packed_allreduce, "packed-allreduce"},
                                                      {Route::sharded, "sharded"},
                                                      {Route::hierarchical, "hierarchical"},
                                                      {Route::ring, "ring"},
                                                      {Route::message, "message"},
                                                      {Route::reduce_scatter, "reduce-scatter"},
                                                      {Route::gathered, "gathered"}}};

// The routes a run can ask for (the config's comm.algorithm).
inline constexpr EnumTable<Route, 7> kAlgorithms = {{{Route::automatic, "auto"},
                                                     {Route::ps, "ps"},
                                                     {Route::allgather, "allgather"},
                                                     {Route::packed_allreduce, "packed-allreduce"},
                                                     {Route::sharded, "sharded"},
                                                     {Route::hierarchical, "hierarchical"},
                                                     {Route::ring, "ring"}}};

// The exact routes of a ternary bucket, in the order `automatic` breaks ties in (the least CPU
// work first).
inline constexpr Route kBucketRoutes[] = {Route::allgather, Route::sharded, Route::hierarchical,
                                          Route::packed_allreduce, Route::ps};

// "auto", "ps", "allgather", "packed-allreduce", "sharded", "hierarchical", "ring", "message",
// "reduce-scatter", "gathered".
const char* name(Route r);
// True for the routes of kBucketRoutes.
bool is_bucket_route(Route r);
// The route a ternary bucket takes when `asked` is asked for: the bucket routes themselves,
// automatic for automatic and ring; throws for message, reduce_scatter and gathered. (A run that
// asks for allgather takes the generic path and never asks a bucket: aggregate.h.)
Route bucket_route_for(Route asked);

}  // namespace tg::tern
