// Runs tests/train/check_tensorboard.py on a run's output directory: the `tensorboard` Python
// package reads its event files back and every scalar is compared with metrics.jsonl (or, for
// measure-bounds, bounds.jsonl). The package is a test-only dependency that `bash
// scripts/setup.sh --test-tools` installs into .venv-test/ of the checkout; TG_TEST_PYTHON names
// another interpreter. Exit code 77 means it is not installed: tests skip then, as they do without
// redis-server.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/testing/files.h"

namespace tg::testing {

struct ScriptResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline std::string test_python() {
  if (const char* p = std::getenv("TG_TEST_PYTHON"); p && *p) return p;
  return std::string(TG_SOURCE_DIR) + "/.venv-test/bin/python3";
}

// check_tensorboard.py DIR [--bounds]; exit 77 with a message when the interpreter is missing.
inline ScriptResult check_tensorboard(const std::string& dir, bool bounds = false) {
  const std::string python = test_python();
  if (::access(python.c_str(), X_OK) != 0)
    return {77, python + " not found: the tensorboard Python package is not installed (bash " +
                    "scripts/setup.sh --test-tools installs it, or set TG_TEST_PYTHON)"};
  TempDir io;
  const std::string log = io / "log";
  std::vector<std::string> args = {
      python, std::string(TG_SOURCE_DIR) + "/tests/train/check_tensorboard.py", dir};
  if (bounds) args.push_back("--bounds");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(python.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ScriptResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = read_text(log);
  return r;
}

}  // namespace tg::testing
