// simulate() without SimGrid (see simulate.h): says how to get it.
#include "nn/core/error.h"
#include "terngrad/sim/simulate.h"

namespace tg::sim {

bool simulator_available() {
  return false;
}

std::string simulator_missing() {
  return "perf-model --simulate needs SimGrid, which this build did not find: install it "
         "(apt-get install libsimgrid-dev, or bash scripts/setup.sh) and rebuild";
}

Result simulate(const Schedule&, const Platform&, const Costs&, const std::string&) {
  TG_THROW(simulator_missing());
}

std::vector<Result> simulate_all(const std::vector<Job>&, int) {
  TG_THROW(simulator_missing());
}

}  // namespace tg::sim
