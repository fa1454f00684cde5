// CPU runtime settings our binaries (terngrad, bench_train) start with. Both libraries involved
// read their settings when they load, before main, so apply_cpu_defaults() sets what the user
// left unset and re-executes the program once (/proc/self/exe, same arguments):
//
// - GOMP_SPINCOUNT=10000 (unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set). libgomp, shared by
//   our kernels and the OpenMP build of OpenBLAS, spins ~300K iterations at every barrier by
//   default. When another process also wants the cores (a test suite under `ctest -j`, two runs
//   side by side) that spinning steals the time slices the other threads need: two LeNet
//   trainings on 2 cores ran at 1,050 + 750 img/s instead of ~1,800 each. A short spin keeps the
//   quiet-machine speed and recovers part of it (1,240 + 1,230); OMP_WAIT_POLICY=passive
//   recovers all of it under contention but costs 5-10% on a quiet machine.
// - OPENBLAS_CORETYPE=SkylakeX (unless set) when the CPU has AVX-512 F/BW/DQ/VL but OpenBLAS
//   chose its AVX2 kernels: OpenBLAS 0.3.21 (Debian 12) does not know AMD Zen 4 and runs its
//   Haswell sgemm there, while its AVX-512 kernels, which Zen 4 executes, are ~1.9x faster
//   (2 EPYC cores: 225 -> 440 GFLOP/s; CifarNet batch-128 training 80 -> 53 ms/step).
#pragma once

#include <string>
#include <vector>

namespace tg {

// Call first thing in main. Returns normally when nothing needs changing or the re-exec is
// impossible (then the libraries' own defaults stay).
void apply_cpu_defaults(char** argv);

// What decides the bits of a CPU run beyond the config (summary.json's "cpu"): the same config
// gives the same params_sha256 for any thread count, launcher and process count on one machine,
// but two x86-64 CPUs may differ where a library picks its code path by the CPU it finds.
//   model            /proc/cpuinfo's model name
//   compiled_isa     what our own kernels were compiled for ("x86-64-v3" with AVX2/FMA/F16C/BMI2,
//                    TG_ENABLE_AVX2; else "x86-64"): fixed at build time, the same on every CPU
//   avx512           whether this CPU has AVX-512 F/BW/DQ/VL (apply_cpu_defaults then pins
//                    OpenBLAS's SkylakeX kernels)
//   openblas_core    the kernel set OpenBLAS runs (openblas_get_corename: "Haswell", "SkylakeX",
//                    "Zen", ...): its GEMM kernels and blocking, so the order of the sums in every
//                    convolution and linear layer
//   openblas_config  openblas_get_config(): version, DYNAMIC_ARCH, threading
struct CpuNumerics {
  std::string model, compiled_isa, openblas_core, openblas_config;
  bool avx512 = false;
};
CpuNumerics cpu_numerics();

// The CPUs this process may run on (sched_getaffinity: a launcher's binding shows here), at
// least 1, and their ids.
std::vector<int> affinity_cpu_list();
int affinity_cpus();

// The thread count the user chose through the environment: OMP_NUM_THREADS, else
// OPENBLAS_NUM_THREADS (our GEMMs run OpenBLAS on OpenMP tiles, so either bounds the threads),
// as {count, "NAME=value"}; {0, ""} when neither is a positive number.
struct EnvThreads {
  int count = 0;
  std::string source;
};
EnvThreads env_threads();

// Linux's SCHED_BATCH for every thread of this process, and so (by inheritance) for every thread
// they start later. A SCHED_BATCH thread that wakes does not preempt the one running on its core;
// it runs at the next tick. For a Gloo rank with more runnable threads than cores (several ranks
// per host, overlapped buckets, OpenMP) that is the difference between progress and spinning:
// Gloo's TCP event loop only try-locks a connection's mutex when data arrives, and returns to
// epoll_wait if the lock is held (gloo/transport/tcp/pair.cc, Pair::handleEvents). A user thread
// holds it while it writes to the socket; on loopback that write wakes the peer's loop thread,
// which preempts the writer still holding the lock, and every loop thread with data pending then
// spins through epoll_wait until the writer is scheduled again. Measured on 2 cores, 8 ranks:
// ~100 epoll_wait calls per message and 88% of all CPU in the loop threads for small
// collectives; with SCHED_BATCH a 16-element exchange took 1.6 ms instead of 12.8 and LeNet
// trained 28% (fp32) and 41% (TernGrad) faster (bench/README.md, "Loopback").
// Returns the number of threads switched, or throws naming the errno when a thread could not be
// switched (Linux lets any process lower its own threads' priority like this; a sandbox's
// seccomp filter may not): callers treat that as "not available", never as a failed run.
int use_batch_scheduling();

}  // namespace tg
