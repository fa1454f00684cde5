// `terngrad perf-model --simulate` (see perf_sim_cmd.h).
#include "cmd/perf_sim_cmd.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "nn/core/error.h"
#include "nn/core/json.h"
#include "terngrad/analysis/sim/simulate.h"

namespace tg::cli {

namespace {

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// "sharded=3,ps=1": the routes the buckets take.
std::string routes_taken(const sim::Schedule& s) {
  std::map<std::string, int> n;
  for (const sim::Bucket& b : s.buckets) ++n[tern::name(b.route)];
  std::string out;
  for (const auto& [k, v] : n) out += (out.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return out;
}

}  // namespace

void add_simulate_options(CLI::App* cmd, bool& simulate, PerfSimArgs& a) {
  cmd->add_flag("--simulate", simulate,
                "Replay one iteration's exchange, message by message, on SimGrid (the schedule "
                "the communicators run; exchange and iteration seconds per method and route)");
  cmd->add_option("--methods", a.methods,
                  "--simulate: fp32, fp16 (our exact path), fp32:ring, fp16:ring (DDP's ring "
                  "allreduce), terngrad[:ROUTE] with ROUTE auto, ps, allgather, packed-allreduce, "
                  "sharded, hierarchical (default fp32,terngrad)")
      ->delimiter(',');
  cmd->add_option("--oversubscription", a.oversubscription,
                  "--simulate: the core of a two-level tree carries 1/S of what the nodes can "
                  "send at once (default 1: non-blocking)")
      ->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--platform", a.platform,
                  "--simulate: a SimGrid platform file (hosts named rank-0, rank-1, ...) instead "
                  "of the cluster's links")
      ->check(CLI::ExistingFile);
  cmd->add_option("--per-message-us", a.per_message_us,
                  "--simulate: sender CPU per message, microseconds (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--per-phase-us", a.per_phase_us,
                  "--simulate: a wait per phase with messages, microseconds (round trips, "
                  "scheduling; default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--encode-ns", a.encode_ns,
                  "--simulate: TernGrad encode per element, ns (default half of T_enc / params)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--decode-ns", a.decode_ns,
                  "--simulate: TernGrad decode per element, ns (default half of T_enc / params)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--bucket-mb", a.bucket_mb,
                  "--simulate: the Reducer's bucket cap in MB (default 25; 0: the whole gradient "
                  "in one call, as bench_comm times it)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--first-bucket-mb", a.first_bucket_mb,
                  "--simulate: the first bucket's cap in MB (default 1; 0: no first bucket)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--chunk-mb", a.chunk_mb,
                  "--simulate: TernGrad chunk of one worker's bucket, MB (default 2)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shared-cores", a.shared_cores,
                  "--simulate: every rank shares this many cores (the one-machine validation "
                  "lab): CPU costs stretched by GPUs / cores (default 0: a core per rank)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--sim-model", a.model,
                  "--simulate: flow (every flow its own), phase (each phase one parallel task: "
                  "thousands of ranks), auto (phase above 128 GPUs; default)")
      ->check(CLI::IsMember({"flow", "phase", "auto"}));
  cmd->add_option("--parallel", a.parallel,
                  "--simulate: simulations at once (default: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--timeline", a.timeline,
                  "--simulate: write the per-node timeline (CSV: node, bucket, chunk, phase, "
                  "start, end) of the one simulated iteration here");
}

void print_simulation(const perf::Cluster& cluster, const perf::Workload& w,
                      const std::vector<int>& gpus, const PerfSimArgs& a, bool json) {
  TG_CHECK(sim::simulator_available(), sim::simulator_missing());
  std::vector<sim::Method> methods;
  for (const std::string& m :
       a.methods.empty() ? std::vector<std::string>{"fp32", "terngrad"} : a.methods)
    methods.push_back(sim::Method::parse(m));
  TG_CHECK(a.oversubscription >= 1, "--oversubscription ", a.oversubscription,
           ": expected >= 1 (1 = a non-blocking core)");
  TG_CHECK(a.per_message_us >= 0, "--per-message-us ", a.per_message_us, ": expected >= 0");
  TG_CHECK(a.timeline.empty() || gpus.size() * methods.size() == 1,
           "--timeline writes one simulation's timeline: give one --gpus and one --methods");
  const int64_t params = sum(w.tensor_numel);
  sim::Platform pf;
  pf.cluster = cluster;
  pf.oversubscription = a.oversubscription;
  pf.file = a.platform;
  pf.model = a.model;
  sim::Costs costs;
  costs.per_message_s = a.per_message_us * 1e-6;
  const double half_enc = w.encode_s / 2 / static_cast<double>(params);
  costs.encode_s_per_element = a.encode_ns >= 0 ? a.encode_ns * 1e-9 : half_enc;
  costs.decode_s_per_element = a.decode_ns >= 0 ? a.decode_ns * 1e-9 : half_enc;
  if (!json)
    std::printf(
        "\n%s on %s (simulated, %s%s): T_c %.4f s\n  %5s %-10s %-18s %12s %12s %12s %10s\n",
        w.network.c_str(), cluster.name.c_str(),
        a.platform.empty() ? "cluster preset" : a.platform.c_str(),
        a.oversubscription > 1
            ? (", core oversubscribed " + std::to_string(a.oversubscription).substr(0, 4) + ":1")
                  .c_str()
            : "",
        w.compute_s, "GPUs", "method", "route", "exchange s", "iteration s", "img/s", "sent MB");
  costs.shared_cores = a.shared_cores;
  TG_CHECK(a.per_phase_us >= 0, "--per-phase-us ", a.per_phase_us, ": expected >= 0");
  costs.per_phase_s = a.per_phase_us * 1e-6;
  auto bytes_of = [](double mb, const char* flag) {
    TG_CHECK(mb >= 0, flag, " ", mb, ": expected >= 0");
    return mb == 0 ? int64_t{1} << 62 : std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20)));
  };
  const int parallel = a.parallel > 0
                           ? a.parallel
                           : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (const int p : gpus) {
    sim::ScheduleOptions so;
    so.ranks = p;
    so.nodes = comm::NodeLayout::blocks(p, cluster.gpus_per_node);
    so.bucket_bytes = bytes_of(a.bucket_mb, "--bucket-mb");
    so.first_bucket_bytes = bytes_of(a.first_bucket_mb, "--first-bucket-mb");
    so.chunk_bytes = a.chunk_mb == 0 ? 0 : bytes_of(a.chunk_mb, "--chunk-mb");
    // Per method: the exchange alone (every bucket ready at once, as bench_comm times it) and
    // the iteration (buckets ready during backward: a third of T_c forward, two thirds
    // backward), all of this GPU count's simulations at once.
    sim::ScheduleOptions it = so;
    it.forward_s = w.compute_s / 3;
    it.backward_s = w.compute_s - it.forward_s;
    std::vector<sim::Schedule> schedules;
    for (const sim::Method& m : methods) {
      schedules.push_back(sim::build_schedule(w.tensor_numel, m, so));
      schedules.push_back(sim::build_schedule(w.tensor_numel, m, it));
    }
    std::vector<sim::Job> jobs;
    for (size_t i = 0; i < schedules.size(); ++i)
      jobs.push_back({&schedules[i], pf, costs, i % 2 == 1 ? a.timeline : ""});
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<sim::Result> res = sim::simulate_all(jobs, parallel);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t k = 0; k < methods.size(); ++k) {
      const sim::Method& m = methods[k];
      const sim::Schedule& alone = schedules[2 * k];
      const double exchange = res[2 * k].seconds;
      const double iteration = std::max(w.compute_s, res[2 * k + 1].seconds);
      const double ips = static_cast<double>(p * w.batch_per_gpu) / iteration;
      if (json) {
        json::Object o;
        o.add("network", w.network).add("cluster", cluster.name).add("gpus", p);
        o.add("gpus_per_node", cluster.gpus_per_node);
        o.add("oversubscription", a.oversubscription);
        o.add("model", pf.model == "auto" ? (p > 128 ? "phase" : "flow") : pf.model);
        if (!a.platform.empty()) o.add("platform", a.platform);
        o.add("method", m.name()).add("route", m.route_name()).add("routes", routes_taken(alone));
        o.add("exchange_seconds", exchange).add("iteration_seconds", iteration);
        o.add("images_per_sec", ips).add("compute_s", w.compute_s);
        o.add("batch_per_gpu", w.batch_per_gpu).add("params", params);
        o.add("buckets", static_cast<int64_t>(alone.buckets.size()));
        o.add("messages", alone.messages).add("sent_max_bytes", alone.sent_max);
        o.add("per_message_s", costs.per_message_s)
            .add("encode_s_per_element", costs.encode_s_per_element)
            .add("decode_s_per_element", costs.decode_s_per_element)
            .add("shared_cores", costs.shared_cores)
            .add("per_phase_s", costs.per_phase_s);
        // Wall time of this GPU count's simulations (every method, both schedules, in parallel).
        o.add("simulation_wall_s", wall);
        std::printf("%s\n", o.str().c_str());
      } else {
        std::printf("  %5d %-10s %-18s %12.4f %12.4f %12.1f %10.2f\n", p, m.name().c_str(),
                    routes_taken(alone).c_str(), exchange, iteration, ips,
                    static_cast<double>(alone.sent_max) / 1e6);
      }
    }
    std::fflush(stdout);
  }
}

}  // namespace tg::cli
