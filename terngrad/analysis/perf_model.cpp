// The performance model of perf_model.h: the equations of its header comment, term by term.
#include "terngrad/analysis/perf_model.h"

#include <algorithm>
#include <cmath>

#include "nn/core/error.h"

namespace tg::perf {

namespace {

constexpr double kBitsPerByte = 8.0;
constexpr double kScalerBytes = 4.0;  // one f32 scaler per tensor and direction
constexpr double kGbit = 1e9;

struct PresetRow {
  const char* name;
  Cluster cluster;
};

const std::vector<PresetRow>& presets() {
  static const std::vector<PresetRow> rows = {
      {"ethernet",
       {"ethernet", "1 Gbit/s Ethernet between nodes; 4 GTX 1080 per node behind a PCIe switch", 4,
        Link{96.0, 10e-6}, Link{1.0, 50e-6}, true, "gtx1080"}},
      {"infiniband",
       {"infiniband", "100 Gbit/s InfiniBand between nodes; 4 Tesla P100 per node on NVLink", 4,
        Link{320.0, 5e-6}, Link{100.0, 2e-6}, true, "p100"}},
      {"ethernet10g",
       {"ethernet10g",
        "10 Gbit/s Ethernet between nodes; 4 GTX 1080 per node behind a PCIe switch (not in the "
        "paper)",
        4, Link{96.0, 10e-6}, Link{10.0, 50e-6}, true, "gtx1080", false}},
  };
  return rows;
}

// Figure 5 read by eye, images/s: {GPUs, Alex fp32, Alex tern, GoogLe fp32, GoogLe tern, VGG fp32,
// VGG tern}. Values printed as "≈1.5K" in the readings are entered as 1500.
struct ReadingRow {
  int gpus;
  double v[6];
};

const std::vector<ReadingRow>& readings_gtx1080() {
  static const std::vector<ReadingRow> rows = {
      {1, {386, 375, 170, 170, 91, 74}},
      {2, {756, 767, 341, 341, 165, 170}},
      {4, {1506, 1534, 693, 693, 312, 347}},
      {8, {716, 2193, 852, 1233, 45, 318}},
      {16, {830, 3466, 1284, 2330, 51, 415}},
      {32, {1500, 7000, 2600, 4500, 100, 800}},
      {64, {3200, 13500, 5000, 8800, 200, 1600}},
      {128, {6400, 27000, 9800, 16800, 300, 3200}},
      {256, {13000, 53000, 18500, 35000, 700, 6500}},
      {512, {25500, 99500, 37000, 64000, 1500, 12500}},
  };
  return rows;
}

const std::vector<ReadingRow>& readings_p100() {
  static const std::vector<ReadingRow> rows = {
      {1, {424, 416, 178, 178, 97, 82}},
      {2, {855, 840, 379, 379, 193, 178}},
      {4, {1725, 1703, 766, 758, 401, 379}},
      {8, {2773, 3331, 1487, 1532, 394, 714}},
      {16, {5286, 6000, 2959, 3063, 714, 1390}},
      {512, {161000, 210000, 94000, 98000, 20000, 44000}},
  };
  return rows;
}

int network_column(std::string_view network) {
  if (network == "alexnet") return 0;
  if (network == "googlenet") return 1;
  if (network == "vgg_a") return 2;
  return -1;
}

void validate(const Workload& w) {
  TG_CHECK(!w.tensor_numel.empty(), "perf model: network '", w.network,
           "' has no parameter tensors; expected at least one");
  for (size_t t = 0; t < w.tensor_numel.size(); ++t)
    TG_CHECK(w.tensor_numel[t] >= 1, "perf model: network '", w.network, "' tensor ", t, " has ",
             w.tensor_numel[t], " elements; expected >= 1");
  TG_CHECK(w.batch_per_gpu >= 1, "perf model: network '", w.network, "' batch per GPU is ",
           w.batch_per_gpu, "; expected >= 1");
  TG_CHECK(std::isfinite(w.compute_s) && w.compute_s > 0, "perf model: network '", w.network,
           "' compute time per batch is ", w.compute_s, " s; expected > 0");
  TG_CHECK(std::isfinite(w.encode_s) && w.encode_s >= 0, "perf model: network '", w.network,
           "' encode time is ", w.encode_s, " s; expected >= 0");
}

double bytes_per_s(const Link& l) {
  return l.gbit_per_s * kGbit / kBitsPerByte;
}

}  // namespace

const char* name(Gradients g) {
  return g == Gradients::fp32 ? "fp32" : "terngrad";
}
const char* name(Topology t) {
  return t == Topology::ps ? "ps" : "ring";
}

Topology parse_topology(std::string_view s) {
  if (s == "ps") return Topology::ps;
  if (s == "ring") return Topology::ring;
  TG_THROW("unknown topology '", s, "'; known topologies: ps, ring");
}

void validate(const Cluster& c) {
  TG_CHECK(c.gpus_per_node >= 1, "cluster '", c.name, "': gpus_per_node is ", c.gpus_per_node,
           "; expected >= 1");
  TG_CHECK(std::isfinite(c.intra.gbit_per_s) && c.intra.gbit_per_s > 0, "cluster '", c.name,
           "': intra.bandwidth_gbit is ", c.intra.gbit_per_s, "; expected > 0");
  TG_CHECK(std::isfinite(c.inter.gbit_per_s) && c.inter.gbit_per_s > 0, "cluster '", c.name,
           "': inter.bandwidth_gbit is ", c.inter.gbit_per_s, "; expected > 0");
  TG_CHECK(std::isfinite(c.intra.latency_s) && c.intra.latency_s >= 0, "cluster '", c.name,
           "': intra latency is ", c.intra.latency_s, " s; expected >= 0");
  TG_CHECK(std::isfinite(c.inter.latency_s) && c.inter.latency_s >= 0, "cluster '", c.name,
           "': inter latency is ", c.inter.latency_s, " s; expected >= 0");
}

Cluster cluster_preset(std::string_view name) {
  for (const auto& p : presets())
    if (name == p.name) return p.cluster;
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + std::string(p.name);
  TG_THROW("unknown cluster '", name, "'; known clusters: ", known,
           " (or the path of a TOML cluster file)");
}

std::vector<std::string> paper_cluster_names() {
  return {"ethernet", "infiniband"};
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

int sum_field_bits(int64_t workers) {
  TG_CHECK(workers >= 1, "perf model: ", workers, " workers; expected >= 1");
  // Smallest k with 2^k >= 2N + 1 levels.
  const uint64_t levels = 2 * static_cast<uint64_t>(workers) + 1;
  int k = 0;
  while ((uint64_t{1} << k) < levels) ++k;
  return k;
}

double up_bits(Gradients g) {
  return g == Gradients::fp32 ? 32.0 : 2.0;
}

double down_bits(Gradients g, int64_t workers, DownBits mode) {
  TG_CHECK(workers >= 1, "perf model: ", workers, " workers; expected >= 1");
  if (g == Gradients::fp32) return 32.0;
  if (mode == DownBits::ceil) return sum_field_bits(workers);
  return std::log2(2.0 * static_cast<double>(workers) + 1.0);
}

double message_bytes(const std::vector<int64_t>& tensor_numel, double bits_per_element,
                     bool scalers) {
  const bool whole_bits = bits_per_element == std::floor(bits_per_element);
  double bytes = 0;
  for (const int64_t n : tensor_numel) {
    const double bits = static_cast<double>(n) * bits_per_element;
    bytes += whole_bits ? std::ceil(bits / kBitsPerByte) : bits / kBitsPerByte;
  }
  if (scalers) bytes += kScalerBytes * static_cast<double>(tensor_numel.size());
  return bytes;
}

Estimate estimate(const Workload& w, const Cluster& c, int gpus, Gradients g,
                  const ModelOptions& options) {
  validate(w);
  validate(c);
  TG_CHECK(gpus >= 1, "perf model: ", gpus, " GPUs; expected >= 1");
  const bool tern = g == Gradients::terngrad;
  const int g_node = std::min(gpus, c.gpus_per_node);            // G'
  const int m = (gpus + c.gpus_per_node - 1) / c.gpus_per_node;  // M
  Estimate e;
  e.nodes = m;
  e.up_bits = up_bits(g);
  e.down_bits = down_bits(g, gpus, options.down_bits);
  e.compute_s = w.compute_s;
  e.encode_s = tern ? w.encode_s : 0.0;

  const double b_up = message_bytes(w.tensor_numel, e.up_bits, tern);
  const double b_down = message_bytes(w.tensor_numel, e.down_bits, tern);

  if (g_node > 1) {
    const double frac = static_cast<double>(g_node - 1) / g_node;
    e.intra_s =
        frac * (b_up + b_down) / bytes_per_s(c.intra) + 2.0 * (g_node - 1) * c.intra.latency_s;
  }
  if (m > 1) {
    const double frac = static_cast<double>(m - 1) / m;
    if (options.topology == Topology::ps) {
      const double out = frac * b_up, in = frac * b_down;
      const double wire = c.full_duplex ? std::max(out, in) : out + in;
      e.inter_s = wire / bytes_per_s(c.inter) + 2.0 * c.inter.latency_s;
      e.inter_bytes = out;
    } else {
      const double beta = tern ? static_cast<double>(e.down_bits) : 32.0;
      const double per_direction = 2.0 * frac * message_bytes(w.tensor_numel, beta, tern);
      const double wire = c.full_duplex ? per_direction : 2.0 * per_direction;
      e.inter_s = wire / bytes_per_s(c.inter) + 2.0 * (m - 1) * c.inter.latency_s;
      e.inter_bytes = per_direction;
    }
  }
  e.total_s = e.compute_s + e.encode_s + e.intra_s + e.inter_s;
  e.images_per_sec = static_cast<double>(gpus) * static_cast<double>(w.batch_per_gpu) / e.total_s;
  return e;
}

Comparison compare(const Workload& w, const Cluster& c, int gpus, const ModelOptions& options) {
  Comparison r;
  r.gpus = gpus;
  r.fp32 = estimate(w, c, gpus, Gradients::fp32, options);
  r.terngrad = estimate(w, c, gpus, Gradients::terngrad, options);
  r.speedup = r.terngrad.images_per_sec / r.fp32.images_per_sec;
  return r;
}

std::vector<std::string> figure5_networks() {
  return {"alexnet", "googlenet", "vgg_a"};
}

std::vector<int> figure5_gpus() {
  std::vector<int> n;
  for (int g = 1; g <= 512; g *= 2) n.push_back(g);
  return n;
}

std::optional<int64_t> paper_batch(std::string_view network) {
  switch (network_column(network)) {
    case 0:
      return 128;
    case 1:
      return 64;
    case 2:
      return 32;
    default:
      return std::nullopt;
  }
}

std::optional<PaperReading> paper_reading(std::string_view network, std::string_view gpu,
                                          int gpus) {
  const int col = network_column(network);
  if (col < 0) return std::nullopt;
  const std::vector<ReadingRow>* rows = nullptr;
  if (gpu == "gtx1080") rows = &readings_gtx1080();
  if (gpu == "p100") rows = &readings_p100();
  if (rows == nullptr) return std::nullopt;
  for (const auto& r : *rows)
    if (r.gpus == gpus) return PaperReading{r.v[2 * col], r.v[2 * col + 1]};
  return std::nullopt;
}

std::optional<ComputeTimes> paper_compute_times(std::string_view network, std::string_view gpu) {
  const auto r1 = paper_reading(network, gpu, 1);
  const auto b = paper_batch(network);
  if (!r1 || !b) return std::nullopt;
  const double batch = static_cast<double>(*b);
  ComputeTimes t;
  t.compute_s = batch / r1->fp32;
  t.encode_s = std::max(0.0, batch / r1->terngrad - batch / r1->fp32);
  return t;
}

}  // namespace tg::perf
