// (b) of `terngrad convergence-check` (convergence_check_cmd.h), and the verdict both checks give.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cmd/convergence_check_cmd.h"
#include "terngrad/analysis/convergence.h"

namespace tg::cli::convergence_check {

// One PASS/FAIL line of the command's output.
struct Verdict {
  std::string check;
  bool pass = false;
  std::string detail;
};

// `v` printed with the printf format `f` (one double).
inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// (b): trains the configured run (a.config_path, a.overrides) to the last of a.sample_steps,
// ternarizes worker 0's gradient at each sampled iteration a.draws times with `tz`, and appends
// the two verdicts per iteration (unbiased@K, variance@K) to `verdicts`; prints a table per
// iteration, or with a.json two JSON objects. Throws tg::Error on a bad config or a negative
// sample step, or when the run is interrupted.
void real_checks(const ConvergenceCheckArgs& a, const tern::Ternarizer& tz,
                 std::vector<Verdict>& verdicts);

}  // namespace tg::cli::convergence_check
