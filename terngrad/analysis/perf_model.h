// The paper's performance model (Figure 5): training throughput (images/s) of synchronous
// data-parallel SGD on N GPUs, with fp32 or TernGrad gradients, from a handful of inputs: the
// model's per-tensor parameter counts, the per-GPU mini-batch, one GPU's compute time per batch,
// the encode time, and a cluster (GPUs per node, intra-node and inter-node links). Pure
// arithmetic: no network, no device; the CLI (`terngrad perf-model`) feeds it with the parameter
// counts of our own nets and prints Figure 5 of the paper.
//
// Certainty ([P] the paper, [D] derived, [R] reconstructed, not from the paper): the inputs, the
// clusters and the figure are [P]; the per-element bits are [P][D]; the equations are a
// reconstruction [R] (the paper's appendix equations were not available), extended here by the ring
// variant and by exact per-tensor byte counts [R]. Every equation below is the one the code runs.
//
// Symbols:
//   N        GPUs (= workers), 1 ... 512                                        [P]
//   G        GPUs per node (4 in both of the paper's clusters)                  [P]
//   G' = min(N, G)      GPUs in a node that take part;  M = ceil(N / G) nodes   [R]
//   b        per-GPU mini-batch (AlexNet 128, GoogLeNet 64, VGG-A 32)           [P]
//   n_t      elements of parameter tensor t (t = 1 .. T);  P = sum_t n_t        [D] (our nets)
//   T_c      forward + backward of one GPU on b images (default b / R1, R1 the paper's 1-GPU
//            fp32 reading, Fig. 5)                                              [R]
//   T_enc    TernGrad's ternarize + encode + decode per iteration (default the paper's 1-GPU gap
//            b / R1_tern - b / R1_fp32, clamped at 0)                           [R]
//   BW_intra, a_intra   GPU <-> GPU bandwidth and latency inside a node          [P] kind, [R]
//   value BW_net,   a_net     each node's network bandwidth and latency                [P] kind,
//   [R] value
//
// Bits per gradient element [P][D]:
//   fp32       up 32, down 32, no scalers.
//   TernGrad   up 2 (the 2-bit packing of terngrad/ternary_kernels.h; 1.585 = log2 3 is the
//              entropy bound), down k(N) = ceil(log2(2N + 1)) (the N-worker sum of ternary codes
//              has 2N + 1 levels: whole-bit fields), or log2(2N + 1) unrounded with
//              DownBits::exact (our base-(2N + 1) words, terngrad/sum_radix.h, come within one
//              digit per 64 bits of it); plus one f32 scaler per tensor in each direction.
//   Bytes of one message with beta bits per element: B(beta) = sum_t ceil(n_t beta / 8) + 4 T_s
//   (T_s = T scalers for TernGrad, 0 for fp32; no ceil with unrounded beta).
//
// Iteration time and throughput [R]:
//   T_iter(N)  = T_c + [TernGrad] T_enc + T_intra + T_inter
//   T_intra    = (G' - 1) / G' (B_up + B_down) / BW_intra + 2 (G' - 1) a_intra
//                (reduce, then broadcast, over the node's switch / NVLink; 0 when G' = 1)
//   ps (default; parameter server sharded over the M nodes, gradients aggregated per node first):
//     out = in = (M - 1) / M B_up,node  and  (M - 1) / M B_down  per node and direction
//     T_inter    = (M - 1) / M max(B_up,node, B_down) / BW_net + 2 a_net    full duplex (default)
//                = (M - 1) / M (B_up,node + B_down) / BW_net + 2 a_net      half duplex
//     B_up,node  = B(beta_up): the reconstruction counts the node's upload at the per-GPU
//                  beta_up (2 bits for TernGrad; a node sum of G' GPUs' codes strictly needs
//                  ceil(log2(2G' + 1)) bits, a choice left to the reconstruction's form).
//   ring (hierarchical: intra-node as above, ring allreduce of the node sums across nodes; for
//         TernGrad k(N)-bit sums, as a packed allreduce of whole-bit fields would move):
//     T_inter    = 2 (M - 1) / M B(beta_ring) / BW_net + 2 (M - 1) a_net    full duplex
//                  (x 2 for half duplex);  beta_ring = 32 (fp32) or k(N) (TernGrad)
//   T_inter = 0 when M = 1.
//   Throughput = N b / T_iter(N)        Speedup = Throughput_TernGrad / Throughput_fp32
//
// Headlines the model is checked against (tests/terngrad/analysis/perf_model_test.cpp; Figure 5):
// AlexNet ~3x on 8 GPUs over 1 Gbit/s Ethernet [S][P]; VGG-A ~2x on 512 GPUs over InfiniBand [S]
// (the reconstruction does not reach it with nominal 100 Gbit/s links: see paper/figure5.md);
// no gain within one node [P].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tg::perf {

enum class Gradients : uint8_t { fp32, terngrad };
enum class Topology : uint8_t { ps, ring };
enum class DownBits : uint8_t { ceil, exact };

const char* name(Gradients g);  // "fp32", "terngrad"
const char* name(Topology t);   // "ps", "ring"
// "ps" / "ring"; throws listing the known names.
Topology parse_topology(std::string_view s);

