// `terngrad perf-model --simulate`: one iteration's gradient exchange replayed on a SimGrid
// platform (flow-level network model, SimGrid's LV08, validated against TCP), message by
// message, from the schedule the communicators execute (terngrad/analysis/sim/schedule.h).
//
// Every node is a SimGrid actor on its first rank's host. For each bucket, in launch order, it
// waits until the bucket is ready, spends the encode time, then runs the bucket's chunks phase by
// phase: it waits the per-phase time, pays the per-message CPU of its busiest rank, starts its
// flows and counts each one into its destination's arrivals as it completes, and starts the
// next phase once its flows are done and all flows to it have arrived; after the bucket it spends
// the decode time. A phase's messages inside a node are flows of their own, host to host; its
// messages from one node to another travel as one flow between the nodes' first hosts (they
// share both node links, which bound them): a thousand ranks in 256 nodes start 65 thousand
// flows in an all-to-all phase instead of a million. With one rank per node (a platform file,
// or gpus_per_node = 1) every message is its own flow. For thousands of ranks, Platform::model
// "phase" runs each phase as one parallel task instead (below).
//
// Platforms: a cluster (perf::Cluster: G GPUs per node, each on its own intra-node link to the
// node's switch; each node on one link to the core), optionally with an oversubscribed core (a
// shared link of M * inter bandwidth / oversubscription that every inter-node message crosses:
// a two-level tree whose spine carries 1 / oversubscription of what the nodes can send at once);
// or a SimGrid XML platform file whose hosts are named rank-0, rank-1, ...
//
// SimGrid is optional (Debian's libsimgrid-dev), and opened only here: the replay is a module
// (simgrid_module.cpp, loaded with dlopen). Without it simulator_available() is false and
// simulate() throws the one line that says how to get it. Each call runs the simulation in a child
// process (a SimGrid engine can be created once per process).
#pragma once

#include <string>
#include <vector>

#include "terngrad/analysis/perf_model.h"
#include "terngrad/analysis/sim/schedule.h"

namespace tg::sim {

struct Platform {
  perf::Cluster cluster;        // gpus_per_node, intra and inter links, duplex
  double oversubscription = 1;  // >= 1; 1: a non-blocking core (no core link)
  std::string file;             // a SimGrid platform file instead of the cluster (hosts rank-R)
  // "flow": every flow its own (SimGrid's LV08, the default, with its latency factor at 1 on a
  // cluster: the links' latencies are per message already); "phase": each phase of the whole
  // schedule one parallel task (SimGrid's ptask_L07: the phase's flows share the links by
  // max-min and end together, then the next phase starts on every rank), for thousands of
  // ranks; "auto": phase above 128 ranks.
  std::string model = "flow";
};

// The constants that connect the simulation to a machine (measured once, bench/README).
// CPU costs (per message, encode, decode) are one rank's on a core of its own; with
// `shared_cores` C > 0 every rank of the run shares C cores (the validation lab: P processes on
// one 2-core machine) and each CPU cost is stretched by max(1, P / C).
struct Costs {
  double per_message_s = 0;         // sender's CPU per message (the transport's handshakes)
  double encode_s_per_element = 0;  // TernGrad: statistics + ternarize + pack, per element
  double decode_s_per_element = 0;  // TernGrad: owner sums + decode + scale, per element
  int shared_cores = 0;             // 0: every rank has its own core
  // A wait per phase in which a rank has messages (not CPU: the transport's round trips before a
  // payload moves, the scheduling of P ranks on shared cores); measured with a one-tensor call.
  double per_phase_s = 0;
};

struct Result {
  double seconds = 0;            // the last rank's end (from t = 0)
  std::vector<double> rank_end;  // per rank
  int64_t messages = 0;
};

bool simulator_available();
// The line that says how to get the simulator ("" when it is available).
std::string simulator_missing();

// Simulates `schedule` on `platform`. timeline_csv: when not empty, one line per node, bucket,
// chunk and phase (node,bucket,chunk,phase,start_s,end_s,flows,bytes_sent) written there.
// Throws on a platform that cannot hold the ranks, a missing host in a platform file, or when
// the simulator is not built in.
Result simulate(const Schedule& schedule, const Platform& platform, const Costs& costs,
                const std::string& timeline_csv = "");

// Several simulations, up to `parallel` at once (each in its own process), results in order.
struct Job {
  const Schedule* schedule = nullptr;
  Platform platform;
  Costs costs;
  std::string timeline_csv;
};
std::vector<Result> simulate_all(const std::vector<Job>& jobs, int parallel);

}  // namespace tg::sim
