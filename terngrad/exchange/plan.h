// The plan of a ternary bucket's exchange: how one worker's codes are cut into chunks (and, for
// the sharded routes, each chunk into shards), where each shard is summed, and every message each
// rank sends. One plan serves three readers: the routes run it (ternary_collectives.cpp: each
// rank takes its own messages from the same functions), the cost model counts its bytes
// (ternary_bucket_cost, choose_bucket_route), and a simulator can replay its messages.
//
// Symbols: P ranks, W workers per rank, N = P W; a bucket of S segments (one per gradient tensor)
// of numel[s] elements; B = the bytes of one worker's codes (bucket_code_bytes); L = 2N + 1 the
// levels of a sum of N codes, which travels in base-L words (terngrad/sum_radix.h: f = the most
// digits with L^f <= 2^64 per u64 word, each piece of a segment starting a fresh word).
//
// Chunks: with chunk_bytes C > 0, bytes [c C, min(B, (c + 1) C)) of every worker's bucket are
// chunk c (cut at whole codes); each chunk runs the route on its own, chunk c + 1 on the wire
// while chunk c is decoded. A chunk's "pieces" are the parts of the segments it overlaps.
//
// Routes (Route, terngrad/exchange/route.h), per chunk of b bytes, K = its sum words' bytes:
//   allgather         one phase: every rank sends its W b bytes of codes to every other rank.
//   ps                gather of W b bytes to rank 0; rank 0 sums and broadcasts K bytes (flat; a
//                     binomial tree on gloo, comm/gloo_wire.h).
//   packed_allreduce  the backend's ring allreduce of K bytes of u64 words: each rank's W code
//                     sums shifted by +W, in base L, add without carry (every digit's sum stays
//                     <= 2N < L).
//   sharded           the chunk cut into P shards, shard q = bytes [floor(q b / P),
//                     floor((q + 1) b / P)), owned by rank q (the sharded reduce-scatter):
//                       1. every rank sends rank q its W workers' codes of shard q;
//                       2. rank q sums the N workers' codes (exact integers in [-N, N]) and
//                          sends the sums, in base-L words, to every rank.
//                     Per element each rank sends (P - 1) / P (W c + s) bits, c = 2 (two_bit) or
//                     1.6 (base3) bits per code and s = 64 / f bits per sum: P = 16, W = 1,
//                     two_bit: 15/16 (2 + 5.33) = 6.9 bits against the 2 (15/16) 32 = 60 of a
//                     ring allreduce of fp32 (8.7x).
//   hierarchical      sharded over the node layout (comm/topology.h), G_n ranks on node n. Each
//                     node sums its own codes of every shard before anything leaves it:
//                       A. inside node n, every rank sends each shard's codes to the rank of n
//                          that sums that shard for n (its "local owner": rank q itself for the
//                          node's own shards q, the node's ranks in turn for the others);
//                       C. the local owner of a foreign shard q sends the node's sum (in
//                          [-G_n W, G_n W]: base 2 G_n W + 1) to rank q;
//                       E. rank q adds its node's and the other nodes' sums and sends the final
//                          sums (base L) to the local owner of q in every other node;
//                       F. inside each node, every local owner sends the final sums of its
//                          shards to the node's other ranks.
//                     A node of one rank with W = 1 sends its codes as they are in C (two bits
//                     beat a base-3 digit's 1.6 only in CPU time, and are already packed).
//                     With every rank alone, hierarchical is sharded; with one node, A and F
//                     move what sharded moves. Across nodes a node sends and receives (M - 1)
//                     / M (s_G + s_N) bits per element for M nodes (s_G: bits of a node sum),
//                     against 2 (M - 1) / M 32 for a hierarchical fp32 ring.
// Messages of zero bytes are never sent (both sides know the length).
//
// Cost model: per rank, the bytes sent and received (exactly what comm::Communicator::wire()
// counts for the route: the local and nccl backends by comm/wire_model.h, gloo by its own
// schedules, comm/gloo_wire.h), and of them the bytes to and from other nodes. `automatic`
// picks, per bucket, the route whose busiest node moves the fewest bytes across node
// boundaries (the slowest links), then the one whose busiest rank moves the fewest bytes in all,
// then the first in kBucketRoutes. With no node layout, or one node, the busiest rank's bytes
// decide (every rank's own link is then the slowest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology.h"
#include "terngrad/exchange/route.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

// A bucket's ternary part as every rank sees it: S segments of numel[s] elements, P ranks of W
// workers.
struct TernaryBucketShape {
  std::vector<int64_t> numel;
  int ranks = 1;
  int workers_per_rank = 1;
  PackFormat format = PackFormat::two_bit;
  // Whose wire figures: "gloo" counts Gloo's own schedules (comm/gloo_wire.h: uneven ring chunks,
  // a binomial-tree broadcast); anything else the model of comm/wire_model.h.
  std::string backend = "local";
  int64_t chunk_bytes = 0;  // bytes of one worker's bucket per chunk; 0 = one chunk
  // Which node each rank is on: the hierarchical route's nodes and the cost model's slow links.
  // Unknown: hierarchical treats every rank as a node of its own, the cost model one node.
  comm::NodeLayout nodes = {};
};

