#include "comm/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "comm/store.h"
#include "nn/core/clock.h"
#include "nn/core/error.h"

extern char** environ;

namespace tg::comm {

// ---------------------------------------------------------------------------------------------
// Rank discovery
// ---------------------------------------------------------------------------------------------

std::optional<std::string> env_get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

namespace {

// `value` as a non-negative int; `what` names where it came from ("SLURM_PROCID").
int parse_count(const std::string& value, const std::string& what) {
  int v = -1;
  const char* b = value.data();
  const char* e = b + value.size();
  const bool digits = !value.empty() && value[0] >= '0' && value[0] <= '9';
  auto [p, ec] = std::from_chars(b, e, v);
  TG_CHECK(digits && ec == std::errc() && p == e, what, "='", value,
           "' is not a non-negative integer (expected e.g. 0, 1, 2)");
  return v;
}

struct RankPair {
  int rank = 0, world = 1;
  std::string text;  // "SLURM_PROCID=1, SLURM_NTASKS=4": how errors name it
};

void check_range(int rank, int world, const std::string& text) {
  TG_CHECK(world >= 1, text, ": the world size ", world, " is invalid: expected at least 1");
  TG_CHECK(rank >= 0 && rank < world, text, ": rank ", rank,
           " is out of range: expected 0 <= rank < ", world);
}

// The (rank, world size) pair named by two variables; nullopt when neither is set.
std::optional<RankPair> read_pair(const EnvMap& env, const char* rank_var, const char* world_var,
                                  const char* who) {
  auto r = env_get(env, rank_var);
  auto w = env_get(env, world_var);
  if (!r && !w) return std::nullopt;
  TG_CHECK(r && w, r ? rank_var : world_var, "=", r ? *r : *w, " is set but ",
           r ? world_var : rank_var, " is not: ", who,
           " sets both (or unset both, or pass --rank and --world-size)");
  RankPair p;
  p.rank = parse_count(*r, rank_var);
  p.world = parse_count(*w, world_var);
  p.text = std::string(rank_var) + "=" + *r + ", " + world_var + "=" + *w;
  check_range(p.rank, p.world, p.text);
  return p;
}

// A store URL is SCHEME://REST (the store module knows which schemes exist).
void check_url(const std::string& url, const std::string& what) {
  const size_t sep = url.find("://");
  bool ok = sep != std::string::npos && sep > 0 && sep + 3 < url.size() &&
            std::isalpha(static_cast<unsigned char>(url[0]));
  for (size_t i = 0; ok && i < sep; ++i) {
    const char c = url[i];
    ok = std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  }
  TG_CHECK(ok, what, " '", redact_store_url(url),
           "' is not a store URL: expected file:///shared/dir or redis://host:port");
}

// A job id as a file name fragment: anything but [A-Za-z0-9._-] becomes '_'.
std::string safe_id(std::string id) {
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return id;
}

std::string derived_store(const std::string& cwd, const std::string& tag, const std::string& id) {
  TG_CHECK(!cwd.empty() && cwd[0] == '/', "rank discovery: the working directory '", cwd,
           "' is not an absolute path; pass --rendezvous explicitly");
  std::string dir = cwd;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir == "/") dir.clear();
  return "file://" + dir + "/.tg-rendezvous-" + tag + "-" + safe_id(id);
}

std::optional<std::string> mpi_job_id(const EnvMap& env) {
  for (const char* v : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"})
    if (auto id = env_get(env, v)) return id;
  return std::nullopt;
}

constexpr const char* kRendezvousHint =
    "pass --rendezvous file:///shared/dir (a directory every rank can reach) or "
    "--rendezvous redis://[:password@]host:port, or set TG_RENDEZVOUS";

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

RankEnv discover_rank(const RankFlags& flags, const EnvMap& env, const std::string& cwd) {
  RankEnv out;
  const bool have_rank = flags.rank.has_value(), have_world = flags.world_size.has_value();
  TG_CHECK(have_rank == have_world, have_rank ? "--rank " : "--world-size ",
           have_rank ? *flags.rank : *flags.world_size, " was given without ",
           have_rank ? "--world-size" : "--rank",
           ": pass both, or neither to take them from TG_RANK/TG_WORLD_SIZE, Slurm or Open MPI");

  std::optional<RankPair> slurm, mpi;
  if (have_rank) {
    const std::string text = "--rank " + std::to_string(*flags.rank) + " --world-size " +
                             std::to_string(*flags.world_size);
    check_range(*flags.rank, *flags.world_size, text);
    // The launcher's variables name this very process; flags that disagree would give every
    // launched rank the same (flag) rank.
    if (auto launcher = read_pair(env, "TG_RANK", "TG_WORLD_SIZE", "the terngrad launcher")) {
      TG_CHECK(launcher->rank == *flags.rank && launcher->world == *flags.world_size,
               "conflicting rank sources: ", text, " but the launcher set ", launcher->text,
               "; --rank/--world-size cannot be combined with --nproc (unset TG_RANK and "
               "TG_WORLD_SIZE if they were left over in this shell)");
    }
    out = {*flags.rank, *flags.world_size, "", "flags"};
  } else if (auto launcher = read_pair(env, "TG_RANK", "TG_WORLD_SIZE", "the terngrad launcher")) {
    out = {launcher->rank, launcher->world, "", "launcher"};
  } else {
    slurm = read_pair(env, "SLURM_PROCID", "SLURM_NTASKS", "Slurm");
    mpi = read_pair(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI");
    if (slurm && mpi) {
      TG_CHECK(slurm->rank == mpi->rank && slurm->world == mpi->world,
               "conflicting rank sources: Slurm says ", slurm->text, " but Open MPI says ",
               mpi->text,
               "; pass --rank/--world-size explicitly, or unset the variables of the launcher "
               "that did not start this process (mpirun inside an sbatch script inherits the "
               "batch step's SLURM_* variables)");
    }
    if (mpi) {
      out = {mpi->rank, mpi->world, "", "mpi"};
    } else if (slurm) {
      out = {slurm->rank, slurm->world, "", "slurm"};
    } else {
      out = {0, 1, "", "default"};
    }
  }

  if (flags.rendezvous.has_value()) {
    check_url(*flags.rendezvous, "--rendezvous");
    out.rendezvous = *flags.rendezvous;
  } else if (auto url = env_get(env, "TG_RENDEZVOUS")) {
    check_url(*url, "TG_RENDEZVOUS");
    out.rendezvous = *url;
  } else if (out.world_size > 1) {
    const std::string world = "world size " + std::to_string(out.world_size);
    if (out.source == "slurm") {
      auto job = env_get(env, "SLURM_JOB_ID");
      TG_CHECK(job.has_value(), world, " (from Slurm) needs a rendezvous and none can be derived: ",
               "SLURM_JOB_ID is not set; ", kRendezvousHint);
      std::string id = *job;
      if (auto step = env_get(env, "SLURM_STEP_ID")) id += "." + *step;
      out.rendezvous = derived_store(cwd, "slurm", id);
    } else if (out.source == "mpi") {
      auto job = mpi_job_id(env);
      if (!job && slurm) job = env_get(env, "SLURM_JOB_ID");
      TG_CHECK(job.has_value(), world,
               " (from Open MPI) needs a rendezvous and none can be derived: none of "
               "PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_ess_jobid is set; ",
               kRendezvousHint);
      out.rendezvous = derived_store(cwd, "mpi", *job);
    } else {
      TG_THROW(world, " (from ", out.source == "flags" ? "--world-size" : "TG_WORLD_SIZE",
               ") needs a rendezvous: ", kRendezvousHint);
    }
  }
  return out;
}

RankEnv discover_rank(const RankFlags& flags) {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  return discover_rank(flags, current_environment(), ec ? std::string() : cwd.string());
}

std::string describe(const RankEnv& r) {
  std::string s = "rank " + std::to_string(r.rank) + " of " + std::to_string(r.world_size) +
                  " (from " + r.source + ")";
  if (!r.rendezvous.empty()) s += ", rendezvous " + redact_store_url(r.rendezvous);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Local launcher
// ---------------------------------------------------------------------------------------------

namespace {

// Longest line kept whole; a longer one is cut into pieces of this size, each prefixed (bounds the
// launcher's memory when a child writes without newlines).
constexpr size_t kMaxLine = size_t{1} << 20;
// After the last rank is reaped, how long its pipes may stay open (a helper that escaped the
// rank's process group) before the launcher stops reading them.
constexpr double kDrainSeconds = 2.0;

// The signal handlers write the signal number here; the supervision loop polls the read end.
std::atomic<int> g_signal_pipe_write{-1};  // lock-free: safe in a handler
std::atomic<bool> g_launch_active{false};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  const int fd = g_signal_pipe_write.load();
  if (fd >= 0) {
    [[maybe_unused]] ssize_t r = ::write(fd, &b, 1);
  }
  errno = saved;
}

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return "signal " + std::to_string(sig);
  }
}

// "exited with status 3" / "was killed by signal 9 (SIGKILL)"
std::string describe_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
}

int exit_code(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return WEXITSTATUS(wait_status);
}

// Writes all of `s` to fd; output that cannot be written (a closed pipe) is dropped, since the
// launcher must go on supervising its ranks.
void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd pfd{fd, POLLOUT, 0};
        ::poll(&pfd, 1, 100);
        continue;
      }
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// Installs the forwarding handlers (and SIGCHLD as a wake-up, SIGPIPE ignored) for its lifetime.
class SignalScope {
 public:
  SignalScope() {
    TG_CHECK(!g_launch_active.exchange(true),
             "launch_local: a launch is already running in this process");
    if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
      const int e = errno;
      g_launch_active = false;
      TG_THROW("launch_local: cannot create the signal pipe: ", errno_text(e));
    }
    g_signal_pipe_write = pipe_[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : kForwarded) ::sigaction(sig, &sa, &saved_[index(sig)]);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sa, &saved_[index(SIGCHLD)]);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(SIGPIPE, &ign, &saved_[index(SIGPIPE)]);
  }
  ~SignalScope() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE})
      ::sigaction(sig, &saved_[index(sig)], nullptr);
    g_signal_pipe_write = -1;
    g_launch_active = false;
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  int read_fd() const { return pipe_[0]; }

 private:
  static int index(int sig) {
    switch (sig) {
      case SIGINT:
        return 0;
      case SIGTERM:
        return 1;
      case SIGHUP:
        return 2;
      case SIGCHLD:
        return 3;
      default:
        return 4;  // SIGPIPE
    }
  }
  int pipe_[2] = {-1, -1};
  struct sigaction saved_[5]{};
};

