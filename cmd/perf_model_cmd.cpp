// `terngrad perf-model` (see perf_model_cmd.h): inputs from our nets, the cluster presets or a
// TOML file, the paper's 1-GPU readings or --calibrate's measurements; the model itself is
// terngrad/perf_model.h.
#include "cmd/perf_model_cmd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <toml++/toml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "train/config.h"
#include "train/options.h"
#include "train/json.h"
#include "train/step.h"
#include "train/trainer.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "nn/nets/net.h"
#include "nn/optim/ema.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"

namespace tg::cli {

using namespace tg::train;

namespace {

using perf::Cluster;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

// ---- cluster files -------------------------------------------------------------------------

std::string where(const std::string& source, const toml::node& n) {
  const auto& r = n.source();
  if (r.begin.line == 0) return source;
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

double get_number(const toml::table& t, const std::string& key, const std::string& qualified,
                  const std::string& source, std::optional<double> fallback, const char* expect) {
  const toml::node* n = t.get(key);
  if (n == nullptr) {
    TG_CHECK(fallback.has_value(), source, ": key '", qualified, "' is missing (expected ", expect,
             ")");
    return *fallback;
  }
  std::optional<double> v;
  if (auto* f = n->as_floating_point()) v = f->get();
  if (auto* i = n->as_integer()) v = static_cast<double>(i->get());
  TG_CHECK(v.has_value(), where(source, *n), ": key '", qualified, "': expected ", expect);
  return *v;
}

void check_keys(const toml::table& t, const std::vector<std::string>& known,
                const std::string& prefix, const std::string& source) {
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const auto& n : known) list += (list.empty() ? "" : ", ") + prefix + n;
    TG_THROW(where(source, node), ": unknown key '", prefix, key, "'; known keys: ", list);
  }
}

perf::Link parse_link(const toml::table& root, const std::string& section,
                      const std::string& source) {
  const toml::node* n = root.get(section);
  TG_CHECK(n != nullptr, source, ": table [", section,
           "] is missing (expected bandwidth_gbit "
           "and latency_us)");
  const toml::table* t = n->as_table();
  TG_CHECK(t != nullptr, where(source, *n), ": key '", section, "': expected a table");
  check_keys(*t, {"bandwidth_gbit", "latency_us"}, section + ".", source);
  perf::Link l;
  l.gbit_per_s = get_number(*t, "bandwidth_gbit", section + ".bandwidth_gbit", source, std::nullopt,
                            "a number > 0, in Gbit/s");
  TG_CHECK(l.gbit_per_s > 0 && std::isfinite(l.gbit_per_s),
           where(source, *t->get("bandwidth_gbit")), ": key '", section, ".bandwidth_gbit' is ",
           l.gbit_per_s, "; expected a number > 0, in Gbit/s");
  const double us = get_number(*t, "latency_us", section + ".latency_us", source, 0.0,
                               "a number >= 0, in microseconds");
  TG_CHECK(us >= 0 && std::isfinite(us), source, ": key '", section, ".latency_us' is ", us,
           "; expected a number >= 0, in microseconds");
  l.latency_s = us * 1e-6;
  return l;
}

// ---- calibration ---------------------------------------------------------------------------

struct Measured {
  double compute_s = 0, encode_s = 0;
};

// One worker's real training step (TrainStep with the TernGrad compressor, as `terngrad train`
// runs it with compression.method=terngrad) on a synthetic batch: T_c = the step minus its
// compression phase, T_enc = the compression phase (statistics, scalers, encode, decode,
// finalize). Medians over `steps` timed steps after one warm-up.
Measured time_step(const std::string& network, int64_t batch, int steps) {
  const Device dev = Device::cpu();
  const Config cfg =
      default_config({"model.name=" + network, "train.batch_size=" + std::to_string(batch),
                      "workers.count=1", "compression.method=terngrad", "device=cpu"});
  auto net = make_net(cfg.model.name, net_options(cfg), dev);
  const NetInfo& info = net->info();
  auto opt = make_optimizer(optimizer_options(cfg));
  Ema ema(net->arena().params(), cfg.train.ema_decay);
  auto comp = tern::make_compressor(compression_options(cfg, std::max<int64_t>(batch, 1024)),
                                    grad_layout(*net));
  TrainStep step(*net, *opt, &ema, cfg.train.weight_decay, static_cast<uint64_t>(cfg.train.seed),
                 comp.get());
  HostBatch hb;
  hb.x = Tensor::empty({batch, info.in_channels, info.image_size, info.image_size});
  init::normal_(hb.x, 0.f, 1.f, 7, rng_stream(RngPurpose::data, 0));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>(i % info.num_classes);
  hb.y = Tensor::from_vector(labels, {batch});
  const std::vector<HostBatch> batches = {hb};
  Tensor loss_sum = Tensor::zeros({}, DType::f32, dev);

  step.run(batches, 0, 0.01, loss_sum);  // warm-up: allocator, BLAS buffers
  std::vector<double> compute, encode;
  for (int s = 0; s < steps; ++s) {
    StepTimes t;
    step.run(batches, s + 1, 0.01, loss_sum, &t);
    compute.push_back(t.total() - t.compress_s);
    encode.push_back(t.compress_s);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(compute), median(encode)};
}

// Loopback TCP: payload bandwidth (Gbit/s; best of 3 transfers of 256 MiB) and one-way latency
// (half the median round trip of 1-byte ping-pongs), between two threads of this process.
struct LinkMeasurement {
  double gbit_per_s = 0, latency_s = 0;
};

constexpr size_t kChunk = size_t{1} << 20;
constexpr size_t kTotal = size_t{256} << 20;
constexpr int kTransfers = 3, kPings = 200;

LinkMeasurement measure_loopback() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  TG_CHECK(listener >= 0, "perf-model --calibrate: cannot create a TCP socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listener);
    TG_THROW("perf-model --calibrate: cannot listen on 127.0.0.1 for the bandwidth test");
  }
  std::thread client([addr] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::vector<char> buf(kChunk, 1);
    for (int t = 0; t < kTransfers; ++t) {
      size_t sent = 0;
      while (sent < kTotal) {
        const ssize_t n = ::send(fd, buf.data(), std::min(kChunk, kTotal - sent), 0);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      char ack = 0;  // the receiver's end-of-transfer mark keeps the transfers apart
      if (::recv(fd, &ack, 1, MSG_WAITALL) != 1) break;
    }
    char b = 0;
    for (int p = 0; p < kPings; ++p) {
      if (::recv(fd, &b, 1, MSG_WAITALL) != 1 || ::send(fd, &b, 1, 0) != 1) break;
    }
    ::close(fd);
  });
  const int fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (fd < 0) {
    client.join();
    TG_THROW("perf-model --calibrate: the loopback bandwidth test could not connect");
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> buf(kChunk);
  LinkMeasurement m;
  bool ok = true;
  for (int t = 0; t < kTransfers && ok; ++t) {
    const double t0 = now_s();
    size_t got = 0;
    while (got < kTotal) {
      const ssize_t n = ::recv(fd, buf.data(), std::min(kChunk, kTotal - got), 0);
      if (n <= 0) {
        ok = false;
        break;
      }
      got += static_cast<size_t>(n);
    }
    const double dt = now_s() - t0;
    if (ok) m.gbit_per_s = std::max(m.gbit_per_s, 8.0 * static_cast<double>(kTotal) / dt / 1e9);
    const char ack = 1;
    if (::send(fd, &ack, 1, 0) != 1) ok = false;
  }
  std::vector<double> rtt;
  char b = 1;
  for (int p = 0; p < kPings && ok; ++p) {
    const double t0 = now_s();
    if (::send(fd, &b, 1, 0) != 1 || ::recv(fd, &b, 1, MSG_WAITALL) != 1) ok = false;
    rtt.push_back(now_s() - t0);
  }
  ::close(fd);
  client.join();
  TG_CHECK(ok && m.gbit_per_s > 0 && !rtt.empty(),
           "perf-model --calibrate: the loopback bandwidth test was cut short");
  std::sort(rtt.begin(), rtt.end());
  m.latency_s = rtt[rtt.size() / 2] / 2;
  return m;
}

// ---- output --------------------------------------------------------------------------------

struct NetworkInput {
  perf::Workload workload;
  bool paper_batch = false;  // the batch is the paper's (readings comparable)
};

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

perf::Cluster parse_cluster_toml(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& r = e.source();
    TG_THROW(source, ":", r.begin.line, ":", r.begin.column,
             ": TOML syntax error: ", e.description());
  }
  check_keys(root, {"name", "description", "gpus_per_node", "full_duplex", "gpu", "intra", "inter"},
             "", source);
  Cluster c;
  c.name = std::filesystem::path(source).stem().string();
  if (const toml::node* n = root.get("name")) {
    TG_CHECK(n->as_string() != nullptr && !n->as_string()->get().empty(), where(source, *n),
             ": key 'name': expected a non-empty string");
    c.name = n->as_string()->get();
  }
  c.description = "cluster file " + source;
  if (const toml::node* n = root.get("description")) {
    TG_CHECK(n->as_string() != nullptr, where(source, *n),
             ": key 'description': expected a string");
    c.description = n->as_string()->get();
  }
  const toml::node* g = root.get("gpus_per_node");
  TG_CHECK(g != nullptr, source, ": key 'gpus_per_node' is missing (expected an integer >= 1)");
  TG_CHECK(g->as_integer() != nullptr && g->as_integer()->get() >= 1 &&
               g->as_integer()->get() <= 1 << 20,
           where(source, *g), ": key 'gpus_per_node': expected an integer >= 1");
  c.gpus_per_node = static_cast<int>(g->as_integer()->get());
  if (const toml::node* n = root.get("full_duplex")) {
    TG_CHECK(n->as_boolean() != nullptr, where(source, *n),
             ": key 'full_duplex': expected true or false");
    c.full_duplex = n->as_boolean()->get();
  }
  if (const toml::node* n = root.get("gpu")) {
    const auto* s = n->as_string();
    TG_CHECK(s != nullptr && (s->get() == "gtx1080" || s->get() == "p100" || s->get().empty()),
             where(source, *n),
             ": key 'gpu': expected \"gtx1080\" or \"p100\" (whose 1-GPU readings of the paper "
             "give the default compute times) or \"\"");
    c.gpu = s->get();
  }
  c.intra = parse_link(root, "intra", source);
  c.inter = parse_link(root, "inter", source);
  perf::validate(c);
  return c;
}