struct Link {
  double gbit_per_s = 0;  // payload bandwidth, 1e9 bit/s; > 0
  double latency_s = 0;   // per message; >= 0
};

struct Cluster {
  std::string name;         // "ethernet", "infiniband", or the file's name key
  std::string description;  // one line for tables
  int gpus_per_node = 4;    // G >= 1
  Link intra, inter;
  bool full_duplex = true;
  // Whose 1-GPU readings of the paper (Figure 5) give the default T_c and T_enc: "gtx1080" (cluster
  // (a)) or "p100" (cluster (b)); empty: none (compute times must then be given).
  std::string gpu;
  // Whether the paper's Figure 5 readings for `gpu` were measured on this cluster (false for a
  // preset that is not one of the paper's, so no reading is printed beside it).
  bool paper_readings = true;
};

// Throws unless G >= 1, both bandwidths > 0 and both latencies >= 0 (the message names the
// cluster and the field).
void validate(const Cluster& c);

// The paper's clusters [P] with our assumptions [R]:
//   ethernet    128 nodes x 4 GTX 1080 behind one PCIe 3.0 switch (12 GB/s = 96 Gbit/s, 10 us),
//               1 Gbit/s Ethernet between nodes (50 us), full duplex;
//   infiniband  128 nodes x 4 Tesla P100 on NVLink (40 GB/s = 320 Gbit/s, 5 us), 100 Gbit/s
//               InfiniBand EDR between nodes (2 us; our assumption, not 56 Gbit/s FDR).
// And one that is not the paper's (no readings; compute times from the GTX 1080's):
//   ethernet10g the ethernet cluster with 10 Gbit/s Ethernet between nodes (50 us).
// Throws on an unknown name, listing the known ones.
Cluster cluster_preset(std::string_view name);
std::vector<std::string> cluster_preset_names();
// The paper's two (ethernet, infiniband): perf-model's default.
std::vector<std::string> paper_cluster_names();

// What one network needs, besides a cluster.
struct Workload {
  std::string network;                // for messages and output
  std::vector<int64_t> tensor_numel;  // n_t, every entry >= 1, at least one
  int64_t batch_per_gpu = 0;          // b >= 1
  double compute_s = 0;               // T_c > 0
  double encode_s = 0;                // T_enc >= 0 (TernGrad only)
};

struct ModelOptions {
  Topology topology = Topology::ps;
  DownBits down_bits = DownBits::ceil;
};

// k(N) = ceil(log2(2N + 1)), computed in integers (N >= 1; N = 1 -> 2, 8 -> 5, 512 -> 11).
int sum_field_bits(int64_t workers);
// Per-element bits of one direction (see the header comment). Throws if workers < 1.
double up_bits(Gradients g);
double down_bits(Gradients g, int64_t workers, DownBits mode);
// B(beta) for one message: sum_t ceil(n_t beta / 8) (no ceil when beta is not an integer) plus
// 4 bytes per tensor when `scalers`.
double message_bytes(const std::vector<int64_t>& tensor_numel, double bits_per_element,
                     bool scalers);

// One configuration's iteration, split as in the equations.
struct Estimate {
  double compute_s = 0, encode_s = 0, intra_s = 0, inter_s = 0;
  double total_s = 0;                 // T_iter
  double images_per_sec = 0;          // N b / T_iter
  double up_bits = 0, down_bits = 0;  // per element, as used for this N
  double inter_bytes = 0;  // what one node sends over its network link per iteration (0 if M = 1)
  int nodes = 1;           // M
};

// T_iter and throughput for N = gpus GPUs. Throws on an invalid workload or cluster, or
// gpus < 1.
Estimate estimate(const Workload& w, const Cluster& c, int gpus, Gradients g,
                  const ModelOptions& options = {});

struct Comparison {
  int gpus = 0;
  Estimate fp32, terngrad;
  double speedup = 0;  // terngrad.images_per_sec / fp32.images_per_sec
};
Comparison compare(const Workload& w, const Cluster& c, int gpus, const ModelOptions& options = {});

// ---- the paper's Figure 5, read by eye, ~ +-3% of full scale ------------------------------

// The networks of Figure 5 as our nets are named: "alexnet", "googlenet", "vgg_a".
std::vector<std::string> figure5_networks();
// 1, 2, 4, ..., 512.
std::vector<int> figure5_gpus();
// The per-GPU batch of Figure 5 (128, 64, 32); nullopt for a network not in the figure.
std::optional<int64_t> paper_batch(std::string_view network);

struct PaperReading {
  double fp32 = 0, terngrad = 0;  // images/s
};
// The figure's reading for (network, "gtx1080" | "p100", N); nullopt where there is none
// (cluster (b) is read at 1-16 and 512 GPUs only).
std::optional<PaperReading> paper_reading(std::string_view network, std::string_view gpu, int gpus);

// Default T_c and T_enc from the paper's 1-GPU readings on `gpu`: T_c = b / R1_fp32,
// T_enc = max(0, b / R1_tern - b / R1_fp32). nullopt when there is no reading.
struct ComputeTimes {
  double compute_s = 0, encode_s = 0;
};
std::optional<ComputeTimes> paper_compute_times(std::string_view network, std::string_view gpu);

}  // namespace tg::perf
