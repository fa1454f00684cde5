// Exact aggregation of TernGrad codes across ranks (issue 5 §3, issue 42). Each of the P ranks
// holds the packed ternary codes of its W local workers; afterwards every rank has added, into its
// int32 accumulators, the integer sum over all N = P W workers' codes (in [-N, N]). The sum is
// exact, so every route gives bit-identical accumulators, equal to unpacking all N code vectors
// in one place.
//
// A bucket: S code vectors ("segments", one per gradient tensor, numel[s] elements each) travel
// together. One worker's bucket is the segments' packed codes back to back, segment s from byte
// sum_{j<s} packed_bytes(format, numel[j]) (terngrad/ternary_kernels.h's formats): every segment
// starts on a fresh byte, so the padding codes at a segment's end travel but are never decoded,
// and every decode is per segment into that segment's own accumulator (acc[s], anywhere).
//
// The routes (ps, allgather, packed-allreduce, sharded, hierarchical; automatic = the cost
// model's pick), the chunking, the sum words and every message are the plan's
// (terngrad/exchange/plan.h); the figures the communicator counts are the plan's too. Overlap:
// on a CPU communicator of two or more ranks, given a collectives thread, that thread runs the
// collectives (and the owners' sums) of chunk c + 1 while the calling thread decodes chunk c
// (Gloo's collectives block: this is what hides the decode behind the transfer); only that thread
// touches the communicator meanwhile, so collectives stay in one order on every rank. On CUDA the
// chunks run one after another on the calling thread.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "nn/core/worker_thread.h"
#include "terngrad/exchange/plan.h"
#include "terngrad/exchange/route.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

// How a bucket's exchange runs (every rank passes the same values).
struct TernaryPipeline {
  int64_t chunk_bytes = 0;  // bytes of one worker's bucket per chunk; 0 = the whole bucket at once
  // CPU communicators of two or more ranks: the thread that issues the chunks' collectives while
  // the caller decodes (the caller's, alive for the run: no thread is started per call); null:
  // everything on the caller's thread.
  WorkerThread* collectives = nullptr;
  // The node of each rank: the hierarchical route's nodes and the cost model's slow links
  // (unknown: see TernaryBucketShape::nodes).
  comm::NodeLayout nodes = {};
};

// The final values instead of sums, where a route can write them in its last pass: out[s][i] =
// float(sum of code i of segment s) * scale[s], the bits of acc[s][i] += sum into a zeroed acc
// then scale_accumulated (terngrad/sum_radix.h, unpack_sums_scaled). The sharded and
// hierarchical routes decode each element's sum once, so they write out directly and never touch
// acc (no accumulator to zero, no scaling pass); the others add to acc as always.
struct ScaledSums {
  std::vector<float*> out;  // one f32 [numel[s]] pointer per segment, disjoint
  std::vector<float> scale;
};
// Whether `route` (resolved) writes ScaledSums when given them.
bool writes_scaled_sums(Route route);

struct TernaryResult {
  Route route = Route::allgather;  // the one that ran (automatic resolved), for the caller to log
  bool scaled = false;             // ScaledSums were written (and acc left alone)
  comm::WireBytes wire;            // what this call moved on this rank (the change in comm.wire())
  comm::WireBytes inter;           // ... of it, to and from ranks on other nodes (the plan's)
};

// acc[s][i] += sum over all P W workers of code i of segment s, for every segment, on every rank.
//   codes: W worker buckets of bucket_code_bytes(numel, format) bytes each, back to back
//          (worker w of rank q is global worker q W + w);
//   acc:   one int32 [numel[s]] pointer per segment (null allowed where numel[s] = 0, or where
//          `scaled` is given and the route writes it), disjoint;
//   scaled: optional; see ScaledSums (result.scaled says whether it was written);
//   all on comm.device() (host for local/gloo, this rank's GPU for nccl). Collective: every rank
//   calls it with the same route, numel, format, W and pipeline. Temporary buffers come from the
// device's caching allocator. Throws on invalid arguments, a CUDA device in a build without CUDA,
// or a communicator failure (the communicator is then broken); a failure of a collective on the
// pipeline's thread is rethrown here once that thread is done with this call.
TernaryResult ternary_aggregate_bucket(comm::Communicator& comm, Route route, const uint8_t* codes,
                                       int workers, const std::vector<int64_t>& numel,
                                       PackFormat format, const std::vector<int32_t*>& acc,
                                       const TernaryPipeline& pipeline = {},
                                       const ScaledSums* scaled = nullptr);

// The shape ternary_aggregate_bucket plans for on `comm` (the cost model's input).
TernaryBucketShape bucket_shape(const comm::Communicator& comm, int workers,
                                const std::vector<int64_t>& numel, PackFormat format,
                                const TernaryPipeline& pipeline);

}  // namespace tg::tern