// The fresh rendezvous directory, removed with its contents on destruction.
class RendezvousDir {
 public:
  explicit RendezvousDir(std::string parent) {
    if (parent.empty()) {
      const char* t = ::getenv("TMPDIR");
      parent = (t != nullptr && *t != '\0') ? t : "/tmp";
    }
    std::string tmpl = parent + "/tg-rendezvous-XXXXXX";
    TG_CHECK(::mkdtemp(tmpl.data()) != nullptr, "launch_local: cannot create the rendezvous ",
             "directory ", tmpl, ": ", errno_text(errno));
    path_ = tmpl;
  }
  ~RendezvousDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  RendezvousDir(const RendezvousDir&) = delete;
  RendezvousDir& operator=(const RendezvousDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Stream {
  int fd = -1;         // read end of the child's pipe; -1 once closed
  int sink = -1;       // where its lines go
  std::string prefix;  // "[rank 3] "
  std::string partial;
  std::string last_error;  // the last line holding "error:" (a restart's cause)
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  Stream out, err;
};

void close_stream(Stream& s) {
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
}

// Reads what is available on `s` and writes its complete lines, prefixed, in one write. At EOF
// (or on error) the last partial line is written with a newline and the stream is closed.
void pump(Stream& s) {
  char buf[65536];
  std::string lines;
  bool eof = false;
  while (s.fd >= 0) {
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      eof = true;
      break;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    while (true) {
      const size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      const size_t err = s.partial.find("error:", start);
      if (err != std::string::npos && err < nl) s.last_error = s.partial.substr(start, nl - start);
      lines += s.prefix;
      lines.append(s.partial, start, nl + 1 - start);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    while (s.partial.size() >= kMaxLine) {
      lines += s.prefix;
      lines.append(s.partial, 0, kMaxLine);
      lines += '\n';
      s.partial.erase(0, kMaxLine);
    }
    if (lines.size() >= kMaxLine) {
      write_all(s.sink, lines);
      lines.clear();
    }
  }
  if (eof) {
    if (!s.partial.empty()) lines += s.prefix + s.partial + "\n";
    s.partial.clear();
    close_stream(s);
  }
  if (!lines.empty()) write_all(s.sink, lines);
}

// Signals a rank's whole process group (the rank and any helper it started).
void signal_rank(const Rank& r, int sig) {
  if (::kill(-r.pid, sig) != 0 && errno == ESRCH) ::kill(r.pid, sig);
}

// Owns the started ranks: whatever way launch_local leaves, no rank outlives it.
class RankSet {
 public:
  explicit RankSet(int n) : ranks_(static_cast<size_t>(n)) {}
  ~RankSet() {
    for (Rank& r : ranks_) {
      if (r.running) {
        signal_rank(r, SIGKILL);
        int st = 0;
        while (::waitpid(r.pid, &st, 0) < 0 && errno == EINTR) {
        }
        r.running = false;
      }
      close_stream(r.out);
      close_stream(r.err);
    }
  }
  RankSet(const RankSet&) = delete;
  RankSet& operator=(const RankSet&) = delete;
  std::vector<Rank>& ranks() { return ranks_; }

 private:
  std::vector<Rank> ranks_;
};

// argv[0] as an executable path: as given when it has a '/', else looked up in PATH.
std::string resolve_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    TG_CHECK(::access(name.c_str(), X_OK) == 0, "launch_local: cannot execute '", name,
             "': ", errno_text(errno));
    return name;
  }
  const char* path_env = ::getenv("PATH");
  std::stringstream dirs(path_env != nullptr && *path_env != '\0' ? path_env : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  TG_THROW("launch_local: cannot execute '", name, "': not found in PATH");
}

bool has_prefix(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// Everything a forked child needs, built before fork (the child may only make async-signal-safe
// calls until execve).
struct ExecPlan {
  std::string path;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::vector<char*> argv_ptrs, env_ptrs;
  void finalize() {
    for (std::string& a : args) argv_ptrs.push_back(a.data());
    argv_ptrs.push_back(nullptr);
    for (std::string& e : env) env_ptrs.push_back(e.data());
    env_ptrs.push_back(nullptr);
  }
};

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string format_seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// The command line and environment of each rank: the launcher's environment, less any
// TG_RANK/TG_WORLD_SIZE/TG_RENDEZVOUS/TG_RESTARTS of its own, plus the rank's.
std::vector<ExecPlan> plan_ranks(int nproc, const std::string& path,
                                 const std::vector<std::string>& argv, const std::string& url,
                                 int restarts) {
  std::vector<std::string> base_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (has_prefix(*e, "TG_RANK=") || has_prefix(*e, "TG_WORLD_SIZE=") ||
        has_prefix(*e, "TG_RENDEZVOUS=") || has_prefix(*e, "TG_RESTARTS="))
      continue;
    base_env.emplace_back(*e);
  }
  std::vector<ExecPlan> plans(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    ExecPlan& p = plans[static_cast<size_t>(r)];
    p.path = path;
    p.args = argv;
    p.env = base_env;
    p.env.push_back("TG_RANK=" + std::to_string(r));
    p.env.push_back("TG_WORLD_SIZE=" + std::to_string(nproc));
    p.env.push_back("TG_RENDEZVOUS=" + url);
    p.env.push_back("TG_RESTARTS=" + std::to_string(restarts));
    p.finalize();
  }
  return plans;
}

// Forks and execs one rank: its stdin /dev/null, its stdout and stderr pipes read by `rank`,
// its own process group, killed if the launcher dies. Throws when a pipe, the fork or the exec
// fails (the exec's errno comes back through a close-on-exec pipe).
void start_rank(Rank& rank, const ExecPlan& plan, int devnull, pid_t launcher_pid,
                const LaunchOptions& options) {
  const int r = rank.rank;
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  TG_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0, "launch_local: pipe: ", errno_text(errno));
  rank.out.fd = out_pipe[0];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out_pipe[1]);
    TG_THROW("launch_local: pipe: ", errno_text(e));
  }
  rank.err.fd = err_pipe[0];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    TG_THROW("launch_local: pipe: ", errno_text(e));
  }
  rank.out.sink = options.out_fd;
  rank.err.sink = options.err_fd;
  rank.out.prefix = rank.err.prefix = "[rank " + std::to_string(r) + "] ";
  if (r == options.plain_stdout_rank) rank.out.prefix.clear();

  // Signals stay blocked across fork so the parent's handlers never run in the child.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher_pid) ::_exit(127);  // the launcher died before prctl
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execve(plan.path.c_str(), plan.argv_ptrs.data(), plan.env_ptrs.data());
    const int e = errno;
    [[maybe_unused]] ssize_t w = ::write(exec_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  if (pid < 0) {
    ::close(exec_pipe[0]);
    TG_THROW("launch_local: cannot fork rank ", r, ": ", errno_text(fork_errno));
  }
  ::setpgid(pid, pid);  // also here: no race with signal_rank before the child runs
  rank.pid = pid;
  rank.running = true;
  int exec_errno = 0;
  ssize_t got;
  while ((got = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(exec_pipe[0]);
  TG_CHECK(got <= 0, "launch_local: cannot execute '", plan.path, "' for rank ", r, ": ",
           errno_text(exec_errno));
  ::fcntl(rank.out.fd, F_SETFL, ::fcntl(rank.out.fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(rank.err.fd, F_SETFL, ::fcntl(rank.err.fd, F_GETFL) | O_NONBLOCK);
}

// How one start of the ranks ended.
struct Outcome {
  int status = 0;       // the first failed rank's exit status, else 128 + a forwarded signal
  bool failed = false;  // a rank failed and no signal was forwarded: a restart may follow
  std::string cause;    // "rank 1 was killed by signal 9 (SIGKILL)[: its last error line]"
};

// Watches the started ranks until all have exited and their output is drained: reaps them,
// copies their lines, stops the others after the first failure (grace, SIGTERM, SIGKILL; or,
// when a restart follows, a short grace and SIGKILL) and forwards the launcher's signals.
class Supervisor {
 public:
  Supervisor(std::vector<Rank>& ranks, SignalScope& signals, const LaunchOptions& options,
             bool restart_follows)
      : ranks_(ranks),
        signals_(signals),
        o_(options),
        restart_follows_(restart_follows),
        live_(static_cast<int>(ranks.size())) {}

  Outcome run() {
    while (true) {
      // Reap first, then read: a rank's last words are in its pipe before waitpid reports it.
      const std::vector<int> reaped = reap();
      pump_all();
      for (int idx : reaped) note_exit(ranks_[static_cast<size_t>(idx)]);
      if (live_ == 0 && !drain_until_) drain_until_ = after(kDrainSeconds);
      const auto now = Clock::now();
      escalate(now);
      bool open_streams = false;
      for (const Rank& r : ranks_) open_streams = open_streams || r.out.fd >= 0 || r.err.fd >= 0;
      if (live_ == 0 && (!open_streams || now >= *drain_until_)) break;
      wait_for_events();
      forward_signals();
    }
    pump_all();  // what arrived during the last poll
    Outcome out;
    if (first_failed_ >= 0) {
      const Rank& r = ranks_[static_cast<size_t>(first_failed_)];
      out.status = first_status_;
      out.failed = forwarded_ == 0;
      out.cause = "rank " + std::to_string(r.rank) + " " + describe_status(r.wait_status);
      if (!r.err.last_error.empty()) out.cause += ": " + r.err.last_error;
      if (!(out.failed && restart_follows_))
        say("rank " + std::to_string(first_failed_) + " failed first (" +
            describe_status(r.wait_status) + "); exiting with status " +
            std::to_string(first_status_));
      return out;
    }
    out.status = forwarded_ != 0 ? 128 + forwarded_ : 0;
    return out;
  }

 private:
  void say(const std::string& msg) const { write_all(o_.err_fd, "[launch] " + msg + "\n"); }

  std::string running_list() const {
    std::string s;
    for (const Rank& r : ranks_)
      if (r.running) s += (s.empty() ? "" : ", ") + std::to_string(r.rank);
    return s;
  }

  void signal_running(int sig) {
    for (Rank& r : ranks_)
      if (r.running) signal_rank(r, sig);
  }

  void pump_all() {
    for (Rank& r : ranks_) {
      pump(r.out);
      pump(r.err);
    }
  }

  void stop_others_at(Clock::time_point t) {
    if (!term_at_ || t < *term_at_) term_at_ = t;
  }

  // The ranks that exited since the last call (their helpers killed with them).
  std::vector<int> reap() {
    std::vector<int> reaped;
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int st = 0;
      if (::waitpid(r.pid, &st, WNOHANG) != r.pid) continue;
      r.running = false;
      r.wait_status = st;
      --live_;
      ::kill(-r.pid, SIGKILL);  // helpers it left behind in its process group
      reaped.push_back(r.rank);
    }
    return reaped;
  }

  // The first failure (not one the launcher caused) starts the grace period of the others.
  void note_exit(const Rank& r) {
    const bool failed = !(WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0);
    if (!failed || first_failed_ >= 0 || kill_at_) return;
    first_failed_ = r.rank;
    first_status_ = exit_code(r.wait_status);
    if (live_ == 0) return;
    if (restart_follows_ && forwarded_ == 0) {
      // A peer is gone: the others could only wait for it until their timeout.
      say("rank " + std::to_string(r.rank) + " " + describe_status(r.wait_status) +
          "; stopping ranks " + running_list() + " to restart");
      kill_at_ = after(o_.restart_grace_seconds);
      return;
    }
    say("rank " + std::to_string(r.rank) + " " + describe_status(r.wait_status) +
        "; waiting up to " + format_seconds(o_.grace_seconds) + " s for ranks " + running_list() +
        " to stop");
    stop_others_at(after(o_.grace_seconds));
  }

  // Past the grace period: SIGTERM; past term_seconds more: SIGKILL.
  void escalate(Clock::time_point now) {
    if (live_ > 0 && term_at_ && !kill_at_ && now >= *term_at_) {
      say("ranks " + running_list() + " still running; sending SIGTERM");
      signal_running(SIGTERM);
      kill_at_ = after(o_.term_seconds);
    } else if (live_ > 0 && kill_at_ && now >= *kill_at_) {
      say("ranks " + running_list() + " still running " +
          (term_at_ ? format_seconds(o_.term_seconds) + " s after SIGTERM"
                    : format_seconds(o_.restart_grace_seconds) + " s after the failure") +
          "; sending SIGKILL");
      signal_running(SIGKILL);
      kill_at_ = Clock::time_point::max();  // sent; now only reaping remains
    }
  }

  // Waits for output, a signal or a child's exit, or the next deadline.
  void wait_for_events() {
    std::vector<pollfd> fds;
    fds.push_back({signals_.read_fd(), POLLIN, 0});
    for (const Rank& r : ranks_) {
      if (r.out.fd >= 0) fds.push_back({r.out.fd, POLLIN, 0});
      if (r.err.fd >= 0) fds.push_back({r.err.fd, POLLIN, 0});
    }
    double wait_s = 1.0;  // SIGCHLD wakes the loop; this is only a backstop
    auto until = [&](Clock::time_point t) {
      wait_s = std::min(wait_s, std::max(0.0, -seconds_since(t)));
    };
    if (live_ > 0 && term_at_ && !kill_at_) until(*term_at_);
    if (live_ > 0 && kill_at_ && *kill_at_ != Clock::time_point::max()) until(*kill_at_);
    if (live_ == 0) until(*drain_until_);
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait_s * 1000.0) + 1);
    TG_CHECK(n >= 0 || errno == EINTR, "launch_local: poll: ", errno_text(errno));
  }

  // The launcher's SIGINT/SIGTERM/SIGHUP: forwarded once (the others get the grace period),
  // a second one kills the ranks at once.
  void forward_signals() {
    unsigned char sigs[64];
    ssize_t got;
    while ((got = ::read(signals_.read_fd(), sigs, sizeof sigs)) > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        const int sig = sigs[i];
        if (sig == SIGCHLD || live_ == 0) continue;
        if (forwarded_ == 0) {
          forwarded_ = sig;
          say("got " + signal_name(sig) + "; forwarding it to ranks " + running_list() +
              " (again to kill them at once)");
          signal_running(sig);
          stop_others_at(after(o_.grace_seconds));
        } else if (!kill_at_ || *kill_at_ != Clock::time_point::max()) {
          say("got " + signal_name(sig) + " again; killing ranks " + running_list());
          signal_running(SIGKILL);
          kill_at_ = Clock::time_point::max();
        }
      }
    }
  }

  std::vector<Rank>& ranks_;
  SignalScope& signals_;
  const LaunchOptions& o_;
  const bool restart_follows_;
  int live_;
  int first_failed_ = -1, first_status_ = 0;
  int forwarded_ = 0;  // the first signal forwarded, 0 if none
  std::optional<Clock::time_point> term_at_, kill_at_, drain_until_;
};

}  // namespace