perf::Cluster resolve_cluster(const std::string& name) {
  const auto presets = perf::cluster_preset_names();
  if (std::find(presets.begin(), presets.end(), name) != presets.end())
    return perf::cluster_preset(name);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name, ec)) {
    std::string known;
    for (const auto& p : presets) known += (known.empty() ? "" : ", ") + p;
    TG_THROW("unknown cluster '", name, "': not a preset (", known, ") and not a readable file");
  }
  std::ifstream in(name, std::ios::binary);
  TG_CHECK(in.good(), "cannot read cluster file '", name, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_cluster_toml(ss.str(), name);
}

std::vector<int64_t> net_tensor_numel(const std::string& network) {
  auto net = make_net(network, NetOptions{}, Device::cpu());
  std::vector<int64_t> numel;
  for (const auto& e : net->arena().entries()) numel.push_back(e.numel);
  return numel;
}

CLI::App* add_perf_model_command(CLI::App& app, PerfModelArgs& a) {
  auto* cmd = app.add_subcommand(
      "perf-model",
      "The paper's performance model (Figure 5): images/s of fp32 and TernGrad training on 1-512 "
      "GPUs, from our nets' parameter counts, beside the paper's readings");
  cmd->add_option("--cluster", a.clusters,
                  "ethernet | infiniband | a TOML cluster file (repeatable; default both "
                  "presets)")
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
                "training step, loopback TCP bandwidth (or --link-gbit), and model one process "
                "per node");
  cmd->add_option("--link-gbit", a.link_gbit,
                  "--calibrate: model this link (Gbit/s, e.g. 0.957 for the emulated 1 Gbit/s "
                  "netns link) instead of measuring loopback TCP")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--calibrate-steps", a.calibrate_steps,
                  "--calibrate: timed training steps per net, after one warm-up (default 2)")
      ->check(CLI::Range(1, 1000));
  return cmd;
}

