#include "nn/core/openmp_env.h"

#include <unistd.h>

#include <cstdlib>

namespace tg {

void apply_openmp_defaults(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (::setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // execv failed (no /proc): carry on with libgomp's defaults.
}

}  // namespace tg
