#include "nn/core/precision.h"

#include <atomic>

namespace tg {

namespace {
std::atomic<bool> g_tf32{false};
}  // namespace

void set_cuda_tf32(bool on) {
  g_tf32.store(on, std::memory_order_relaxed);
}
bool cuda_tf32() {
  return g_tf32.load(std::memory_order_relaxed);
}

}  // namespace tg
