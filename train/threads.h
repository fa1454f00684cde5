// How many threads a rank's compute and its input pipeline get, and why (summary.json's
// threads_from and loader_threads_from say it): the flag or setting, else the environment (the
// compute's OMP_NUM_THREADS), else the CPUs this process may use divided among the ranks of the
// run that share them (an Open MPI rank bound to one core gets 1; --nproc 2 on 2 cores gets 1
// each; one process gets all). The results do not depend on either count; the speed does.
#pragma once

#include <cstdint>
#include <string>

namespace tg::train {

struct ThreadChoice {
  int count = 1;
  std::string why;
};

// The compute threads: flag (--threads; 0 = none), else the environment, else the CPUs shared by
// `sharing` ranks on this host.
ThreadChoice choose_threads(int flag, int sharing);

// The input pipeline's threads: setting (data.loader_threads; 0 = none), else the CPUs shared by
// `sharing` ranks on this host (not OMP_NUM_THREADS, which is the compute's).
ThreadChoice choose_loader_threads(int64_t setting, int sharing);

// "1 CPU thread", "2 loader threads": a count in the log's words.
std::string plural(int64_t n, const std::string& word);

}  // namespace tg::train
