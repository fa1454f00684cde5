// Rendezvous stores: a key-value space every rank of a job can reach, used once at start-up to
// exchange addresses (Gloo), the NCCL unique id and a config hash. Built on Gloo's stores.
//
//   file://DIR            a directory on a filesystem all ranks share (Gloo FileStore)
//   redis://HOST:PORT     a Redis server (Gloo RedisStore, hiredis)
//   redis://:PASSWORD@HOST:PORT, redis://USER:PASSWORD@HOST:PORT
//                         ... that asks for a password (requirepass), or a Redis 6 ACL user;
//                         %XX escapes in USER and PASSWORD. The password is sent once (AUTH) and
//                         never printed: every message and url() show it as ***.
//
// get() and wait() block up to the store's timeout, then throw naming the missing keys and the URL.
// Keys are any non-empty strings, values non-empty byte strings; keys are written once per job:
// set() of a key that exists throws (Gloo's stores refuse to overwrite), so a store reused across
// jobs needs a fresh directory or key prefix. Every method is safe to call from several threads;
// all failures are tg::Error naming the URL.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tg::comm {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  // Same with an explicit limit instead of the store's (rendezvous waits use the communicator's).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Whether every key is set, now: one look, no waiting (a file's existence, one Redis EXISTS).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual std::string url() const = 0;
};

// Parses and opens a store URL (file://DIR creates DIR if missing; redis://HOST[:PORT], port 6379
// by default, connects now, and each Redis command is bounded by `timeout` too). Throws naming
// the URL on a malformed URL, a non-positive timeout or an unreachable server.
std::unique_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout);

// The URL as it may be printed or recorded: a redis:// password replaced by ***
// (redis://user:***@host:port); any other URL unchanged.
std::string redact_store_url(const std::string& url);

}  // namespace tg::comm