// Throws naming the problem: P < 1, W < 1, N > 2^30, a negative numel or chunk_bytes, an unknown
// format, a node layout of another size.
void check_bucket_shape(const TernaryBucketShape& s);
// Bytes of one worker's bucket: sum_s packed_bytes(format, numel[s]).
int64_t bucket_code_bytes(const std::vector<int64_t>& numel, PackFormat format);

// The part of segment `seg` inside a span: elements [first, first + n) of the segment, whose codes
// start `byte` bytes into the span (of one worker); `elem`: where they sit in the span's compact
// vector of sums.
struct Piece {
  size_t seg = 0;
  int64_t byte = 0, first = 0, n = 0, elem = 0;
};

// Bytes [begin, begin + bytes) of every worker's bucket and the segment pieces in them.
struct Span {
  int64_t begin = 0, bytes = 0, elems = 0;
  std::vector<Piece> pieces;
};

// The u64 words of a span's sums in base `levels`, each piece from a fresh word; with offsets:
// where piece i's words start (offsets[i]), and the total at the end (offsets.size() = pieces + 1).
int64_t span_words(const Span& s, uint64_t levels);
std::vector<int64_t> piece_word_offsets(const Span& s, uint64_t levels);

struct Plan {
  int64_t bucket_bytes = 0;
  std::vector<int64_t> segment_offset;  // byte where segment s starts in one worker's bucket
  std::vector<Span> chunks;
  // The span of bytes [begin, end) of one worker's bucket (inside a chunk, e.g. a shard).
  Span span(int64_t begin, int64_t end) const;

  std::vector<int64_t> numel;
  PackFormat format = PackFormat::two_bit;
};
Plan plan_bucket(const std::vector<int64_t>& numel, PackFormat format, int64_t chunk_bytes);

// Where each shard is summed under the sharded and hierarchical routes (see above).
class ShardPlacement {
 public:
  // nodes: known and covering `ranks` (each_alone for the sharded route).
  explicit ShardPlacement(const comm::NodeLayout& nodes);
  int ranks() const { return static_cast<int>(node_of_.size()); }
  int nodes() const { return static_cast<int>(members_.size()); }
  int node_of(int rank) const { return node_of_[static_cast<size_t>(rank)]; }
  const std::vector<int>& members(int node) const { return members_[static_cast<size_t>(node)]; }
  // The rank of `node` that sums shard q's codes of that node.
  int local_owner(int node, int q) const;
  // The shards `rank` sums for its node, ascending (its own shard q = rank among them).
  const std::vector<int>& local_shards(int rank) const {
    return local_shards_[static_cast<size_t>(rank)];
  }

 private:
  std::vector<int> node_of_;
  std::vector<std::vector<int>> members_;
  std::vector<std::vector<int>> local_shards_;
};

// The P shards of one chunk and their message sizes (see the header comment).
struct ShardedChunk {
  ShardedChunk(const Plan& plan, const Span& chunk, const TernaryBucketShape& s,
               const ShardPlacement& placement);
  std::vector<Span> shards;
  uint64_t levels = 0;             // L = 2N + 1
  std::vector<int64_t> sum_bytes;  // per shard: its final sums in base L
  // Per node and shard: what the node's local owner sends rank q in phase C (raw codes when the
  // node is one rank of one worker, else the node's sums in base 2 G W + 1).
  std::vector<std::vector<int64_t>> node_sum_bytes;
  std::vector<uint64_t> node_levels;  // per node: 2 G_n W + 1
  std::vector<bool> raw_codes;        // per node: G_n W == 1
};

// One message of a route's plan: `bytes` from rank src to rank dst in phase `phase` (a phase's
// messages are in flight together; the next phase starts once they have arrived).
struct Message {
  int src = 0, dst = 0;
  int64_t bytes = 0;
  int phase = 0;
};

// Every message of chunk c of `route` (a bucket route), with its phase.
std::vector<Message> chunk_messages(Route route, const TernaryBucketShape& s, const Plan& plan,
                                    size_t c);

struct TernaryCost {
  comm::WireBytes rank;        // what the asked-for rank sends and receives
  comm::WireBytes rank_inter;  // ... of it, to and from ranks on other nodes
  uint64_t busiest = 0;        // max over ranks of sent + received
  uint64_t sent_max = 0;       // max over ranks of sent
  // Max over nodes of the bytes crossing the node's boundary, sent + received by its ranks; with
  // the node layout unknown or one node, `busiest` (every rank's own link is the slowest).
  uint64_t busiest_link = 0;
};

// The cost of `route` (a bucket route) for `rank`, over every chunk. Throws as check_bucket_shape
// and on a rank out of range or a route that is not a bucket route.
TernaryCost ternary_bucket_cost(Route route, const TernaryBucketShape& shape, int rank);
// `automatic`'s pick for the bucket: the least busiest_link, then the least busiest, then the
// order of kBucketRoutes. Depends on the shape only, so every rank picks the same route.
Route choose_bucket_route(const TernaryBucketShape& shape);

}  // namespace tg::tern
