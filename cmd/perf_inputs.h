// What `terngrad perf-model` feeds the performance model (terngrad/analysis/perf_model.h) from
// files and from this machine: cluster descriptions in TOML, a net's tensor sizes, one worker's
// measured training step (T_c and T_enc), and the loopback link through comm/'s transport.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/analysis/perf_model.h"

namespace tg::cli {

// A cluster from a TOML file (keys: name, description, gpus_per_node, full_duplex, gpu,
// [intra] / [inter] bandwidth_gbit and latency_us). `source` names the file in errors. Throws on
// a syntax error (file:line:column), a missing or mistyped key (naming the key and what was
// expected), or an unknown key (listing the known ones).
perf::Cluster parse_cluster_toml(const std::string& text, const std::string& source);
// `name`: a preset name, else a TOML file path; throws if it is neither.
perf::Cluster resolve_cluster(const std::string& name);

// Parameter counts per tensor of one of our nets (built on the CPU with its defaults), in arena
// order. Throws on an unknown net, listing the known ones.
std::vector<int64_t> net_tensor_numel(const std::string& network);

struct MeasuredStep {
  double compute_s = 0, encode_s = 0;
};
// One worker's real training step (TrainStep with the TernGrad compressor, as `terngrad train`
// runs it with compression.method=terngrad) on a synthetic batch: T_c = the step minus its
// compression phase, T_enc = the compression phase (statistics, scalers, encode, decode,
// finalize). Medians over `steps` timed steps after one warm-up.
MeasuredStep measure_step(const std::string& network, int64_t batch, int steps);

// The loopback link as the runs see it: two ranks of the Gloo transport (comm/) as threads of
// this process over 127.0.0.1; payload bandwidth (Gbit/s; best of 3 transfers of 256 MiB in
// 16 MiB messages) and one-way latency (half the median round trip of 1-byte messages, each with
// the transport's header: the per-message cost a run's exchange pays).
struct LinkMeasurement {
  double gbit_per_s = 0, latency_s = 0;
};
LinkMeasurement measure_loopback();

}  // namespace tg::cli
