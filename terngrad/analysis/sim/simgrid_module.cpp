// The SimGrid side of simulate() (terngrad/analysis/sim/simulate.h), built as a module that the CLI
// opens only for --simulate, so that the `terngrad` binary, its start-up and the GPU bundle carry
// no SimGrid (Debian's brings ns-3 and Boost along: 32 MB of libraries). Its one entry point,
// tg_sim_run, runs a simulation in the calling process (simulate.cpp calls it in a child).
// Header-only use of the library's types: the module links SimGrid and nothing of ours.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <simgrid/s4u.hpp>
#include <sstream>

#include "nn/core/error.h"
#include "terngrad/analysis/sim/simulate.h"

namespace sg4 = simgrid::s4u;

namespace tg::sim {

namespace {

using Dir = sg4::LinkInRoute::Direction;

// One step (a phase of a chunk of a bucket) of one node: the flows it starts and how many it
// receives. Messages inside the node are flows of their own, host to host; the messages of a
// step from this node to another node travel as one flow between the two nodes' first hosts (they
// share both node links, which bound them; their different intra-node hops do not).
struct Flow {
  int src = 0, dst = 0;  // ranks (their hosts)
  int dst_node = 0;
  int64_t bytes = 0;
};
struct NodeStep {
  std::vector<Flow> flows;
  int expected = 0;      // flows to this node in this step
  size_t max_sends = 0;  // the most messages one of the node's ranks sends (its CPU cost)
  int64_t bytes = 0;     // sent by the node
};

// The schedule by node: steps in order (bucket, chunk, phase), each with every node's part.
struct Index {
  struct Step {
    size_t bucket, chunk, phase;
    std::vector<NodeStep> nodes;
  };
  std::vector<Step> steps;
  std::vector<size_t> first_step;  // per bucket: its first step (and steps.size() at the end)

