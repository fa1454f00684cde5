// Per-layer, per-phase timing for benchmarks (off by default; when off, a scope costs one
// branch). Nets wrap each layer's forward in a LayerScope; the autograd tape remembers the
// layer that recorded each node and charges that node's backward time to the same layer, so
// one training step yields a forward/backward split per layer.
//
// Timing is wall clock on the host. With sync_cuda the scopes synchronize the device before
// reading the clock, so GPU time is attributed to the right layer (and the run is slower);
// without it only CPU timings are meaningful.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg::profile {

void enable(bool on, bool sync_cuda = false, int cuda_device = 0);
bool enabled();

// The layer label new tape nodes are charged to ("" outside any scope).
const char* current_layer();

// Times its own lifetime as the forward time of `layer` and makes `layer` current.
// `layer` must outlive the profile (use string literals or the net's stored names).
class LayerScope {
 public:
  explicit LayerScope(const char* layer);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  const char* previous_;
  double t0_ = 0.0;
};

enum class Phase : uint8_t { forward, backward };
void add(const char* layer, Phase phase, double seconds);
// Seconds since an arbitrary epoch, after a device sync when sync_cuda is on.
double now();

struct Row {
  std::string layer;
  double forward_s = 0.0, backward_s = 0.0;
};
// GEMM floating-point operations (2*m*n*k per call, counted by gemm_cpu / gemm_cuda while
// profiling is on): with the times above this gives a run's achieved GEMM rate.
void add_flops(int64_t flops);
int64_t flops();

// Accumulated times per layer in first-seen order; reset() clears them.
std::vector<Row> rows();
void reset();

}  // namespace tg::profile
