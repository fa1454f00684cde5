#include "nn/core/profile.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "nn/core/clock.h"
#include "nn/core/cuda_runtime.h"

namespace tg::profile {

namespace {

struct State {
  bool on = false, sync = false;
  int device = 0;
  std::mutex mu;
  std::vector<Row> rows;
};
State& state() {
  static State s;
  return s;
}
thread_local const char* t_layer = "";
std::atomic<int64_t> g_flops{0};

}  // namespace

void enable(bool on, bool sync_cuda, int cuda_device) {
  State& s = state();
  s.on = on;
  s.sync = sync_cuda;
  s.device = cuda_device;
}

bool enabled() {
  return state().on;
}

const char* current_layer() {
  return t_layer;
}

double now() {
  State& s = state();
  if (s.sync) cuda::synchronize(s.device);
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

void add(const char* layer, Phase phase, double seconds) {
  State& s = state();
  std::lock_guard lock(s.mu);
  Row* row = nullptr;
  for (Row& r : s.rows)
    if (r.layer == layer) row = &r;
  if (!row) {
    s.rows.push_back(Row{layer});
    row = &s.rows.back();
  }
  (phase == Phase::forward ? row->forward_s : row->backward_s) += seconds;
}

std::vector<Row> rows() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.rows;
}

void add_flops(int64_t f) {
  g_flops.fetch_add(f, std::memory_order_relaxed);
}
int64_t flops() {
  return g_flops.load();
}

void reset() {
  g_flops.store(0);
  State& s = state();
  std::lock_guard lock(s.mu);
  s.rows.clear();
}

LayerScope::LayerScope(const char* layer) : previous_(t_layer) {
  t_layer = layer;
  if (enabled()) t0_ = now();
}

LayerScope::~LayerScope() {
  if (enabled()) add(t_layer, Phase::forward, now() - t0_);
  t_layer = previous_;
}

}  // namespace tg::profile
