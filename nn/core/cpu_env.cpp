#include "nn/core/cpu_env.h"

#include <cblas.h>  // openblas_get_corename (we link OpenBLAS, see the top CMakeLists.txt)
#include <sched.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "nn/core/device.h"  // cpu_model_name
#include "nn/core/error.h"

namespace tg {

void apply_cpu_defaults(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr)
    changed = ::setenv("GOMP_SPINCOUNT", "10000", 1) == 0;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    const char* core = openblas_get_corename();
    if (core != nullptr && (::strcasecmp(core, "haswell") == 0 || ::strcasecmp(core, "zen") == 0))
      changed = (::setenv("OPENBLAS_CORETYPE", "SkylakeX", 1) == 0) || changed;
  }
  if (!changed) return;
  ::execv("/proc/self/exe", argv);
  // execv failed (no /proc): carry on with the libraries' defaults.
}

CpuNumerics cpu_numerics() {
  CpuNumerics n;
  n.model = cpu_model_name();
#if defined(__AVX2__) && defined(__FMA__)
  n.compiled_isa = "x86-64-v3";
#else
  n.compiled_isa = "x86-64";
#endif
  n.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const char* core = openblas_get_corename();
  n.openblas_core = core != nullptr ? core : "unknown";
  const char* config = openblas_get_config();
  n.openblas_config = config != nullptr ? config : "unknown";
  // openblas_get_config() ends with a space on Debian's build
  while (!n.openblas_config.empty() && n.openblas_config.back() == ' ')
    n.openblas_config.pop_back();
  return n;
}

std::vector<int> affinity_cpu_list() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) {  // no affinity support: every online CPU
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::max(n, 1L); ++c) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

int affinity_cpus() {
  return static_cast<int>(affinity_cpu_list().size());
}

int use_batch_scheduling() {
  int switched = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const std::string name = entry.path().filename().string();
    const pid_t tid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (tid <= 0) continue;
    const sched_param param{};  // SCHED_BATCH takes priority 0
    if (::sched_setscheduler(tid, SCHED_BATCH, &param) != 0) {
      if (errno == ESRCH) continue;  // the thread ended meanwhile
      TG_THROW("cannot set SCHED_BATCH for thread ", tid, ": ", std::strerror(errno));
    }
    ++switched;
  }
  if (ec) {  // no /proc: this thread only, which the threads it starts inherit
    const sched_param param{};
    if (::sched_setscheduler(0, SCHED_BATCH, &param) != 0)
      TG_THROW("cannot set SCHED_BATCH: ", std::strerror(errno));
    switched = 1;
  }
  return switched;
}

EnvThreads env_threads() {
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);  // "4" or OpenMP's list form "4,2": the first level
    if (end != v && n > 0 && (*end == '\0' || *end == ',') && n <= 4096)
      return {static_cast<int>(n), std::string(name) + "=" + v};
  }
  return {};
}

}  // namespace tg
