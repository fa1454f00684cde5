#include "cmd/perf_inputs.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "comm/communicator.h"
#include "comm/store.h"
#include "config/config.h"
#include "config/toml_read.h"
#include "nn/core/clock.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/core/percentile.h"
#include "nn/core/philox.h"
#include "nn/init/init.h"
#include "nn/nets/net.h"
#include "train/options.h"
#include "train/step.h"

namespace tg::cli {

using namespace tg::train;
using config::Config;

namespace {

using perf::Cluster;

// ---- cluster files -------------------------------------------------------------------------

std::string where(const std::string& source, const toml::node& n) {
  return config::toml_where(source, n.source());
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

// --calibrate's link test: the best of kTransfers transfers of kTotal bytes, each sent as
// kTotal / kPiece messages (a piece's header round trip is ~1e-3 of it), and kPings round trips
// of 1-byte messages.
constexpr size_t kTotal = size_t{256} << 20, kPiece = size_t{16} << 20;
constexpr int kTransfers = 3, kPings = 200;

}  // namespace

perf::Cluster parse_cluster_toml(const std::string& text, const std::string& source) {
  const toml::table root = config::parse_toml(text, source);
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

MeasuredStep measure_step(const std::string& network, int64_t batch, int steps) {
  const Device dev = Device::cpu();
  const Config cfg =
      config::default_config({"model.name=" + network, "train.batch_size=" + std::to_string(batch),
                              "workers.count=1", "compression.method=terngrad", "device=cpu"});
  RunParts run = build_run(cfg, dev, std::max<int64_t>(batch, 1024));
  const NetInfo& info = run.net->info();
  TrainStep step(*run.net, *run.optimizer, run.ema ? &*run.ema : nullptr, cfg.train.weight_decay,
                 static_cast<uint64_t>(cfg.train.seed), run.compressor.get());
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
  return {median(compute), median(encode)};
}

LinkMeasurement measure_loopback() {
  // Two ranks of the Gloo transport the runs use (comm/), as threads of this process over
  // 127.0.0.1, meeting through a file store in a fresh directory.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tg-calibrate-XXXXXX";
  TG_CHECK(::mkdtemp(dir.data()) != nullptr,
           "perf-model --calibrate: cannot create a rendezvous directory ", dir, ": ",
           std::strerror(errno));
  LinkMeasurement m;
  std::vector<double> rtt;
  std::string errors[2];
  auto rank_main = [&](int rank) {
    try {
      auto store = comm::open_store("file://" + dir, std::chrono::seconds(30));
      comm::CommOptions o;
      o.backend = comm::Backend::gloo;
      o.rank = rank;
      o.size = 2;
      o.hostname = "127.0.0.1";
      o.timeout = std::chrono::seconds(30);
      auto c = comm::make_communicator(o, *store, "tg/calibrate");
      std::vector<char> buf(kPiece, 1);
      // Bandwidth: rank 0 sends kTotal bytes to rank 1, timed on the receiver from the barrier
      // that starts each transfer (its skew is a latency, 1e-4 of a transfer).
      for (int t = 0; t < kTransfers; ++t) {
        c->barrier();
        const auto t0 = Clock::now();
        for (size_t sent = 0; sent < kTotal; sent += kPiece) {
          const comm::SendSpec send{1, buf.data(), kPiece};
          const comm::RecvSpec recv{0, buf.data(), kPiece};
          if (rank == 0)
            c->exchange({&send, 1}, {});
          else
            c->exchange({}, {&recv, 1});
        }
        if (rank == 1)
          m.gbit_per_s = std::max(m.gbit_per_s, 8.0 * kTotal / seconds_since(t0) / 1e9);
      }
      // Latency: 1-byte messages there and back, timed on rank 0.
      char b = 1;
      const comm::SendSpec to_peer{1 - rank, &b, 1};
      const comm::RecvSpec from_peer{1 - rank, &b, 1};
      for (int p = 0; p < kPings; ++p) {
        const auto t0 = Clock::now();
        c->exchange(rank == 0 ? std::span(&to_peer, 1) : std::span<const comm::SendSpec>(),
                    rank == 1 ? std::span(&from_peer, 1) : std::span<const comm::RecvSpec>());
        c->exchange(rank == 1 ? std::span(&to_peer, 1) : std::span<const comm::SendSpec>(),
                    rank == 0 ? std::span(&from_peer, 1) : std::span<const comm::RecvSpec>());
        if (rank == 0) rtt.push_back(seconds_since(t0));
      }
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread peer(rank_main, 1);
  rank_main(0);
  peer.join();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  for (const std::string& e : errors)
    TG_CHECK(e.empty(), "perf-model --calibrate: the loopback link test failed: ", e);
  TG_CHECK(m.gbit_per_s > 0 && !rtt.empty(),
           "perf-model --calibrate: the loopback link test was cut short");
  std::sort(rtt.begin(), rtt.end());
  m.latency_s = rtt[rtt.size() / 2] / 2;
  return m;
}

}  // namespace tg::cli
