// The exchange's message schedule (see schedule.h).
#include "terngrad/analysis/sim/schedule.h"

#include <algorithm>

#include "comm/buckets.h"
#include "comm/gloo_wire.h"
#include "nn/core/error.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::sim {

Method Method::parse(std::string_view text) {
  Method m;
  const std::string_view head = text.substr(0, text.find(':'));
  if (head == "fp32" || head == "fp16") {
    m.gradients = head == "fp32" ? Gradients::fp32 : Gradients::fp16;
    const std::string_view r = text.substr(std::min(text.size(), head.size() + 1));
    TG_CHECK(text.size() == head.size() || r == "ring" || r == "auto", "method '", text,
             "': unknown route for ", head, " (known: auto, our exact path; ring)");
    m.route = r == "ring" ? tern::Route::ring : tern::Route::automatic;
    return m;
  }
  if (head == "terngrad") {
    m.gradients = Gradients::terngrad;
    m.route = tern::Route::automatic;
    if (text.size() > head.size()) {
      const std::string_view r = text.substr(head.size() + 1);
      bool found = false;
      for (tern::Route b : tern::kBucketRoutes)
        if (r == tern::name(b)) m.route = b, found = true;
      if (r == "auto") found = true;
      TG_CHECK(found, "method '", text,
               "': unknown TernGrad route (known: auto, ps, allgather, packed-allreduce, sharded, "
               "hierarchical)");
    }
    return m;
  }
  TG_THROW("method '", text,
           "': unknown (known: fp32, fp16, fp32:ring, fp16:ring, terngrad, terngrad:ROUTE with "
           "ROUTE one of auto, ps, allgather, packed-allreduce, sharded, hierarchical)");
}

std::string Method::name() const {
  switch (gradients) {
    case Gradients::fp32:
      return "fp32";
    case Gradients::fp16:
      return "fp16";
    case Gradients::terngrad:
      return "terngrad";
  }
  return "?";
}

std::string Method::route_name() const {
  return tern::name(route);
}

namespace {

// Gloo's ring allreduce of `bytes` (elements of `e` bytes) over p ranks: the chunk sizes of
// comm/gloo_wire.h's allreduce, rank r sending to r - 1; reduce-scatter step s sends chunk
// r + 1 + s, allgather step s chunk r + s (mod p). Each step is a phase.
std::vector<Phase> ring_phases(uint64_t bytes, uint64_t e, int p) {
  std::vector<Phase> out;
  if (p <= 1 || bytes == 0) return out;
  const uint64_t P = static_cast<uint64_t>(p);
  const std::vector<uint64_t> chunk = comm::gloo_wire::allreduce_chunks(bytes, e, p);
  for (int half = 0; half < 2; ++half)
    for (int s = 0; s + 1 < p; ++s) {
      Phase ph;
      for (int r = 0; r < p; ++r) {
        const uint64_t c = (static_cast<uint64_t>(r) + (half == 0 ? 1 : 0) + s) % P;
        const auto b = static_cast<int64_t>(chunk[c]);
        if (b > 0) ph.push_back({r, (r + p - 1) % p, b, static_cast<int>(out.size())});
      }
      out.push_back(std::move(ph));
    }
  return out;
}

}  // namespace

