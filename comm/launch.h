// Multi-process start-up: which rank this process is (discover_rank), and the local launcher that
// starts P worker processes of the same binary on this machine (launch_local, behind `--nproc P`).
//
// Rank discovery, highest priority first:
//   flags     --rank R --world-size W [--rendezvous URL]  (explicit; multi-node by hand)
//   launcher  TG_RANK, TG_WORLD_SIZE, TG_RENDEZVOUS        (set by launch_local for its children)
//   slurm     SLURM_PROCID, SLURM_NTASKS                   (srun)
//   mpi       OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE   (Open MPI's mpirun)
//   default   rank 0 of 1, no rendezvous                   (nothing set: a single process)
// The rendezvous URL is --rendezvous, else TG_RENDEZVOUS, else (Slurm and Open MPI only) a
// derived file store in the working directory, which must then be shared by all nodes:
//   slurm  file://$PWD/.tg-rendezvous-slurm-<SLURM_JOB_ID>[.<SLURM_STEP_ID>]
//   mpi    file://$PWD/.tg-rendezvous-mpi-<PMIX_NAMESPACE | OMPI_MCA_ess_base_jobid |
//                                         OMPI_MCA_orte_ess_jobid>
// (one directory per job step, as the stores take each key once per job). A world of one needs no
// rendezvous. An environment variable set to the empty string counts as unset.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tg::comm {

using EnvMap = std::map<std::string, std::string>;

// This process's environment (environ) as a map.
EnvMap current_environment();
// env[name], or none when it is unset or empty.
std::optional<std::string> env_get(const EnvMap& env, const char* name);

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;  // store URL (file://DIR, redis://HOST:PORT); empty for a world of one
  std::string source;      // "flags", "launcher", "slurm", "mpi" or "default"
};

// The explicit command-line values; unset ones are std::nullopt.
struct RankFlags {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<std::string> rendezvous;
};

// Resolves this process's rank, world size and rendezvous URL from `flags` and `env` (see the
// priority list above); `cwd` is the directory a derived Slurm/Open MPI file store goes in.
// Throws tg::Error naming the flag or variable when: only one of a rank/world-size pair is set;
// a value is not a non-negative integer; the world size is below 1 or the rank outside
// [0, world size); the flags disagree with the launcher's TG_RANK/TG_WORLD_SIZE (the flags would
// give every launched process the same rank), or Slurm and Open MPI both name this process and
// disagree; a world of more than one has no rendezvous (flags/launcher) and none can be derived
// (Slurm without SLURM_JOB_ID, Open MPI without a job id); the rendezvous is not SCHEME://REST.
// Flags override Slurm and Open MPI silently: that is what they are for.
RankEnv discover_rank(const RankFlags& flags, const EnvMap& env, const std::string& cwd);
// Same with the process environment and working directory.
RankEnv discover_rank(const RankFlags& flags);

// "rank 1 of 4 (from slurm), rendezvous file:///shared/run/.tg-rendezvous-slurm-812.0"
std::string describe(const RankEnv& r);

struct LaunchOptions {
  // After the first rank fails (or the launcher is interrupted), how long the others may take to
  // stop on their own before they get SIGTERM; then how long before SIGKILL.
  double grace_seconds = 30.0;
  double term_seconds = 10.0;
  // Where the rendezvous directory is made; empty: $TMPDIR, else /tmp.
  std::string rendezvous_parent;
  // Where the prefixed output of the ranks and the launcher's own messages go.
  int out_fd = 1;
  int err_fd = 2;
  // This rank's stdout is copied to out_fd without the prefix (its stderr keeps it), so the
  // launcher's stdout is that rank's machine-readable output as if it ran alone; -1: none.
  int plain_stdout_rank = -1;
  // Restarts (torchrun's --max-restarts): when a rank fails while restarts remain, the others
  // get restart_grace_seconds to write their last words, then SIGKILL (a peer is gone: they
  // could only wait for it until their timeout), and every rank starts again with restart_args
  // appended to its command line (those not already on it; train passes --resume), up to
  // max_restarts times. The last attempt stops its ranks as above (grace, SIGTERM, SIGKILL).
  int max_restarts = 0;
  std::vector<std::string> restart_args;
  double restart_grace_seconds = 1.0;
};

// Starts `nproc` copies of `argv` (argv[0] a path, or a name looked up in PATH) as ranks 0..nproc-1
// and supervises them until all have exited. Each child gets the launcher's environment plus
// TG_RANK, TG_WORLD_SIZE=nproc, TG_RESTARTS (the restarts before this start: 0, 1, ...) and
// TG_RENDEZVOUS=file://<fresh directory per start, removed afterwards>,
// stdin from /dev/null, and its own process group (so a terminal's Ctrl-C reaches only the
// launcher, which forwards it once). Every line a rank writes is copied whole to out_fd (its
// stdout) or err_fd (its stderr) as "[rank R] line"; a last line without a newline gets one.
//
// SIGINT, SIGTERM and SIGHUP received by the launcher are forwarded to every rank's process
// group; a second one kills the ranks at once. When a rank exits non-zero or dies by a signal,
// the launcher names it on err_fd, gives the others grace_seconds, then SIGTERM, then after
// term_seconds SIGKILL. A rank's process group is killed as soon as the rank is reaped, so no
// helper process it started outlives it; children also get SIGKILL if the launcher itself dies
// (PR_SET_PDEATHSIG).
//
// With options.max_restarts > 0, a failure (not an interrupt) while restarts remain starts every
// rank again (see LaunchOptions); each restart is announced on err_fd with its cause: the rank,
// how it ended and the last "error:" line it wrote.
//
// Returns the exit status of the first rank that failed in the last start (128 + signal for a
// signal death); if none failed but a signal was forwarded, 128 + that signal; otherwise 0. Ranks
// the launcher itself terminates or kills after an interrupt do not count as failing ranks. Throws
// tg::Error (after stopping any ranks already started) when nproc < 1, argv is empty, argv[0] is
// not executable, or a pipe, fork or the rendezvous directory cannot be made. Not reentrant: it
// installs signal handlers for its duration (restoring the previous ones), one launch per process
// at a time.
int launch_local(int nproc, const std::vector<std::string>& argv,
                 const LaunchOptions& options = {});

// The command line for launched workers: `argv` with each of the launcher's own options
// `launcher_flags` ("--nproc N" / "--nproc=N", ...) removed and argv[0] replaced by this
// executable's absolute path (/proc/self/exe).
std::vector<std::string> worker_argv(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& launcher_flags = {"--nproc"});

}  // namespace tg::comm
