// `terngrad perf-model` (see perf_model_cmd.h): inputs from our nets, the cluster presets or a
// TOML file, the paper's 1-GPU readings or --calibrate's measurements; the model itself is
// terngrad/analysis/perf_model.h.
#include "cmd/perf_model_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "cmd/perf_inputs.h"
#include "config/config.h"
#include "nn/core/error.h"
#include "nn/core/json.h"
#include "nn/nets/net.h"
#include "terngrad/analysis/perf_model.h"
#include "terngrad/analysis/sim/simulate.h"

namespace tg::cli {

using namespace tg::config;

namespace {

using perf::Cluster;

// ---- NET=VALUE overrides -------------------------------------------------------------------

// "V" applies to every network (key ""), "net=V" to one; later entries win.
std::map<std::string, double> parse_overrides(const std::vector<std::string>& items,
                                              const char* flag, bool integer) {
  std::map<std::string, double> out;
  for (const auto& item : items) {
    const size_t eq = item.find('=');
    const std::string key = eq == std::string::npos ? "" : item.substr(0, eq);
    const std::string text = eq == std::string::npos ? item : item.substr(eq + 1);
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TG_CHECK(used == text.size() && !text.empty() && std::isfinite(v) && v >= 0 &&
                 (!integer || v == std::floor(v)),
             flag, " '", item, "': expected ", integer ? "a whole number" : "a number of seconds",
             " >= 0, or NET=", integer ? "B" : "SECONDS");
    if (!key.empty()) {
      const auto names = net_names();
      TG_CHECK(std::find(names.begin(), names.end(), key) != names.end(), flag, " '", item,
               "': unknown net '", key, "'");
    }
    out[key] = v;
  }
  return out;
}

std::optional<double> lookup(const std::map<std::string, double>& m, const std::string& net) {
  if (auto it = m.find(net); it != m.end()) return it->second;
  if (auto it = m.find(""); it != m.end()) return it->second;
  return std::nullopt;
}

// ---- output --------------------------------------------------------------------------------

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string format_rate(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 1e4 ? "%.0f" : "%.1f", v);
  return buf;
}

int64_t total_numel(const perf::Workload& w) {
  int64_t p = 0;
  for (const int64_t n : w.tensor_numel) p += n;
  return p;
}

void print_cluster_header(const Cluster& c, const perf::ModelOptions& mo, const char* down) {
  std::printf(
      "cluster %s: %s\n  %d GPU%s per node; intra-node %g Gbit/s, %g us; inter-node %g "
      "Gbit/s, %g us; %s duplex; topology %s; TernGrad down bits %s\n",
      c.name.c_str(), c.description.c_str(), c.gpus_per_node, c.gpus_per_node == 1 ? "" : "s",
      c.intra.gbit_per_s, c.intra.latency_s * 1e6, c.inter.gbit_per_s, c.inter.latency_s * 1e6,
      c.full_duplex ? "full" : "half", perf::name(mo.topology), down);
}

}  // namespace

