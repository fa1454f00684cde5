// The plans of the ternary bucket routes and their cost (terngrad/exchange/plan.h).
#include "terngrad/exchange/plan.h"

#include <algorithm>
#include <limits>

#include "comm/gloo_wire.h"
#include "comm/wire_model.h"
#include "nn/core/error.h"
#include "terngrad/sum_radix.h"

namespace tg::tern {

namespace {

int64_t codes_per_byte(PackFormat f) {
  return f == PackFormat::two_bit ? 4 : 5;
}

// The layout a route runs on: the shape's, or every rank alone where it has none.
comm::NodeLayout layout_or_alone(const TernaryBucketShape& s) {
  return s.nodes.known() ? s.nodes : comm::NodeLayout::each_alone(s.ranks);
}

}  // namespace

void check_bucket_shape(const TernaryBucketShape& s) {
  TG_CHECK(s.ranks >= 1, "ternary bucket: P = ", s.ranks, " ranks (expected >= 1)");
  TG_CHECK(s.workers_per_rank >= 1, "ternary bucket: W = ", s.workers_per_rank,
           " workers per rank (expected >= 1)");
  TG_CHECK(static_cast<int64_t>(s.ranks) * s.workers_per_rank <= (int64_t{1} << 30),
           "ternary bucket: N = ", s.ranks, " x ", s.workers_per_rank,
           " workers (expected at most 2^30)");
  TG_CHECK(s.chunk_bytes >= 0, "ternary bucket: chunk_bytes = ", s.chunk_bytes,
           " (expected >= 0; 0 = one chunk)");
  for (size_t i = 0; i < s.numel.size(); ++i)
    TG_CHECK(s.numel[i] >= 0, "ternary bucket: segment ", i, " has ", s.numel[i],
             " elements (expected >= 0)");
  detail::check_format(s.format, "ternary bucket");
  s.nodes.check(s.ranks);
}

int64_t bucket_code_bytes(const std::vector<int64_t>& numel, PackFormat format) {
  detail::check_format(format, "bucket_code_bytes");
  int64_t b = 0;
  for (int64_t n : numel) b += static_cast<int64_t>(packed_bytes(format, n));
  return b;
}

int64_t span_words(const Span& s, uint64_t levels) {
  int64_t w = 0;
  for (const Piece& p : s.pieces) w += sum_words(p.n, levels);
  return w;
}

std::vector<int64_t> piece_word_offsets(const Span& s, uint64_t levels) {
  std::vector<int64_t> at(s.pieces.size() + 1, 0);
  for (size_t i = 0; i < s.pieces.size(); ++i) at[i + 1] = at[i] + sum_words(s.pieces[i].n, levels);
  return at;
}

Span Plan::span(int64_t begin, int64_t end) const {
  Span c;
  c.begin = begin;
  c.bytes = end - begin;
  const int64_t epb = codes_per_byte(format);
  const size_t S = numel.size();
  // The first segment that ends after `begin` (segments are back to back, ascending).
  size_t t = static_cast<size_t>(
      std::upper_bound(segment_offset.begin(), segment_offset.end() - 1, begin) -
      segment_offset.begin());
  t = t == 0 ? 0 : t - 1;
  for (; t < S && segment_offset[t] < end; ++t) {
    if (numel[t] == 0 || segment_offset[t + 1] <= begin) continue;
    const int64_t x = std::max(begin, segment_offset[t]), y = std::min(end, segment_offset[t + 1]);
    Piece p;
    p.seg = t;
    p.byte = x - begin;
    p.first = (x - segment_offset[t]) * epb;
    p.n = std::min(numel[t], (y - segment_offset[t]) * epb) - p.first;
    if (p.n <= 0) continue;  // only the padding codes of a segment's last byte
    p.elem = c.elems;
    c.elems += p.n;
    c.pieces.push_back(p);
  }
  return c;
}

Plan plan_bucket(const std::vector<int64_t>& numel, PackFormat format, int64_t chunk_bytes) {
  TG_CHECK(chunk_bytes >= 0, "ternary bucket: chunk_bytes = ", chunk_bytes, " (expected >= 0)");
  detail::check_format(format, "ternary bucket");
  Plan plan;
  plan.numel = numel;
  plan.format = format;
  plan.segment_offset.assign(numel.size() + 1, 0);
  for (size_t s = 0; s < numel.size(); ++s) {
    TG_CHECK(numel[s] >= 0, "ternary bucket: segment ", s, " has ", numel[s],
             " elements (expected >= 0)");
    plan.segment_offset[s + 1] =
        plan.segment_offset[s] + static_cast<int64_t>(packed_bytes(format, numel[s]));
  }
  plan.bucket_bytes = plan.segment_offset.back();
  const int64_t step = chunk_bytes > 0 ? chunk_bytes : std::max<int64_t>(plan.bucket_bytes, 1);
  for (int64_t b0 = 0; b0 < plan.bucket_bytes; b0 += step)
    plan.chunks.push_back(plan.span(b0, std::min(plan.bucket_bytes, b0 + step)));
  return plan;
}

// ---- shard placement -------------------------------------------------------------------------

ShardPlacement::ShardPlacement(const comm::NodeLayout& nodes) {
  TG_CHECK(nodes.known(), "shard placement: no node layout");
  nodes.check(nodes.ranks());
  node_of_ = nodes.node_of;
  members_.resize(static_cast<size_t>(nodes.nodes()));
  for (int r = 0; r < ranks(); ++r) members_[static_cast<size_t>(node_of(r))].push_back(r);
  local_shards_.resize(static_cast<size_t>(ranks()));
  for (int n = 0; n < this->nodes(); ++n)
    for (int q = 0; q < ranks(); ++q)
      local_shards_[static_cast<size_t>(local_owner(n, q))].push_back(q);
}

int ShardPlacement::local_owner(int node, int q) const {
  if (node_of(q) == node) return q;
  const std::vector<int>& m = members(node);
  // q's index among the node's foreign shards: q minus the node's ranks below it.
  const auto below = std::lower_bound(m.begin(), m.end(), q) - m.begin();
  const int64_t foreign = q - below;
  return m[static_cast<size_t>(foreign % static_cast<int64_t>(m.size()))];
}

ShardedChunk::ShardedChunk(const Plan& plan, const Span& chunk, const TernaryBucketShape& s,
                           const ShardPlacement& placement) {
  const int p = s.ranks, w = s.workers_per_rank;
  levels = sum_levels(static_cast<int64_t>(p) * w);
  for (int q = 0; q < p; ++q) {
    const int64_t b0 = chunk.bytes * q / p, b1 = chunk.bytes * (q + 1) / p;
    shards.push_back(plan.span(chunk.begin + b0, chunk.begin + b1));
    sum_bytes.push_back(8 * span_words(shards.back(), levels));
  }
  const int m = placement.nodes();
  node_sum_bytes.assign(static_cast<size_t>(m), std::vector<int64_t>(static_cast<size_t>(p), 0));
  for (int n = 0; n < m; ++n) {
    const int64_t workers = static_cast<int64_t>(placement.members(n).size()) * w;
    node_levels.push_back(sum_levels(workers));
    raw_codes.push_back(workers == 1);
    for (int q = 0; q < p; ++q)
      node_sum_bytes[n][q] =
          workers == 1 ? shards[q].bytes : 8 * span_words(shards[q], node_levels.back());
  }
}

// ---- messages --------------------------------------------------------------------------------

namespace {

void add_message(std::vector<Message>& out, int src, int dst, int64_t bytes, int phase) {
  if (bytes > 0) out.push_back({src, dst, bytes, phase});
}

void sharded_messages(const TernaryBucketShape& s, const Plan& plan, const Span& chunk,
                      const comm::NodeLayout& layout, std::vector<Message>& out) {
  const ShardPlacement pl(layout);
  const ShardedChunk sc(plan, chunk, s, pl);
  const int p = s.ranks, w = s.workers_per_rank;
  // A: codes to the local owners, inside each node.
  for (int n = 0; n < pl.nodes(); ++n)
    for (int r : pl.members(n))
      for (int m : pl.members(n)) {
        if (m == r) continue;
        int64_t bytes = 0;
        for (int q : pl.local_shards(m)) bytes += w * sc.shards[q].bytes;
        add_message(out, r, m, bytes, 0);
      }
  // C: node sums (or codes) of foreign shards to their owners.
  for (int n = 0; n < pl.nodes(); ++n)
    for (int q = 0; q < p; ++q)
      if (pl.node_of(q) != n) add_message(out, pl.local_owner(n, q), q, sc.node_sum_bytes[n][q], 1);
  // E: final sums back to every other node's local owner.
  for (int q = 0; q < p; ++q)
    for (int n = 0; n < pl.nodes(); ++n)
      if (pl.node_of(q) != n) add_message(out, q, pl.local_owner(n, q), sc.sum_bytes[q], 2);
  // F: final sums shared inside each node.
  for (int n = 0; n < pl.nodes(); ++n)
    for (int r : pl.members(n)) {
      int64_t bytes = 0;
      for (int q : pl.local_shards(r)) bytes += sc.sum_bytes[q];
      for (int m : pl.members(n))
        if (m != r) add_message(out, r, m, bytes, 3);
    }
}

}  // namespace

std::vector<Message> chunk_messages(Route route, const TernaryBucketShape& s, const Plan& plan,
                                    size_t c) {
  TG_CHECK(c < plan.chunks.size(), "chunk_messages: chunk ", c, " of ", plan.chunks.size());
  const Span& chunk = plan.chunks[c];
  const int p = s.ranks;
  const int64_t wb = s.workers_per_rank * chunk.bytes;
  const bool gloo = s.backend == "gloo";
  const uint64_t levels = sum_levels(static_cast<int64_t>(p) * s.workers_per_rank);
  const int64_t k = 8 * span_words(chunk, levels);
  std::vector<Message> out;
  if (p == 1) return out;
  switch (route) {
    case Route::allgather:
      for (int r = 0; r < p; ++r)
        for (int q = 0; q < p; ++q)
          if (q != r) add_message(out, r, q, wb, 0);
      return out;
    case Route::ps:
      for (int r = 1; r < p; ++r) add_message(out, r, 0, wb, 0);
      for (int r = 0; r < p; ++r) {
        if (!gloo) {
          if (r > 0) add_message(out, 0, r, k, 1);
          continue;
        }
        // Gloo's binomial tree from rank 0 (comm/gloo_wire.h): in round i, every rank below 2^i
        // sends to r + 2^i.
        int round = 1;
        for (int64_t step = 1; step < p; step <<= 1, ++round)
          if (r < step && r + step < p) add_message(out, r, static_cast<int>(r + step), k, round);
      }
      return out;
    case Route::packed_allreduce:
      // A ring: Gloo's sends to the previous rank (received from the next, comm/gloo_wire.h);
      // the model's is symmetric.
      for (int r = 0; r < p; ++r) {
        const uint64_t sent = gloo ? comm::gloo_wire::allreduce(k, sizeof(uint64_t), p, r).sent
                                   : comm::wire_model::allreduce(k, p).sent;
        add_message(out, r, (r + p - 1) % p, static_cast<int64_t>(sent), 0);
      }
      return out;
    case Route::sharded:
      sharded_messages(s, plan, chunk, comm::NodeLayout::each_alone(p), out);
      return out;
    case Route::hierarchical:
      sharded_messages(s, plan, chunk, layout_or_alone(s), out);
      return out;
    default:
      break;
  }
  TG_THROW("chunk_messages: '", name(route), "' is not a ternary bucket route");
}

// ---- cost ------------------------------------------------------------------------------------

namespace {

struct Totals {
  std::vector<comm::WireBytes> rank, inter;
  std::vector<uint64_t> node_inter;
};

Totals totals(Route route, const TernaryBucketShape& s) {
  const Plan plan = plan_bucket(s.numel, s.format, s.chunk_bytes);
  const auto p = static_cast<size_t>(s.ranks);
  Totals t;
  t.rank.resize(p);
  t.inter.resize(p);
  t.node_inter.assign(static_cast<size_t>(std::max(1, s.nodes.nodes())), 0);
  for (size_t c = 0; c < plan.chunks.size(); ++c)
    for (const Message& m : chunk_messages(route, s, plan, c)) {
      const auto b = static_cast<uint64_t>(m.bytes);
      t.rank[static_cast<size_t>(m.src)].sent += b;
      t.rank[static_cast<size_t>(m.dst)].received += b;
      if (!s.nodes.known()) continue;
      const int ns = s.nodes.node_of[static_cast<size_t>(m.src)];
      const int nd = s.nodes.node_of[static_cast<size_t>(m.dst)];
      if (ns == nd) continue;
      t.inter[static_cast<size_t>(m.src)].sent += b;
      t.inter[static_cast<size_t>(m.dst)].received += b;
      t.node_inter[static_cast<size_t>(ns)] += b;
      t.node_inter[static_cast<size_t>(nd)] += b;
    }
  return t;
}

}  // namespace

TernaryCost ternary_bucket_cost(Route route, const TernaryBucketShape& shape, int rank) {
  check_bucket_shape(shape);
  TG_CHECK(is_bucket_route(route), "ternary_bucket_cost: '", name(route),
           "' is not a ternary bucket route (resolve auto first)");
  TG_CHECK(rank >= 0 && rank < shape.ranks, "ternary_bucket_cost: rank ", rank, " (expected 0 .. ",
           shape.ranks - 1, ")");
  const Totals t = totals(route, shape);
  TernaryCost c;
  c.rank = t.rank[static_cast<size_t>(rank)];
  c.rank_inter = t.inter[static_cast<size_t>(rank)];
  for (const comm::WireBytes& w : t.rank) {
    c.busiest = std::max(c.busiest, w.sent + w.received);
    c.sent_max = std::max(c.sent_max, w.sent);
  }
  c.busiest_link = shape.nodes.nodes() > 1
                       ? *std::max_element(t.node_inter.begin(), t.node_inter.end())
                       : c.busiest;
  return c;
}

Route choose_bucket_route(const TernaryBucketShape& shape) {
  check_bucket_shape(shape);
  Route best = kBucketRoutes[0];
  TernaryCost best_cost = ternary_bucket_cost(best, shape, 0);
  for (Route r : kBucketRoutes) {
    const TernaryCost c = ternary_bucket_cost(r, shape, 0);
    if (c.busiest_link < best_cost.busiest_link ||
        (c.busiest_link == best_cost.busiest_link && c.busiest < best_cost.busiest)) {
      best = r;
      best_cost = c;
    }
  }
  return best;
}

}  // namespace tg::tern