int launch_local(int nproc, const std::vector<std::string>& argv, const LaunchOptions& options) {
  TG_CHECK(nproc >= 1, "launch_local: nproc ", nproc, " is invalid: expected at least 1");
  TG_CHECK(!argv.empty(), "launch_local: the command line is empty: expected the program first");
  TG_CHECK(options.grace_seconds >= 0 && options.term_seconds >= 0, "launch_local: grace_seconds ",
           options.grace_seconds, " and term_seconds ", options.term_seconds,
           " must be non-negative");

  TG_CHECK(options.max_restarts >= 0 && options.restart_grace_seconds >= 0,
           "launch_local: max_restarts ", options.max_restarts, " and restart_grace_seconds ",
           options.restart_grace_seconds, " must be non-negative");

  const std::string path = resolve_executable(argv[0]);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  TG_CHECK(devnull >= 0, "launch_local: cannot open /dev/null: ", errno_text(errno));
  struct DevNull {
    int fd;
    ~DevNull() { ::close(fd); }
  } devnull_guard{devnull};

  SignalScope signals;
  const pid_t launcher_pid = ::getpid();
  std::vector<std::string> args = argv;
  for (int restarts = 0;; ++restarts) {
    // A fresh store per start: the stores take each key once.
    RendezvousDir rendezvous(options.rendezvous_parent);
    const std::vector<ExecPlan> plans =
        plan_ranks(nproc, path, args, "file://" + rendezvous.path(), restarts);
    RankSet set(nproc);
    std::vector<Rank>& ranks = set.ranks();
    for (int r = 0; r < nproc; ++r) {
      ranks[static_cast<size_t>(r)].rank = r;
      start_rank(ranks[static_cast<size_t>(r)], plans[static_cast<size_t>(r)], devnull,
                 launcher_pid, options);
    }
    const bool restart_follows = restarts < options.max_restarts;
    const Outcome out = Supervisor(ranks, signals, options, restart_follows).run();
    if (!out.failed || !restart_follows) return out.status;
    for (const std::string& extra : options.restart_args)
      if (std::find(args.begin(), args.end(), extra) == args.end()) args.push_back(extra);
    std::string again;
    for (const std::string& extra : options.restart_args) again += " " + extra;
    write_all(options.err_fd, "[launch] restart " + std::to_string(restarts + 1) + " of " +
                                  std::to_string(options.max_restarts) + " after " + out.cause +
                                  "; starting ranks 0-" + std::to_string(nproc - 1) + " again" +
                                  (options.restart_args.empty() ? "" : " with" + again) + "\n");
  }
}

std::vector<std::string> worker_argv(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& launcher_flags) {
  TG_CHECK(!argv.empty(), "worker_argv: the command line is empty");
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  TG_CHECK(!ec, "worker_argv: cannot resolve /proc/self/exe: ", ec.message());
  std::vector<std::string> out = {self.string()};
  for (size_t i = 1; i < argv.size(); ++i) {
    bool dropped = false;
    for (const std::string& flag : launcher_flags) {
      if (argv[i] == flag) {
        ++i;  // and its value
        dropped = true;
        break;
      }
      if (argv[i].rfind(flag + "=", 0) == 0) {
        dropped = true;
        break;
      }
    }
    if (!dropped) out.push_back(argv[i]);
  }
  return out;
}

}  // namespace tg::comm