CLI::App* add_perf_model_command(CLI::App& app, PerfModelArgs& a) {
  auto* cmd = app.add_subcommand("perf-model",
                                 "The paper's performance model (Figure 5) against its readings");
  cmd->footer(
      "Images/s of fp32 and TernGrad training on 1-512 GPUs, from our nets' parameter counts, "
      "beside the paper's Figure 5 readings.");
  cmd->add_option("--cluster", a.clusters,
                  "ethernet | infiniband | ethernet10g | a TOML cluster file (repeatable; "
                  "default the paper's two, ethernet and infiniband)")
      ->delimiter(',');
  cmd->add_option("--networks", a.networks,
                  "Comma-separated nets (default alexnet,googlenet,vgg_a; any of lenet, cifarnet, "
                  "alexnet, googlenet, vgg_a)")
      ->delimiter(',');
  cmd->add_option("--gpus", a.gpus, "Comma-separated GPU counts (default 1,2,4,...,512)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--batch", a.batch,
                  "Per-GPU batch: B for every net or NET=B (default the paper's: 128, 64, 32)")
      ->delimiter(',');
  cmd->add_option("--compute-time", a.compute_time,
                  "Forward+backward seconds per batch on one GPU: T or NET=T (default: batch / "
                  "the paper's 1-GPU fp32 reading on the cluster's GPU)")
      ->delimiter(',');
  cmd->add_option("--encode-time", a.encode_time,
                  "TernGrad encode+decode seconds per iteration: T or NET=T (default: the "
                  "paper's 1-GPU fp32/TernGrad gap)")
      ->delimiter(',');
  cmd->add_option("--topology", a.topology,
                  "ps (parameter server sharded over the nodes, the paper's) | ring "
                  "(hierarchical ring allreduce)")
      ->check(CLI::IsMember({"ps", "ring"}));
  cmd->add_option("--down-bits", a.down_bits,
                  "TernGrad bits per element server->worker: ceil = ceil(log2(2N+1)) (default), "
                  "exact = log2(2N+1)")
      ->check(CLI::IsMember({"ceil", "exact"}));
  cmd->add_flag("--json", a.json,
                "One JSON object per line per (network, cluster, GPU count) instead of the table");
  cmd->add_flag("--calibrate", a.calibrate,
                "Measure this machine (CPU): compute and encode time per batch with the real "
                "training step, the loopback link through the Gloo transport (or --link-gbit), and "
                "model one process "
                "per node");
  cmd->add_option("--link-gbit", a.link_gbit,
                  "--calibrate: model this link (Gbit/s, e.g. 0.957 for the emulated 1 Gbit/s "
                  "netns link) instead of measuring the loopback link")
      ->check(CLI::PositiveNumber);
  add_simulate_options(cmd, a.simulate, a.sim);
  cmd->add_option("--calibrate-steps", a.calibrate_steps,
                  "--calibrate: timed training steps per net, after one warm-up (default 2)")
      ->check(CLI::Range(1, 1000));
  return cmd;
}

namespace {

// --calibrate's cluster: this machine's compute, one process per node, and the link it models
// (--link-gbit, else the loopback link through the Gloo transport, measured now).
Cluster this_machine(const PerfModelArgs& a) {
  Cluster c;
  c.name = "this-machine";
  c.gpus_per_node = 1;  // one process per "node", as `terngrad train --nproc` runs
  c.full_duplex = true;
  char buf[160];
  if (a.link_gbit > 0) {
    c.inter = {a.link_gbit, 0.0};
    std::snprintf(buf, sizeof(buf),
                  "this machine's compute, one process per node, a given %g Gbit/s link",
                  a.link_gbit);
  } else {
    std::fprintf(stderr, "perf-model: measuring the loopback link (Gloo transport, 2 ranks) ...\n");
    const LinkMeasurement m = measure_loopback();
    c.inter = {m.gbit_per_s, m.latency_s};
    std::snprintf(
        buf, sizeof(buf),
        "this machine's compute, one process per node, loopback through Gloo (measured %.2f "
        "Gbit/s, %.1f us)",
        m.gbit_per_s, m.latency_s * 1e6);
  }
  c.description = buf;
  c.intra = c.inter;  // unused with one GPU per node
  return c;
}

// One run of the command: the parsed options, and the nets' sizes and measured steps, each
// computed once.
class PerfModelRun {
 public:
  explicit PerfModelRun(const PerfModelArgs& a)
      : a_(a),
        batch_over_(parse_overrides(a.batch, "--batch", true)),
        compute_over_(parse_overrides(a.compute_time, "--compute-time", false)),
        encode_over_(parse_overrides(a.encode_time, "--encode-time", false)) {
    mo_.topology = perf::parse_topology(a.topology);
    TG_CHECK(a.down_bits == "ceil" || a.down_bits == "exact", "--down-bits '", a.down_bits,
             "': expected ceil or exact");
    mo_.down_bits = a.down_bits == "ceil" ? perf::DownBits::ceil : perf::DownBits::exact;
    for (const auto& [k, v] : batch_over_) TG_CHECK(v >= 1, "--batch: ", v, "; expected >= 1");
    for (const auto& [k, v] : compute_over_)
      TG_CHECK(v > 0, "--compute-time: ", v, " s; expected > 0");
    networks_ = a.networks.empty() ? perf::figure5_networks() : a.networks;
    gpus_ = a.gpus;
    if (gpus_.empty()) gpus_ = a.calibrate ? std::vector<int>{1, 2, 4, 8} : perf::figure5_gpus();
  }

