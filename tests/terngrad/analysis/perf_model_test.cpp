// The performance model (terngrad/analysis/perf_model.h) on hand-computed cases: the bits and bytes
// per element, every term of T_iter for ps and ring, full and half duplex, with latencies; then the
// paper's headlines (Figure 5) on the presets, with the parameter counts of our nets.
#include "terngrad/analysis/perf_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "nn/core/error.h"
#include "nn/nets/net.h"

namespace tg::perf {
namespace {

// Sums of a few doubles: only rounding separates the model from the hand-computed value.
constexpr double kRel = 1e-12;

// A small workload with round numbers: P = 1003 in two tensors (ceil matters for the 3), b = 10.
Workload small_workload() {
  Workload w;
  w.network = "toy";
  w.tensor_numel = {1000, 3};
  w.batch_per_gpu = 10;
  w.compute_s = 0.1;
  w.encode_s = 0.01;
  return w;
}

// 2 GPUs per node; intra 8 Gbit/s = 1e9 B/s, inter 0.008 Gbit/s = 1e6 B/s; no latency.
Cluster small_cluster() {
  Cluster c;
  c.name = "toy";
  c.gpus_per_node = 2;
  c.intra = {8.0, 0.0};
  c.inter = {0.008, 0.0};
  c.full_duplex = true;
  return c;
}

void expect_rel(double got, double want) {
  EXPECT_NEAR(got, want, kRel * std::abs(want));
}

TEST(PerfModel, SumFieldBitsIsCeilLog2Of2NPlus1) {
  EXPECT_EQ(sum_field_bits(1), 2);     // 3 levels
  EXPECT_EQ(sum_field_bits(2), 3);     // 5
  EXPECT_EQ(sum_field_bits(3), 3);     // 7
  EXPECT_EQ(sum_field_bits(4), 4);     // 9
  EXPECT_EQ(sum_field_bits(8), 5);     // 17
  EXPECT_EQ(sum_field_bits(16), 6);    // 33
  EXPECT_EQ(sum_field_bits(511), 10);  // 1023 <= 1024
  EXPECT_EQ(sum_field_bits(512), 11);  // 1025
  EXPECT_THROW(sum_field_bits(0), Error);
}

TEST(PerfModel, BitsPerElementEachDirection) {
  EXPECT_EQ(up_bits(Gradients::fp32), 32.0);
  EXPECT_EQ(up_bits(Gradients::terngrad), 2.0);
  EXPECT_EQ(down_bits(Gradients::fp32, 8, DownBits::ceil), 32.0);
  EXPECT_EQ(down_bits(Gradients::terngrad, 8, DownBits::ceil), 5.0);
  EXPECT_NEAR(down_bits(Gradients::terngrad, 8, DownBits::exact), 4.0875, 1e-4);     // derived
  EXPECT_NEAR(down_bits(Gradients::terngrad, 64, DownBits::exact), 7.0112, 1e-4);    // derived
  EXPECT_NEAR(down_bits(Gradients::terngrad, 512, DownBits::exact), 10.0014, 1e-4);  // derived
}

TEST(PerfModel, MessageBytesCeilPerTensorPlusScalers) {
  // 2 bits: ceil(10 / 8) + ceil(16 / 8) = 2 + 2, plus 2 scalers of 4 bytes.
  EXPECT_EQ(message_bytes({5, 8}, 2.0, true), 12.0);
  EXPECT_EQ(message_bytes({5, 8}, 32.0, false), 52.0);
  // Unrounded bits: no ceil.
  EXPECT_DOUBLE_EQ(message_bytes({5, 8}, 1.5, false), 13 * 1.5 / 8);
  // AlexNet's payload (derived): 244 MB fp32, 15.2 MB TernGrad (2-bit codes + scalers).
  EXPECT_NEAR(message_bytes({60969321}, 32.0, false) / 1e6, 243.9, 0.1);
  EXPECT_NEAR(message_bytes({60969321}, 2.0, true) / 1e6, 15.24, 0.01);
}

TEST(PerfModel, OneGpuIsComputePlusEncode) {
  const Comparison r = compare(small_workload(), small_cluster(), 1);
  EXPECT_EQ(r.fp32.total_s, 0.1);
  EXPECT_EQ(r.terngrad.total_s, 0.1 + 0.01);
  EXPECT_EQ(r.fp32.intra_s, 0.0);
  EXPECT_EQ(r.fp32.inter_s, 0.0);
  expect_rel(r.fp32.images_per_sec, 10 / 0.1);
  expect_rel(r.speedup, 0.1 / 0.11);
}

TEST(PerfModel, ParameterServerHandComputed) {
  // N = 4, G = 2: G' = 2, M = 2.
  const Workload w = small_workload();
  Cluster c = small_cluster();
  const Comparison r = compare(w, c, 4);
  EXPECT_EQ(r.fp32.nodes, 2);
  // fp32: B = 4 * 1003 = 4012 bytes each way.
  expect_rel(r.fp32.intra_s, 0.5 * 8024 / 1e9);
  expect_rel(r.fp32.inter_s, 0.5 * 4012 / 1e6);
  expect_rel(r.fp32.total_s, 0.1 + 0.5 * 8024 / 1e9 + 0.5 * 4012 / 1e6);
  expect_rel(r.fp32.images_per_sec, 40 / r.fp32.total_s);
  // TernGrad: up 2 bits: 250 + 1 + 8 = 259 bytes; down k(4) = 4 bits: 500 + 2 + 8 = 510 bytes.
  EXPECT_EQ(r.terngrad.down_bits, 4.0);
  expect_rel(r.terngrad.intra_s, 0.5 * (259 + 510) / 1e9);
  expect_rel(r.terngrad.inter_s, 0.5 * 510 / 1e6);  // full duplex: the larger direction
  expect_rel(r.terngrad.total_s, 0.1 + 0.01 + 0.5 * 769 / 1e9 + 0.5 * 510 / 1e6);
  expect_rel(r.speedup, r.fp32.total_s / r.terngrad.total_s);

  // Half duplex: both directions share the link.
  c.full_duplex = false;
  const Comparison h = compare(w, c, 4);
  expect_rel(h.terngrad.inter_s, 0.5 * (259 + 510) / 1e6);
  expect_rel(h.fp32.inter_s, 0.5 * 8024 / 1e6);

  // Latencies: 2 (G' - 1) a_intra inside the node, one push and one pull round across.
  c.full_duplex = true;
  c.intra.latency_s = 1e-6;
  c.inter.latency_s = 1e-3;
  const Comparison l = compare(w, c, 4);
  expect_rel(l.fp32.intra_s, 0.5 * 8024 / 1e9 + 2e-6);
  expect_rel(l.fp32.inter_s, 0.5 * 4012 / 1e6 + 2e-3);
}

TEST(PerfModel, RingHandComputed) {
  ModelOptions mo;
  mo.topology = Topology::ring;
  Cluster c = small_cluster();
  c.inter.latency_s = 1e-3;
  // N = 8, G = 2: M = 4 nodes; ring: 2 (M - 1) / M B each way, 2 (M - 1) latencies.
  const Comparison r = compare(small_workload(), c, 8, mo);
  EXPECT_EQ(r.fp32.nodes, 4);
  expect_rel(r.fp32.inter_s, 2 * 0.75 * 4012 / 1e6 + 6e-3);
  // TernGrad ring: k(8) = 5-bit sum fields: ceil(5000 / 8) + ceil(15 / 8) + 8 = 625 + 2 + 8.
  expect_rel(r.terngrad.inter_s, 2 * 0.75 * 635 / 1e6 + 6e-3);
  // The ps variant at the same N moves (M - 1) / M max(B_up, B_down) once.
  const Comparison p = compare(small_workload(), c, 8);
  expect_rel(p.fp32.inter_s, 0.75 * 4012 / 1e6 + 2e-3);
  EXPECT_LT(p.fp32.inter_s, r.fp32.inter_s);
}

TEST(PerfModel, NoInterNodeTrafficWithinOneNode) {
  const Cluster c = cluster_preset("ethernet");
  Workload w = small_workload();
  for (int n = 1; n <= c.gpus_per_node; ++n) {
    const Comparison r = compare(w, c, n);
    EXPECT_EQ(r.fp32.nodes, 1);
    EXPECT_EQ(r.fp32.inter_s, 0.0);
    EXPECT_EQ(r.terngrad.inter_s, 0.0);
  }
  EXPECT_GT(compare(w, c, c.gpus_per_node + 1).fp32.inter_s, 0.0);
}

TEST(PerfModel, ThrowsOnBadInput) {
  Workload w = small_workload();
  const Cluster c = small_cluster();
  EXPECT_THROW(estimate(w, c, 0, Gradients::fp32), Error);
  w.compute_s = 0;
  EXPECT_THROW(estimate(w, c, 1, Gradients::fp32), Error);
  w = small_workload();
  w.tensor_numel.clear();
  EXPECT_THROW(estimate(w, c, 1, Gradients::fp32), Error);
  Cluster bad = c;
  bad.inter.gbit_per_s = 0;
  try {
    estimate(small_workload(), bad, 1, Gradients::fp32);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inter.bandwidth_gbit"), std::string::npos) << e.what();
  }
  try {
    cluster_preset("myrinet");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ethernet, infiniband"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_topology("tree"), Error);
}

TEST(PerfModel, PaperReadingsAndComputeTimes) {
  const auto r = paper_reading("alexnet", "gtx1080", 8);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->fp32, 716);
  EXPECT_EQ(r->terngrad, 2193);
  EXPECT_FALSE(paper_reading("alexnet", "p100", 32).has_value());  // not read off Figure 5
  EXPECT_FALSE(paper_reading("lenet", "p100", 1).has_value());
  const auto t = paper_compute_times("alexnet", "gtx1080");
  ASSERT_TRUE(t.has_value());
  EXPECT_DOUBLE_EQ(t->compute_s, 128.0 / 386);
  EXPECT_DOUBLE_EQ(t->encode_s, 128.0 / 375 - 128.0 / 386);
  EXPECT_EQ(paper_compute_times("googlenet", "gtx1080")->encode_s, 0.0);  // equal readings
  EXPECT_EQ(figure5_gpus().front(), 1);
  EXPECT_EQ(figure5_gpus().back(), 512);
}

// ---- the paper's headlines, with the tensors of our own nets -------------------------------

// Per-tensor parameter counts of our net, built once per test program (VGG-A allocates 133 M).
const std::vector<int64_t>& tensor_numel(const std::string& net) {
  static std::map<std::string, std::vector<int64_t>> cache;
  auto& v = cache[net];
  if (v.empty()) {
    auto model = make_net(net, NetOptions{}, Device::cpu());
    for (const auto& e : model->arena().entries()) v.push_back(e.numel);
  }
  return v;
}

Workload paper_workload(const std::string& net, const Cluster& c) {
  Workload w;
  w.network = net;
  w.tensor_numel = tensor_numel(net);
  w.batch_per_gpu = *paper_batch(net);
  const auto t = paper_compute_times(net, c.gpu);
  w.compute_s = t->compute_s;
  w.encode_s = t->encode_s;
  return w;
}

// "AlexNet 3.04x on 8 GPUs over 1 Gbit/s Ethernet" (Figure 5). The reconstruction gives 2.69x with
// ceil(log2 17) = 5 down bits and 2.88x with log2 17 = 4.09; tolerance 15% of the paper's figure
// (the readings themselves are +-3% of full scale, and the model is a reconstruction).
constexpr double kHeadlineTol = 0.15;

TEST(PerfModelHeadlines, AlexNetAbout3xOn8GpusOverEthernet) {
  const Cluster c = cluster_preset("ethernet");
  const Workload w = paper_workload("alexnet", c);
  EXPECT_EQ(w.tensor_numel.size(), 26u);
  const Comparison r = compare(w, c, 8);
  EXPECT_NEAR(r.speedup, 3.04, kHeadlineTol * 3.04) << r.speedup;
  EXPECT_NEAR(r.speedup, 2.69, 0.01);  // regression: the value the page reports
  ModelOptions exact;
  exact.down_bits = DownBits::exact;
  EXPECT_NEAR(compare(w, c, 8, exact).speedup, 3.04, kHeadlineTol * 3.04);
  // fp32 collapses when the first inter-node link is crossed (Figure 5: 1506 -> 716 img/s).
  EXPECT_LT(r.fp32.images_per_sec, compare(w, c, 4).fp32.images_per_sec);
}

// "No gain within one node": N <= G GPUs share no network link; TernGrad's only saving is on the
// PCIe / NVLink hop, which the encode time offsets. Bound: within 6% of fp32 (the paper's own
// readings differ by up to 11% at 4 GPUs on the VGG-A column, i.e. within reading error).
constexpr double kOneNodeTol = 0.06;

TEST(PerfModelHeadlines, NoGainWithinOneNode) {
  for (const char* cluster : {"ethernet", "infiniband"}) {
    const Cluster c = cluster_preset(cluster);
    for (const auto& net : figure5_networks()) {
      const Workload w = paper_workload(net, c);
      for (int n = 1; n <= c.gpus_per_node; n *= 2) {
        const Comparison r = compare(w, c, n);
        EXPECT_LE(r.speedup, 1.0 + kOneNodeTol) << cluster << " " << net << " N=" << n;
      }
    }
  }
}

// "VGG-A about 2x on 512 GPUs over InfiniBand" (a secondary summary [S]; reading 44K / 20K = 2.2x)
// is NOT reproduced by the reconstruction with nominal 100 Gbit/s links: the fp32 exchange of 531
// MB takes 42 ms there against 330 ms of compute, and TernGrad's 1-GPU encode gap (60 ms, from the
// paper's own readings) outweighs it. This pins the value paper/figure5.md reports and checks the
// trend the paper states: the gain is largest on Ethernet and for the FC-heavy nets.
TEST(PerfModelHeadlines, InfiniBandGainsAreSmallInTheReconstruction) {
  const Cluster ib = cluster_preset("infiniband");
  const Workload vgg = paper_workload("vgg_a", ib);
  const Comparison r = compare(vgg, ib, 512);
  EXPECT_NEAR(r.speedup, 0.96, 0.01);
  const Cluster eth = cluster_preset("ethernet");
  const Workload vgg_eth = paper_workload("vgg_a", eth);
  const Workload goo_eth = paper_workload("googlenet", eth);
  EXPECT_GT(compare(vgg_eth, eth, 512).speedup, r.speedup);
  EXPECT_GT(compare(vgg_eth, eth, 16).speedup, compare(goo_eth, eth, 16).speedup);
}

}  // namespace
}  // namespace tg::perf
