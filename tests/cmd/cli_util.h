// Runs the real `terngrad` binary from tests: fork/exec with stdout and stderr captured.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nn/core/json.h"
#include "tests/testing/files.h"

namespace tg::testing {

struct CliResult {
  int exit_code = -1;  // 128 + signal if killed
  std::string out, err;
};

// Starts `terngrad args...` with stdout/stderr redirected to files; returns the pid. `env` adds
// NAME=VALUE entries to the inherited environment; `cwd` (if not empty) is its working directory;
// `binary` is the program (the fault tests pass TG_TERNGRAD_FAULTY_BIN, tests/testing/
// faulty_main.cpp).
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& out_file,
                       const std::string& err_file, const std::vector<std::string>& env = {},
                       const std::string& cwd = "", const std::string& binary = TG_TERNGRAD_BIN) {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : env) {
      const size_t eq = e.find('=');
      ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    int o = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> argv;
    std::string bin = binary;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits for `pid` up to `limit_s` seconds; its exit code (128 + signal), or -1 after killing it
// when it did not exit in time. `seconds` receives how long it took.
inline int wait_exit_within(pid_t pid, double limit_s, double* seconds = nullptr) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (seconds) *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

// Runs `terngrad args...` to completion.
inline CliResult run_cli(const std::vector<std::string>& args) {
  TempDir io;
  const std::string out = io / "out", err = io / "err";
  CliResult r;
  r.exit_code = wait_exit(spawn_cli(args, out, err));
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// A quick LeNet run on the synthetic dataset (10 classes of noisy prototypes, 28x28x1): batch 16,
// a log line every 5 and a checkpoint every 10 iterations, output in `out`; `extra` are more
// `--set` pairs etc., inserted before `--out`.
inline std::vector<std::string> quick_train_args(const std::string& out, int iterations = 40,
                                                 const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {
      "train", "--no-progress",           "--set", "data.name=synthetic",
      "--set", "data.synthetic_size=512", "--set", "data.eval_batch_size=128",
      "--set", "train.batch_size=16",     "--set", "train.iterations=" + std::to_string(iterations),
      "--set", "train.log_every=5",       "--set", "train.checkpoint_every=10"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("--out");
  a.push_back(out);
  return a;
}

// Every non-empty line of `text` parsed as one JSON value (JSON-lines output).
inline std::vector<json::Value> json_lines(const std::string& text) {
  std::vector<json::Value> v;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

// The `terngrad: error: ` lines of `err` (a rank's output may carry several), each from that
// prefix to its line's end.
inline std::vector<std::string> error_lines(const std::string& err) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = err.find("terngrad: error: ", at)) != std::string::npos) {
    out.push_back(err.substr(at, err.find('\n', at) - at));
    ++at;
  }
  return out;
}

inline bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Whether process `pid` exists and is not a zombie.
inline bool running(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Waits until `path` has a line containing `text` (polling), up to `limit` and while process
// `pid` runs.
inline bool wait_for_line(const std::string& path, const std::string& text,
                          std::chrono::seconds limit, pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline && running(pid)) {
    if (std::filesystem::exists(path) && read_text(path).find(text) != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The pid of the child of `launcher` whose environment says TG_RANK=rank, or -1.
inline pid_t rank_pid(pid_t launcher, int rank) {
  DIR* d = ::opendir("/proc");
  if (!d) return -1;
  pid_t found = -1;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_text("/proc/" + name + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = -1;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != launcher)
      continue;
    std::string env = read_text("/proc/" + name + "/environ");
    for (char& c : env)
      if (c == '\0') c = '\n';
    if (("\n" + env).find("\nTG_RANK=" + std::to_string(rank) + "\n") != std::string::npos)
      found = std::stoi(name);
  }
  ::closedir(d);
  return found;
}

}  // namespace tg::testing