  std::vector<Cluster> clusters() const {
    if (a_.calibrate) {
      TG_CHECK(a_.clusters.empty(),
               "--calibrate models this machine; it cannot be combined with --cluster");
      return {this_machine(a_)};
    }
    std::vector<Cluster> out;
    for (const auto& n : a_.clusters.empty() ? perf::paper_cluster_names() : a_.clusters)
      out.push_back(resolve_cluster(n));
    return out;
  }

  void print(const Cluster& c) {
    const char* down = mo_.down_bits == perf::DownBits::ceil ? "ceil(log2(2N+1))" : "log2(2N+1)";
    if (!a_.json && a_.simulate)
      std::printf(
          "cluster %s: %s\n  %d GPU%s per node; intra-node %g Gbit/s, %g us; inter-node %g "
          "Gbit/s, %g us; %s duplex\n",
          c.name.c_str(), c.description.c_str(), c.gpus_per_node, c.gpus_per_node == 1 ? "" : "s",
          c.intra.gbit_per_s, c.intra.latency_s * 1e6, c.inter.gbit_per_s, c.inter.latency_s * 1e6,
          c.full_duplex ? "full" : "half");
    else if (!a_.json)
      print_cluster_header(c, mo_, down);
    for (const auto& net : networks_) print_network(c, net);
    if (!a_.json) std::printf("\n");
  }

 private:
  // The workload of `net` on cluster c: the batch (--batch, the paper's, or with --calibrate
  // the config's) and the compute and encode times (overrides, the paper's 1-GPU readings, or
  // measured); paper_inputs: whether the paper's readings apply to it.
  perf::Workload workload(const Cluster& c, const std::string& net, bool& paper_inputs) {
    perf::Workload w;
    w.network = net;
    // Parameter counts come from our own nets, built once per network.
    if (!numel_.count(net)) numel_[net] = net_tensor_numel(net);
    w.tensor_numel = numel_[net];
    const auto pb = perf::paper_batch(net);
    const auto bo = lookup(batch_over_, net);
    if (bo)
      w.batch_per_gpu = static_cast<int64_t>(*bo);
    else if (pb)
      w.batch_per_gpu = *pb;
    else if (a_.calibrate)
      w.batch_per_gpu = default_config({"model.name=" + net}).train.batch_size;
    else
      TG_THROW("net '", net, "' is not in the paper's Figure 5 (no paper batch): pass --batch ",
               net, "=B");
    paper_inputs = !bo || (pb && *pb == w.batch_per_gpu);
    const auto paper_t = perf::paper_compute_times(net, c.gpu);
    const auto co = lookup(compute_over_, net);
    const auto eo = lookup(encode_over_, net);
    if (a_.calibrate && !co) {
      const MeasuredStep& m = measured(net, w.batch_per_gpu);
      w.compute_s = m.compute_s;
      w.encode_s = eo ? *eo : m.encode_s;
      return w;
    }
    TG_CHECK(co || (paper_t && paper_inputs), "no compute time for net '", net, "' on cluster '",
             c.name, "' (the paper has no 1-GPU reading for it",
             c.gpu.empty() ? " and the cluster names no gpu" : " at this batch",
             "): pass --compute-time ", net, "=SECONDS or --calibrate");
    w.compute_s = co ? *co : paper_t->compute_s;
    w.encode_s = eo ? *eo : (paper_t && paper_inputs ? paper_t->encode_s : 0.0);
    paper_inputs = paper_inputs && !co;
    return w;
  }

  const MeasuredStep& measured(const std::string& net, int64_t batch) {
    const std::string key = net + "/" + std::to_string(batch);
    if (!measured_.count(key)) {
      std::fprintf(stderr, "perf-model: timing %s, batch %lld: 1 warm-up + %d steps ...\n",
                   net.c_str(), static_cast<long long>(batch), a_.calibrate_steps);
      measured_[key] = measure_step(net, batch, a_.calibrate_steps);
      std::fprintf(stderr, "perf-model: %s: compute %.4f s, encode %.4f s per batch\n", net.c_str(),
                   measured_[key].compute_s, measured_[key].encode_s);
    }
    return measured_[key];
  }

