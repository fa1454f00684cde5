// A real redis-server for tests that need a Redis rendezvous: started on a free 127.0.0.1 port
// with no persistence, in its own temp directory, and stopped (SIGTERM) when the object dies.
// Tests call have_redis_server() first and skip when it is not installed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "tests/testing/files.h"

extern char** environ;

namespace tg::testing {

// A 127.0.0.1 TCP port nothing listens on right now (0 if none could be found).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

inline bool have_redis_server() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/redis-server";
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

class RedisServer {
 public:
  // Starts the server and waits (up to 10 s) until a store can open on it; throws
  // std::runtime_error with the server's log otherwise. `extra`: more redis-server options, e.g.
  // {"--requirepass", "pw"}; `userinfo`: what url() carries before '@' to get in ("" none,
  // ":pw", "alice:pw").
  explicit RedisServer(const std::vector<std::string>& extra = {},
                       const std::string& userinfo = "") {
    port_ = free_port();
    if (port_ == 0) throw std::runtime_error("redis-server: cannot find a free port");
    url_ = "redis://" + (userinfo.empty() ? "" : userinfo + "@") +
           "127.0.0.1:" + std::to_string(port_);
    const std::string port = std::to_string(port_), log = dir_ / "redis.log";
    std::vector<std::string> args = {
        "redis-server", "--port", port,    "--bind",   "127.0.0.1", "--save", "",
        "--appendonly", "no",     "--dir", dir_.str(), "--logfile", log};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start redis-server");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      try {
        tg::comm::open_store(url_, std::chrono::seconds(1));
        return;
      } catch (const std::exception& e) {
        if (std::chrono::steady_clock::now() > deadline) {
          stop(SIGKILL);
          throw std::runtime_error("redis-server on port " + port +
                                   " did not come up: " + e.what() + "\nlog: " + read_text(log));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~RedisServer() { stop(SIGTERM); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  const std::string& url() const { return url_; }
  int port() const { return port_; }
  // Stops the server now (e.g. SIGKILL to test a dead server); idempotent.
  void stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string url_;
};

}  // namespace tg::testing
