// OpenMP wait policy for our binaries. libgomp (shared by our kernels and the OpenMP build of
// OpenBLAS) reads its settings when it loads, before main, and by default spins ~300K
// iterations at every barrier. On a machine where another process also wants the cores (a test
// suite under `ctest -j`, two runs side by side) that spinning steals the time slices the other
// threads need: two LeNet trainings on 2 cores ran at 1,050 + 750 img/s instead of ~1,800 each.
// A short spin (GOMP_SPINCOUNT=10000) keeps the quiet-machine speed (3,300-3,700 img/s either
// way) and recovers part of it under contention (1,240 + 1,230); OMP_WAIT_POLICY=passive
// recovers all of it under contention but costs 5-10% on a quiet machine.
#pragma once

namespace tg {

// If the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, sets GOMP_SPINCOUNT=10000 and
// re-executes the program (/proc/self/exe) with the same arguments so libgomp sees it. Returns
// normally when nothing needs changing or the re-exec is impossible. Call first thing in main.
void apply_openmp_defaults(char** argv);

}  // namespace tg