  void print_network(const Cluster& c, const std::string& net) {
    bool paper_inputs = false;
    const perf::Workload w = workload(c, net, paper_inputs);
    if (a_.simulate) {
      print_simulation(c, w, gpus_, a_.sim, a_.json);
      return;
    }
    if (!a_.json) {
      std::printf(
          "\n%s: %s parameters in %zu tensors; batch %lld per GPU; T_c %.4f s, T_enc "
          "%.4f s\n",
          net.c_str(), with_commas(total_numel(w)).c_str(), w.tensor_numel.size(),
          static_cast<long long>(w.batch_per_gpu), w.compute_s, w.encode_s);
      std::printf("  %5s %5s %12s %12s %8s %7s | %12s %12s %8s\n", "GPUs", "nodes", "fp32 img/s",
                  "Tern img/s", "speedup", "down b", "paper fp32", "paper Tern", "speedup");
    }
    for (const int n : gpus_) {
      const perf::Comparison r = perf::compare(w, c, n, mo_);
      std::optional<perf::PaperReading> paper;
      if (paper_inputs && c.paper_readings) paper = perf::paper_reading(net, c.gpu, n);
      if (a_.json)
        print_json_row(c, w, n, r, paper);
      else
        print_table_row(n, r, paper);
    }
  }

  void print_json_row(const Cluster& c, const perf::Workload& w, int n, const perf::Comparison& r,
                      const std::optional<perf::PaperReading>& paper) const {
    json::Object o;
    o.add("network", w.network).add("cluster", c.name).add("gpus", n);
    o.add("fp32_images_per_sec", r.fp32.images_per_sec)
        .add("terngrad_images_per_sec", r.terngrad.images_per_sec)
        .add("speedup", r.speedup);
    o.add("topology", perf::name(mo_.topology)).add("down_bits_mode", a_.down_bits);
    o.add("nodes", r.fp32.nodes).add("gpus_per_node", c.gpus_per_node);
    o.add("batch_per_gpu", w.batch_per_gpu).add("params", total_numel(w));
    o.add("tensors", static_cast<int64_t>(w.tensor_numel.size()));
    o.add("compute_s", w.compute_s).add("encode_s", w.encode_s);
    o.add("fp32_iter_s", r.fp32.total_s).add("terngrad_iter_s", r.terngrad.total_s);
    o.add("fp32_intra_s", r.fp32.intra_s).add("fp32_inter_s", r.fp32.inter_s);
    o.add("terngrad_intra_s", r.terngrad.intra_s).add("terngrad_inter_s", r.terngrad.inter_s);
    o.add("terngrad_up_bits", r.terngrad.up_bits).add("terngrad_down_bits", r.terngrad.down_bits);
    o.add("fp32_inter_bytes_per_node", r.fp32.inter_bytes)
        .add("terngrad_inter_bytes_per_node", r.terngrad.inter_bytes);
    if (paper) {
      o.add("paper_gpu", c.gpu);
      o.add("paper_fp32_images_per_sec", paper->fp32)
          .add("paper_terngrad_images_per_sec", paper->terngrad)
          .add("paper_speedup", paper->terngrad / paper->fp32);
    }
    std::printf("%s\n", o.str().c_str());
  }

  static void print_table_row(int n, const perf::Comparison& r,
                              const std::optional<perf::PaperReading>& paper) {
    char pb1[24] = "-", pb2[24] = "-", pb3[24] = "-";
    if (paper) {
      std::snprintf(pb1, sizeof(pb1), "%s", format_rate(paper->fp32).c_str());
      std::snprintf(pb2, sizeof(pb2), "%s", format_rate(paper->terngrad).c_str());
      std::snprintf(pb3, sizeof(pb3), "%.2fx", paper->terngrad / paper->fp32);
    }
    std::printf("  %5d %5d %12s %12s %7.2fx %7.2f | %12s %12s %8s\n", n, r.fp32.nodes,
                format_rate(r.fp32.images_per_sec).c_str(),
                format_rate(r.terngrad.images_per_sec).c_str(), r.speedup, r.terngrad.down_bits,
                pb1, pb2, pb3);
  }

  const PerfModelArgs& a_;
  perf::ModelOptions mo_;
  std::map<std::string, double> batch_over_, compute_over_, encode_over_;
  std::vector<std::string> networks_;
  std::vector<int> gpus_;
  std::map<std::string, std::vector<int64_t>> numel_;
  std::map<std::string, MeasuredStep> measured_;
};

}  // namespace

int run_perf_model(const PerfModelArgs& a) {
  TG_CHECK(!a.simulate || sim::simulator_available(), sim::simulator_missing());
  PerfModelRun run(a);
  for (const Cluster& c : run.clusters()) run.print(c);
  std::fflush(stdout);
  return 0;
}

}  // namespace tg::cli
