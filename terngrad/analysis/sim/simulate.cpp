// simulate() and simulate_all() (see simulate.h): each simulation in a child process that calls
// the SimGrid module (simgrid_module.cpp), opened here with dlopen.
#include "terngrad/analysis/sim/simulate.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "nn/core/error.h"

#ifndef TG_SIMGRID_MODULE
#define TG_SIMGRID_MODULE ""
#endif

namespace tg::sim {

namespace {

using RunFn = int (*)(const Schedule*, const Platform*, const Costs*, const char*, double*, char*,
                      size_t);

// The module, opened once: its entry point, or why it could not be opened.
struct Module {
  RunFn run = nullptr;
  std::string why;
};

const Module& module() {
  static const Module m = [] {
    Module out;
    const char* env = std::getenv("TG_SIMGRID_MODULE");
    const std::string path = env && *env ? env : TG_SIMGRID_MODULE;
    if (path.empty()) {
      out.why =
          "perf-model --simulate needs SimGrid, which this build did not find: install it "
          "(apt-get install libsimgrid-dev, or bash scripts/setup.sh) and rebuild";
      return out;
    }
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      out.why = "perf-model --simulate cannot open its SimGrid module " + path + " (" +
                (e ? e : "unknown error") +
                "): install libsimgrid-dev (or bash scripts/setup.sh) and rebuild";
      return out;
    }
    out.run = reinterpret_cast<RunFn>(::dlsym(h, "tg_sim_run"));
    if (out.run == nullptr) out.why = "the SimGrid module " + path + " has no tg_sim_run";
    return out;
  }();
  return m;
}

bool write_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// A simulation running in a child process: its pid and the read end of its result pipe.
struct Child {
  pid_t pid = -1;
  int fd = -1;
};

Child start(const Job& job) {
  TG_CHECK(module().run != nullptr, module().why);
  TG_CHECK(job.schedule != nullptr, "simulate: no schedule");
  if (job.platform.file.empty()) {
    perf::validate(job.platform.cluster);
    TG_CHECK(job.platform.oversubscription >= 1, "platform: oversubscription ",
             job.platform.oversubscription, " (expected >= 1)");
  }
  const Costs& c = job.costs;
  TG_CHECK(c.per_message_s >= 0 && c.encode_s_per_element >= 0 && c.decode_s_per_element >= 0 &&
               c.shared_cores >= 0 && c.per_phase_s >= 0,
           "simulate: negative cost");
  int fds[2];
  TG_CHECK(::pipe(fds) == 0, "simulate: pipe: ", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    TG_THROW("simulate: fork: ", std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    char status = 0;
    std::vector<double> end(static_cast<size_t>(job.schedule->ranks), 0.0);
    char error[1024] = "";
    if (module().run(job.schedule, &job.platform, &job.costs, job.timeline_csv.c_str(), end.data(),
                     error, sizeof error) == 0) {
      out.assign(reinterpret_cast<const char*>(end.data()), end.size() * sizeof(double));
    } else {
      status = 1;
      out = error;
    }
    const bool ok = write_all(fds[1], &status, 1) && write_all(fds[1], out.data(), out.size());
    ::_exit(ok ? 0 : 2);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

Result finish(const Child& child, const Schedule& schedule) {
  std::string got;
  char buf[1 << 16];
  for (;;) {
    const ssize_t k = ::read(child.fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got.append(buf, static_cast<size_t>(k));
  }
  ::close(child.fd);
  int wstatus = 0;
  while (::waitpid(child.pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  TG_CHECK(!got.empty() && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
           "simulate: the simulation process ended without a result (",
           WIFSIGNALED(wstatus) ? "killed by signal " + std::to_string(WTERMSIG(wstatus))
                                : "exit status " + std::to_string(WEXITSTATUS(wstatus)),
           ")");
  if (got[0] != 0) TG_THROW(got.substr(1));
  const size_t n = (got.size() - 1) / sizeof(double);
  TG_CHECK(n == static_cast<size_t>(schedule.ranks), "simulate: ", n, " rank results for ",
           schedule.ranks, " ranks");
  Result r;
  r.rank_end.resize(n);
  std::memcpy(r.rank_end.data(), got.data() + 1, n * sizeof(double));
  for (double t : r.rank_end) r.seconds = std::max(r.seconds, t);
  r.messages = schedule.messages;
  return r;
}

}  // namespace

bool simulator_available() {
  return module().run != nullptr;
}

std::string simulator_missing() {
  return module().run != nullptr ? "" : module().why;
}

std::vector<Result> simulate_all(const std::vector<Job>& jobs, int parallel) {
  TG_CHECK(parallel >= 1, "simulate_all: ", parallel, " at once (expected >= 1)");
  std::vector<Result> out(jobs.size());
  std::vector<std::pair<size_t, Child>> running;
  std::string error;
  size_t next = 0;
  // Every started child is waited for, even after one failed; the first error is thrown after.
  while (next < jobs.size() || !running.empty()) {
    while (error.empty() && next < jobs.size() && running.size() < static_cast<size_t>(parallel)) {
      try {
        running.push_back({next, start(jobs[next])});
      } catch (const std::exception& e) {
        error = e.what();
      }
      ++next;
    }
    if (running.empty()) break;
    const auto [i, child] = running.front();
    running.erase(running.begin());
    try {
      out[i] = finish(child, *jobs[i].schedule);
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) TG_THROW(error);
  return out;
}

Result simulate(const Schedule& schedule, const Platform& platform, const Costs& costs,
                const std::string& timeline_csv) {
  return simulate_all({Job{&schedule, platform, costs, timeline_csv}}, 1)[0];
}

}  // namespace tg::sim