Schedule build_schedule(const std::vector<int64_t>& tensor_numel, const Method& method,
                        const ScheduleOptions& o) {
  TG_CHECK(!tensor_numel.empty(), "build_schedule: empty layout");
  TG_CHECK(o.ranks >= 1, "build_schedule: ", o.ranks, " ranks (expected >= 1)");
  TG_CHECK(!o.nodes.known() || o.nodes.ranks() == o.ranks, "build_schedule: a node layout of ",
           o.nodes.ranks(), " ranks for ", o.ranks);
  TG_CHECK(o.forward_s >= 0 && o.backward_s >= 0, "build_schedule: negative compute time");
  std::vector<comm::GradSlot> layout;
  int64_t total = 0;
  for (size_t i = 0; i < tensor_numel.size(); ++i) {
    TG_CHECK(tensor_numel[i] >= 1, "build_schedule: tensor ", i, " has ", tensor_numel[i],
             " elements");
    layout.push_back({"t" + std::to_string(i), total, tensor_numel[i]});
    total += tensor_numel[i];
  }
  // The time backward has produced slot i's gradient: slots run last to first, each taking its
  // share of backward_s by elements.
  std::vector<double> done(layout.size());
  double t = o.forward_s;
  for (size_t i = layout.size(); i-- > 0;) {
    t += o.backward_s * static_cast<double>(layout[i].numel) / static_cast<double>(total);
    done[i] = t;
  }

  Schedule s;
  s.ranks = o.ranks;
  s.method = method;
  const int p = o.ranks;
  std::vector<uint64_t> sent(static_cast<size_t>(p), 0);
  for (const comm::SlotRange& r :
       comm::make_buckets(layout, o.bucket_bytes, o.first_bucket_bytes)) {
    Bucket b;
    b.first_slot = r.first;
    b.last_slot = r.last;
    std::vector<int64_t> numel;
    for (size_t i = r.first; i < r.last; ++i) {
      numel.push_back(layout[i].numel);
      b.elements += layout[i].numel;
      b.ready_s = std::max(b.ready_s, done[i]);
    }
    if (method.gradients != Gradients::terngrad) {
      const int64_t e = method.gradients == Gradients::fp32 ? 4 : 2;
      if (method.route == tern::Route::ring) {
        b.route = tern::Route::ring;
        b.chunks.push_back(
            {ring_phases(static_cast<uint64_t>(b.elements * e), static_cast<uint64_t>(e), p)});
      } else {
        b.route = tern::node_fold_lanes(o.nodes, p, 1, e, b.elements) > 0
                      ? tern::Route::hierarchical
                  : tern::gathers_values(p, 1, e, b.elements) ? tern::Route::allgather
                                                              : tern::Route::reduce_scatter;
        Chunk ch;
        for (const tern::Message& m :
             tern::elementwise_messages(o.nodes, p, 1, e, b.elements, o.chunk_bytes)) {
          const auto k = static_cast<size_t>(m.phase);
          if (ch.phases.size() <= k) ch.phases.resize(k + 1);
          ch.phases[k].push_back(m);
        }
        std::erase_if(ch.phases, [](const Phase& ph) { return ph.empty(); });
        b.chunks.push_back(std::move(ch));
      }
    } else {
      tern::TernaryBucketShape shape;
      shape.numel = numel;
      shape.ranks = p;
      shape.format = o.format;
      shape.backend = "gloo";
      shape.chunk_bytes = o.chunk_bytes;
      shape.nodes = o.nodes;
      b.route =
          method.route == tern::Route::automatic ? tern::choose_bucket_route(shape) : method.route;
      TG_CHECK(tern::is_bucket_route(b.route), "build_schedule: '", tern::name(b.route),
               "' is not a TernGrad bucket route");
      const tern::Plan plan = tern::plan_bucket(shape.numel, shape.format, shape.chunk_bytes);
      for (size_t c = 0; c < plan.chunks.size(); ++c) {
        Chunk ch;
        if (c == 0 && p > 1) {  // round 1: the scalers, one f32 per tensor, to every rank
          Phase meta;
          for (int a = 0; a < p; ++a)
            for (int q = 0; q < p; ++q)
              if (a != q) meta.push_back({a, q, static_cast<int64_t>(4 * numel.size()), 0});
          ch.phases.push_back(std::move(meta));
        }
        const size_t base = ch.phases.size();
        for (const tern::Message& m : tern::chunk_messages(b.route, shape, plan, c)) {
          const size_t k = base + static_cast<size_t>(m.phase);
          if (ch.phases.size() <= k) ch.phases.resize(k + 1);
          ch.phases[k].push_back(m);
        }
        // Phases with no message on any rank are no step at all.
        std::erase_if(ch.phases, [](const Phase& ph) { return ph.empty(); });
        b.chunks.push_back(std::move(ch));
      }
    }
    for (const Chunk& ch : b.chunks)
      for (const Phase& ph : ch.phases)
        for (const tern::Message& m : ph) {
          sent[static_cast<size_t>(m.src)] += static_cast<uint64_t>(m.bytes);
          ++s.messages;
        }
    s.buckets.push_back(std::move(b));
  }
  s.sent_max = *std::max_element(sent.begin(), sent.end());
  return s;
}

}  // namespace tg::sim