  Index(const Schedule& s, const std::vector<int>& node_of, const std::vector<int>& first_rank) {
    const size_t nodes = first_rank.size();
    std::vector<int64_t> to_node(nodes, 0);
    std::vector<size_t> sends(static_cast<size_t>(s.ranks), 0);
    for (size_t b = 0; b < s.buckets.size(); ++b) {
      first_step.push_back(steps.size());
      const Bucket& bk = s.buckets[b];
      for (size_t c = 0; c < bk.chunks.size(); ++c)
        for (size_t k = 0; k < bk.chunks[c].phases.size(); ++k) {
          const Phase& ph = bk.chunks[c].phases[k];
          Step st{b, c, k, std::vector<NodeStep>(nodes)};
          // Messages grouped by source node: intra flows as they are, the rest summed per
          // destination node.
          std::vector<std::vector<const tern::Message*>> by_src(nodes);
          for (const tern::Message& m : ph) {
            by_src[static_cast<size_t>(node_of[static_cast<size_t>(m.src)])].push_back(&m);
            ++sends[static_cast<size_t>(m.src)];
          }
          for (size_t n = 0; n < nodes; ++n) {
            NodeStep& ns = st.nodes[n];
            std::vector<int> touched;
            for (const tern::Message* m : by_src[n]) {
              const int dn = node_of[static_cast<size_t>(m->dst)];
              ns.bytes += m->bytes;
              ns.max_sends = std::max(ns.max_sends, sends[static_cast<size_t>(m->src)]);
              if (dn == static_cast<int>(n)) {
                ns.flows.push_back({m->src, m->dst, dn, m->bytes});
                continue;
              }
              if (to_node[static_cast<size_t>(dn)] == 0) touched.push_back(dn);
              to_node[static_cast<size_t>(dn)] += m->bytes;
            }
            for (int dn : touched) {
              ns.flows.push_back({first_rank[n], first_rank[static_cast<size_t>(dn)], dn,
                                  to_node[static_cast<size_t>(dn)]});
              to_node[static_cast<size_t>(dn)] = 0;
            }
            for (const Flow& f : ns.flows) ++st.nodes[static_cast<size_t>(f.dst_node)].expected;
          }
          for (const tern::Message& m : ph) sends[static_cast<size_t>(m.src)] = 0;
          steps.push_back(std::move(st));
        }
    }
    first_step.push_back(steps.size());
  }
};

struct Line {
  int node;
  size_t bucket, chunk, phase;
  double start, end;
  size_t flows;
  int64_t bytes;
};

// The cluster: node zones of G hosts (each on its intra link to the node's router), under a star
// whose arms are the nodes' inter links, through one shared core link when oversubscribed.
std::vector<sg4::Host*> build_cluster(const Platform& pf, int ranks) {
  const perf::Cluster& c = pf.cluster;
  TG_CHECK(pf.oversubscription >= 1, "platform: oversubscription ", pf.oversubscription,
           " (expected >= 1)");
  const int g = c.gpus_per_node;
  const int nodes = (ranks + g - 1) / g;
  auto* root = sg4::create_star_zone("cluster");
  const sg4::Link* core = nullptr;
  if (pf.oversubscription > 1 && nodes > 1)
    core = root->create_link("core", nodes * c.inter.gbit_per_s * 1e9 / 8 / pf.oversubscription)
               ->set_latency(0)
               ->seal();
  std::vector<sg4::Host*> hosts;
  for (int n = 0; n < nodes; ++n) {
    auto* zone = sg4::create_star_zone("node-" + std::to_string(n));
    zone->set_parent(root);
    auto* gw = zone->create_router("node-" + std::to_string(n) + "-gw");
    zone->add_route(gw, nullptr, nullptr, nullptr, {}, true);
    for (int r = n * g; r < std::min(ranks, (n + 1) * g); ++r) {
      sg4::Host* h = zone->create_host("rank-" + std::to_string(r), 1e9);
      hosts.push_back(h);
      sg4::Link* l =
          c.full_duplex
              ? static_cast<sg4::Link*>(zone->create_split_duplex_link(
                    "intra-" + std::to_string(r), c.intra.gbit_per_s * 1e9 / 8))
              : zone->create_link("intra-" + std::to_string(r), c.intra.gbit_per_s * 1e9 / 8);
      l->set_latency(c.intra.latency_s)->seal();
      zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr,
                      {sg4::LinkInRoute(l, c.full_duplex ? Dir::UP : Dir::NONE)}, true);
    }
    zone->seal();
    sg4::Link* up = c.full_duplex ? static_cast<sg4::Link*>(root->create_split_duplex_link(
                                        "inter-" + std::to_string(n), c.inter.gbit_per_s * 1e9 / 8))
                                  : root->create_link("inter-" + std::to_string(n),
                                                      c.inter.gbit_per_s * 1e9 / 8);
    up->set_latency(c.inter.latency_s)->seal();
    std::vector<sg4::LinkInRoute> route = {
        sg4::LinkInRoute(up, c.full_duplex ? Dir::UP : Dir::NONE)};
    if (core) route.emplace_back(core);
    root->add_route(zone->get_netpoint(), nullptr, gw, nullptr, route, true);
  }
  root->seal();
  return hosts;
}

Result run_engine(const Schedule& s, const Platform& pf, const Costs& costs,
                  const std::string& timeline_csv) {
  // SimGrid's own options (--cfg=...) from TG_SIMGRID_ARGS, for experiments.
  std::vector<std::string> args = {"terngrad-sim", "--log=root.thres:critical"};
  TG_CHECK(pf.model == "flow" || pf.model == "phase" || pf.model == "auto", "simulation model '",
           pf.model, "': expected flow, phase or auto");
  const bool phases = pf.model == "phase" || (pf.model == "auto" && s.ranks > 128);
  if (phases) args.push_back("--cfg=host/model:ptask_L07");
  // A cluster's link latency is the per-message latency it names (perf::Link): the flow model
  // takes it as is. SimGrid's default LV08 multiplies every latency by 13.01 (its fit of TCP
  // slow start on wide-area transfers), which made each of a ring's 2 (P - 1) steps cost 13
  // times the link's latency: Gloo's ring on 32 GPUs behind 10 Gbit/s Ethernet took 0.82 s here
  // against 0.10 s in the phase model (which has no such factor) and 0.10 s with the factor at 1.
  // A platform file keeps SimGrid's defaults; TG_SIMGRID_ARGS overrides either.
  if (!phases && pf.file.empty()) args.push_back("--cfg=network/latency-factor:1");
  if (const char* extra = std::getenv("TG_SIMGRID_ARGS")) {
    std::istringstream in(extra);
    for (std::string w; in >> w;) args.push_back(w);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  sg4::Engine e(&argc, argv.data());
  std::vector<sg4::Host*> hosts;
  if (!pf.file.empty()) {
    e.load_platform(pf.file);
    for (int r = 0; r < s.ranks; ++r) {
      sg4::Host* h = e.host_by_name_or_null("rank-" + std::to_string(r));
      TG_CHECK(h != nullptr, "platform file ", pf.file, ": no host named rank-", r, " (", s.ranks,
               " ranks need hosts rank-0 .. rank-", s.ranks - 1, ")");
      hosts.push_back(h);
    }
  } else {
    hosts = build_cluster(pf, s.ranks);
  }
  // Nodes: the cluster's (G consecutive ranks), or every rank its own with a platform file.
  const int g = pf.file.empty() ? std::max(1, pf.cluster.gpus_per_node) : 1;
  std::vector<int> node_of(static_cast<size_t>(s.ranks)), first_rank;
  for (int r = 0; r < s.ranks; ++r) {
    node_of[static_cast<size_t>(r)] = r / g;
    if (r % g == 0) first_rank.push_back(r);
  }
  const size_t nodes = first_rank.size();
  const Index idx(s, node_of, first_rank);
  const bool tern = s.method.gradients == Gradients::terngrad;
  const double stretch = costs.shared_cores > 0
                             ? std::max(1.0, static_cast<double>(s.ranks) / costs.shared_cores)
                             : 1.0;
  std::vector<double> end(nodes, 0);
  std::vector<std::vector<Line>> lines(nodes);
  const bool keep = !timeline_csv.empty();
  // Arrivals per node and step, counted by the senders as their flows complete.
  struct Inbox {
    sg4::MutexPtr mu = sg4::Mutex::create();
    sg4::ConditionVariablePtr cv = sg4::ConditionVariable::create();
    std::vector<int> arrived;
  };
  std::vector<Inbox> inbox(nodes);
  for (Inbox& in : inbox) in.arrived.assign(idx.steps.size(), 0);
  // Every actor's walk over the buckets: wait until the bucket is ready, encode, its steps,
  // decode (the CPU costs stretched when ranks share cores).
  const auto cpu = [&](double per_element, int64_t elements) {
    if (tern && per_element > 0)
      sg4::this_actor::sleep_for(stretch * per_element * static_cast<double>(elements));
  };
  const auto walk = [&](const auto& step) {
    for (size_t b = 0; b < s.buckets.size(); ++b) {
      const Bucket& bk = s.buckets[b];
      if (bk.ready_s > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(bk.ready_s);
      cpu(costs.encode_s_per_element, bk.elements);
      for (size_t t = idx.first_step[b]; t < idx.first_step[b + 1]; ++t) step(t);
      cpu(costs.decode_s_per_element, bk.elements);
    }
  };
  // The waits a step starts with: the per-phase wait, then the busiest rank's per-message CPU.
  const auto step_costs = [&](size_t max_sends) {
    if (costs.per_phase_s > 0) sg4::this_actor::sleep_for(costs.per_phase_s);
    if (costs.per_message_s > 0 && max_sends > 0)
      sg4::this_actor::sleep_for(stretch * costs.per_message_s * static_cast<double>(max_sends));
  };
  if (phases) {
    // One actor runs the schedule phase by phase, each phase one parallel task over every host.
    sg4::Actor::create("phases", hosts[0], [&] {
      const size_t h = hosts.size();
      // One H x H matrix for every step, cleared where the step wrote (8 MB at 1,024 ranks).
      std::vector<double> bytes(h * h, 0.0);
      const std::vector<double> no_flops(h, 0.0);
      walk([&](size_t t) {
        size_t max_sends = 0, flows = 0;
        int64_t sent = 0;
        for (const NodeStep& ns : idx.steps[t].nodes) {
          max_sends = std::max(max_sends, ns.max_sends);
          for (const Flow& f : ns.flows) {
            bytes[static_cast<size_t>(f.src) * h + static_cast<size_t>(f.dst)] +=
                static_cast<double>(f.bytes);
            ++flows;
            sent += f.bytes;
          }
        }
        if (flows == 0) return;
        const double t0 = sg4::Engine::get_clock();
        step_costs(max_sends);
        sg4::this_actor::parallel_execute(hosts, no_flops, bytes);
        for (const NodeStep& ns : idx.steps[t].nodes)
          for (const Flow& f : ns.flows)
            bytes[static_cast<size_t>(f.src) * h + static_cast<size_t>(f.dst)] = 0.0;
        if (keep)
          lines[0].push_back({-1, idx.steps[t].bucket, idx.steps[t].chunk, idx.steps[t].phase, t0,
                              sg4::Engine::get_clock(), flows, sent});
      });
      std::fill(end.begin(), end.end(), sg4::Engine::get_clock());
    });
  }
  for (size_t n = 0; n < nodes && !phases; ++n) {
    sg4::Actor::create(
        "node-" + std::to_string(n), hosts[static_cast<size_t>(first_rank[n])], [&, n] {
          walk([&](size_t t) {
            const NodeStep& mine = idx.steps[t].nodes[n];
            if (mine.flows.empty() && mine.expected == 0) return;
            const double t0 = sg4::Engine::get_clock();
            step_costs(mine.max_sends);
            // The flows at once; each counted into its destination's arrivals as it completes.
            std::vector<sg4::CommPtr> comms;
            for (const Flow& f : mine.flows)
              comms.push_back(sg4::Comm::sendto_async(hosts[static_cast<size_t>(f.src)],
                                                      hosts[static_cast<size_t>(f.dst)],
                                                      static_cast<uint64_t>(f.bytes)));
            std::vector<size_t> which(comms.size());
            for (size_t i = 0; i < which.size(); ++i) which[i] = i;
            while (!comms.empty()) {
              const auto i = static_cast<size_t>(sg4::Comm::wait_any(comms));
              Inbox& to = inbox[static_cast<size_t>(mine.flows[which[i]].dst_node)];
              {
                std::unique_lock<sg4::Mutex> lock(*to.mu);
                ++to.arrived[t];
              }
              to.cv->notify_all();
              comms.erase(comms.begin() + static_cast<std::ptrdiff_t>(i));
              which.erase(which.begin() + static_cast<std::ptrdiff_t>(i));
            }
            Inbox& in = inbox[n];
            std::unique_lock<sg4::Mutex> lock(*in.mu);
            in.cv->wait(lock, [&] { return in.arrived[t] >= mine.expected; });
            if (keep)
              lines[n].push_back({static_cast<int>(n), idx.steps[t].bucket, idx.steps[t].chunk,
                                  idx.steps[t].phase, t0, sg4::Engine::get_clock(),
                                  mine.flows.size(), mine.bytes});
          });
          end[n] = sg4::Engine::get_clock();
        });
  }
  e.run();
  if (keep) {
    std::ofstream f(timeline_csv);
    TG_CHECK(f.good(), "cannot write the timeline to ", timeline_csv, ": ", std::strerror(errno));
    f << "node,bucket,chunk,phase,start_s,end_s,flows,bytes_sent\n";
    for (const auto& per_node : lines)
      for (const Line& l : per_node)
        f << l.node << ',' << l.bucket << ',' << l.chunk << ',' << l.phase << ',' << l.start << ','
          << l.end << ',' << l.flows << ',' << l.bytes << '\n';
    TG_CHECK(f.good(), "cannot write the timeline to ", timeline_csv);
  }
  Result res;
  res.rank_end.resize(static_cast<size_t>(s.ranks));
  for (int r = 0; r < s.ranks; ++r)
    res.rank_end[static_cast<size_t>(r)] =
        end[static_cast<size_t>(node_of[static_cast<size_t>(r)])];
  for (double t : end) res.seconds = std::max(res.seconds, t);
  res.messages = s.messages;
  return res;
}

}  // namespace

}  // namespace tg::sim

// Runs `schedule` on `platform` with `costs` (the types of terngrad/analysis/sim/simulate.h);
// writes schedule->ranks end times to rank_end and returns 0, or returns 1 with a one-line message
// in error (NUL-terminated, cut to error_len).
extern "C" __attribute__((visibility("default"))) int tg_sim_run(const tg::sim::Schedule* schedule,
                                                                 const tg::sim::Platform* platform,
                                                                 const tg::sim::Costs* costs,
                                                                 const char* timeline_csv,
                                                                 double* rank_end, char* error,
                                                                 size_t error_len) {
  try {
    const tg::sim::Result r =
        tg::sim::run_engine(*schedule, *platform, *costs, timeline_csv ? timeline_csv : "");
    std::memcpy(rank_end, r.rank_end.data(), r.rank_end.size() * sizeof(double));
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
    return 1;
  }
}
