#include "train/threads.h"

#include <algorithm>

#include "nn/core/cpu_env.h"

namespace tg::train {

namespace {

// "2 CPUs shared by 2 processes; <how to change it>"
std::string from_cpus(int cpus, int sharing, const std::string& change) {
  return std::to_string(cpus) + " CPU" + (cpus > 1 ? "s" : "") +
         (sharing > 1 ? " shared by " + std::to_string(sharing) + " processes" : "") + "; " +
         change;
}

}  // namespace

std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

ThreadChoice choose_threads(int flag, int sharing) {
  if (flag > 0) return {flag, "--threads " + std::to_string(flag)};
  const EnvThreads env = env_threads();
  if (env.count > 0) return {env.count, env.source};
  const int cpus = affinity_cpus();
  return {std::max(1, cpus / std::max(sharing, 1)),
          from_cpus(cpus, sharing, "--threads N or OMP_NUM_THREADS to change")};
}

ThreadChoice choose_loader_threads(int64_t setting, int sharing) {
  if (setting > 0)
    return {static_cast<int>(setting), "data.loader_threads = " + std::to_string(setting)};
  const int cpus = affinity_cpus();
  return {std::max(1, cpus / std::max(sharing, 1)),
          from_cpus(cpus, sharing, "data.loader_threads to change")};
}

}  // namespace tg::train