int run_perf_model(const PerfModelArgs& a) {
  perf::ModelOptions mo;
  mo.topology = perf::parse_topology(a.topology);
  TG_CHECK(a.down_bits == "ceil" || a.down_bits == "exact", "--down-bits '", a.down_bits,
           "': expected ceil or exact");
  mo.down_bits = a.down_bits == "ceil" ? perf::DownBits::ceil : perf::DownBits::exact;

  const auto batch_over = parse_overrides(a.batch, "--batch", true);
  const auto compute_over = parse_overrides(a.compute_time, "--compute-time", false);
  const auto encode_over = parse_overrides(a.encode_time, "--encode-time", false);
  for (const auto& [k, v] : batch_over) TG_CHECK(v >= 1, "--batch: ", v, "; expected >= 1");
  for (const auto& [k, v] : compute_over)
    TG_CHECK(v > 0, "--compute-time: ", v, " s; expected > 0");

  const std::vector<std::string> networks =
      a.networks.empty() ? perf::figure5_networks() : a.networks;
  std::vector<int> gpus = a.gpus;
  if (gpus.empty()) gpus = a.calibrate ? std::vector<int>{1, 2, 4, 8} : perf::figure5_gpus();

  std::vector<Cluster> clusters;
  if (a.calibrate) {
    TG_CHECK(a.clusters.empty(),
             "--calibrate models this machine; it cannot be combined with --cluster");
    Cluster c;
    c.name = "this-machine";
    c.gpus_per_node = 1;  // one process per "node", as `terngrad train --nproc` runs
    c.full_duplex = true;
    if (a.link_gbit > 0) {
      c.inter = {a.link_gbit, 0.0};
      char buf[120];
      std::snprintf(buf, sizeof(buf),
                    "this machine's compute, one process per node, a given %g Gbit/s link",
                    a.link_gbit);
      c.description = buf;
    } else {
      std::fprintf(stderr, "perf-model: measuring loopback TCP ...\n");
      const LinkMeasurement m = measure_loopback();
      c.inter = {m.gbit_per_s, m.latency_s};
      char buf[160];
      std::snprintf(buf, sizeof(buf),
                    "this machine's compute, one process per node, loopback TCP (measured %.2f "
                    "Gbit/s, %.1f us)",
                    m.gbit_per_s, m.latency_s * 1e6);
      c.description = buf;
    }
    c.intra = c.inter;  // unused with one GPU per node
    clusters.push_back(c);
  } else {
    const std::vector<std::string> names =
        a.clusters.empty() ? perf::cluster_preset_names() : a.clusters;
    for (const auto& n : names) clusters.push_back(resolve_cluster(n));
  }

  // Parameter counts come from our own nets, built once per network.
  std::map<std::string, std::vector<int64_t>> numel;
  for (const auto& n : networks)
    if (!numel.count(n)) numel[n] = net_tensor_numel(n);

  const char* down = mo.down_bits == perf::DownBits::ceil ? "ceil(log2(2N+1))" : "log2(2N+1)";
  std::map<std::string, Measured> measured;
  for (const Cluster& c : clusters) {
    if (!a.json) print_cluster_header(c, mo, down);
    for (const auto& net : networks) {
      perf::Workload w;
      w.network = net;
      w.tensor_numel = numel[net];
      const auto pb = perf::paper_batch(net);
      const auto bo = lookup(batch_over, net);
      if (bo) {
        w.batch_per_gpu = static_cast<int64_t>(*bo);
      } else if (pb) {
        w.batch_per_gpu = *pb;
      } else if (a.calibrate) {
        w.batch_per_gpu = default_config({"model.name=" + net}).train.batch_size;
      } else {
        TG_THROW("net '", net, "' is not in the paper's Figure 5 (no paper batch): pass --batch ",
                 net, "=B");
      }
      const bool paper_inputs = !bo || (pb && *pb == w.batch_per_gpu);
      const auto paper_t = perf::paper_compute_times(net, c.gpu);
      const auto co = lookup(compute_over, net);
      const auto eo = lookup(encode_over, net);
      if (a.calibrate && !co) {
        const std::string key = net + "/" + std::to_string(w.batch_per_gpu);
        if (!measured.count(key)) {
          std::fprintf(stderr, "perf-model: timing %s, batch %lld: 1 warm-up + %d steps ...\n",
                       net.c_str(), static_cast<long long>(w.batch_per_gpu), a.calibrate_steps);
          measured[key] = time_step(net, w.batch_per_gpu, a.calibrate_steps);
          std::fprintf(stderr, "perf-model: %s: compute %.4f s, encode %.4f s per batch\n",
                       net.c_str(), measured[key].compute_s, measured[key].encode_s);
        }
        w.compute_s = measured[key].compute_s;
        w.encode_s = eo ? *eo : measured[key].encode_s;
      } else {
        TG_CHECK(co || (paper_t && paper_inputs), "no compute time for net '", net,
                 "' on cluster '", c.name, "' (the paper has no 1-GPU reading for it",
                 c.gpu.empty() ? " and the cluster names no gpu" : " at this batch",
                 "): pass --compute-time ", net, "=SECONDS or --calibrate");
        w.compute_s = co ? *co : paper_t->compute_s;
        w.encode_s = eo ? *eo : (paper_t && paper_inputs ? paper_t->encode_s : 0.0);
      }
      const int64_t params = total_numel(w);
      if (!a.json) {
        std::printf(
            "\n%s: %s parameters in %zu tensors; batch %lld per GPU; T_c %.4f s, T_enc "
            "%.4f s\n",
            net.c_str(), with_commas(params).c_str(), w.tensor_numel.size(),
            static_cast<long long>(w.batch_per_gpu), w.compute_s, w.encode_s);
        std::printf("  %5s %5s %12s %12s %8s %7s | %12s %12s %8s\n", "GPUs", "nodes", "fp32 img/s",
                    "Tern img/s", "speedup", "down b", "paper fp32", "paper Tern", "speedup");
      }
      for (const int n : gpus) {
        const perf::Comparison r = perf::compare(w, c, n, mo);
        std::optional<perf::PaperReading> paper;
        if (paper_inputs && !co) paper = perf::paper_reading(net, c.gpu, n);
        if (a.json) {
          json::Object o;
          o.add("network", net).add("cluster", c.name).add("gpus", n);
          o.add("fp32_images_per_sec", r.fp32.images_per_sec)
              .add("terngrad_images_per_sec", r.terngrad.images_per_sec)
              .add("speedup", r.speedup);
          o.add("topology", perf::name(mo.topology)).add("down_bits_mode", a.down_bits);
          o.add("nodes", r.fp32.nodes).add("gpus_per_node", c.gpus_per_node);
          o.add("batch_per_gpu", w.batch_per_gpu).add("params", params);
          o.add("tensors", static_cast<int64_t>(w.tensor_numel.size()));
          o.add("compute_s", w.compute_s).add("encode_s", w.encode_s);
          o.add("fp32_iter_s", r.fp32.total_s).add("terngrad_iter_s", r.terngrad.total_s);
          o.add("fp32_intra_s", r.fp32.intra_s).add("fp32_inter_s", r.fp32.inter_s);
          o.add("terngrad_intra_s", r.terngrad.intra_s).add("terngrad_inter_s", r.terngrad.inter_s);
          o.add("terngrad_up_bits", r.terngrad.up_bits)
              .add("terngrad_down_bits", r.terngrad.down_bits);
          o.add("fp32_inter_bytes_per_node", r.fp32.inter_bytes)
              .add("terngrad_inter_bytes_per_node", r.terngrad.inter_bytes);
          if (paper) {
            o.add("paper_gpu", c.gpu);
            o.add("paper_fp32_images_per_sec", paper->fp32)
                .add("paper_terngrad_images_per_sec", paper->terngrad)
                .add("paper_speedup", paper->terngrad / paper->fp32);
          }
          std::printf("%s\n", o.str().c_str());
        } else {
          char pb1[24] = "-", pb2[24] = "-", pb3[24] = "-";
          if (paper) {
            std::snprintf(pb1, sizeof(pb1), "%s", format_rate(paper->fp32).c_str());
            std::snprintf(pb2, sizeof(pb2), "%s", format_rate(paper->terngrad).c_str());
            std::snprintf(pb3, sizeof(pb3), "%.2fx", paper->terngrad / paper->fp32);
          }
          std::printf("  %5d %5d %12s %12s %7.2fx %7.2f | %12s %12s %8s\n", n, r.fp32.nodes,
                      format_rate(r.fp32.images_per_sec).c_str(),
                      format_rate(r.terngrad.images_per_sec).c_str(), r.speedup,
                      r.terngrad.down_bits, pb1, pb2, pb3);
        }
      }
    }
    if (!a.json) std::printf("\n");
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace tg::cli
