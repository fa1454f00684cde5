#include "nn/core/cpu_env.h"

#include <cblas.h>  // openblas_get_corename (we link OpenBLAS, see the top CMakeLists.txt)
#include <strings.h>
#include <unistd.h>

#include <cstdlib>

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

}  // namespace tg
