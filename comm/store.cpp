// Rendezvous stores (see comm/store.h): Gloo's FileStore and RedisStore behind tg::comm::Store,
// with our own deadline-bounded wait that names the missing keys, file-name-safe keys for the
// file store, a socket timeout on every Redis command, and every Gloo exception turned into a
// tg::Error naming the URL.
#include "comm/store.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

// Debian installs hiredis.h under hiredis/.
#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "nn/core/clock.h"
#include "nn/core/error.h"
#include "nn/core/hash.h"

namespace tg::comm {
namespace {

// How often a waiting rank polls the store: rendezvous happens once per job, so 10 ms of latency
// costs nothing, while a busier poll would load a shared filesystem or Redis server with P ranks.
constexpr std::chrono::milliseconds kPollInterval{10};

std::string list_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}

// File names for keys: [A-Za-z0-9_-] kept, every other byte %xx. Gloo's FileStore uses the key as
// a file name under DIR (and "." + key for its temp file), so '/' or a leading '.' would break it.
std::string encode_file_key(const std::string& key) {
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-';
    if (keep) {
      out += static_cast<char>(c);
    } else {
      out += '%' + to_hex(&c, 1);
    }
  }
  return out;
}

// FileStore with its existence check public (RedisStore's already is), for our own wait loop.
class CheckedFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::check;
  using FileStore::FileStore;
};

// RedisStore whose socket has a send/receive timeout, so a Redis server that stops answering
// (network partition, SIGSTOP) makes the command fail instead of blocking forever. The same as
// hiredis's redisSetTimeout, done on the descriptor so we need not link hiredis ourselves.
class TimedRedisStore : public gloo::rendezvous::RedisStore {
 public:
  TimedRedisStore(const std::string& host, int port, std::chrono::milliseconds timeout)
      : RedisStore(host, port) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
    if (::setsockopt(redis_->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        ::setsockopt(redis_->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
      TG_THROW("cannot set a timeout on the Redis socket: ", std::strerror(errno));
    }
  }
};

// Both Gloo stores have the same shape (set, blocking get, check); one wrapper serves both.
template <typename GlooStore>
class WrappedStore final : public Store {
 public:
  WrappedStore(std::string url, std::unique_ptr<GlooStore> inner, std::chrono::milliseconds timeout,
               bool encode_keys)
      : url_(std::move(url)),
        inner_(std::move(inner)),
        timeout_(timeout),
        encode_keys_(encode_keys) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    const std::string k = map(key);
    TG_CHECK(!value.empty(), url_, ": empty value for key '", key,
             "' (values must be non-empty: Gloo's file store cannot read an empty file back)");
    std::lock_guard<std::mutex> lock(mu_);
    TG_CHECK(!checked_exists(k), url_, ": key '", key,
             "' is already set (keys are written once per job: is another rank using the same "
             "rank number, or is this store left over from an earlier job? use a fresh "
             "directory or key prefix)");
    try {
      inner_->set(k, value);
    } catch (const std::exception& e) {
      TG_THROW(url_, ": cannot set key '", key, "': ", e.what());
    }
  }

  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    const std::string k = map(key);
    std::lock_guard<std::mutex> lock(mu_);
    try {
      return inner_->get(k);  // present: Gloo's own wait inside returns at once
    } catch (const std::exception& e) {
      TG_THROW(url_, ": cannot get key '", key, "': ", e.what());
    }
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> mapped;
    mapped.reserve(keys.size());
    for (const auto& key : keys) mapped.push_back(map(key));
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (checked_exists(mapped)) return;
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(kPollInterval);
    }
    std::vector<std::string> missing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!checked_exists(mapped[i])) missing.push_back(keys[i]);
      }
    }
    if (missing.empty()) return;  // arrived while we were giving up
    TG_THROW(url_, ": timed out after ", timeout.count(), " ms waiting for key(s) ",
             list_keys(missing), " (", keys.size() - missing.size(), " of ", keys.size(),
             " present; has every rank started, with the same rendezvous URL?)");
  }

  std::string url() const override { return url_; }
  gloo::rendezvous::Store& gloo_store() override { return *inner_; }

 private:
  std::string map(const std::string& key) const {
    TG_CHECK(!key.empty(), url_, ": empty key (expected a non-empty key name)");
    return encode_keys_ ? encode_file_key(key) : key;
  }
  bool checked_exists(const std::string& k) { return checked_exists(std::vector<std::string>{k}); }
  bool checked_exists(const std::vector<std::string>& ks) {
    try {
      return inner_->check(ks);
    } catch (const std::exception& e) {
      TG_THROW(url_, ": cannot look up key(s) ", list_keys(ks), ": ", e.what());
    }
  }

  const std::string url_;
  std::unique_ptr<GlooStore> inner_;
  const std::chrono::milliseconds timeout_;
  const bool encode_keys_;
  std::mutex mu_;  // Gloo's stores are not thread-safe (one hiredis context, FileStore's key list)
};

std::unique_ptr<Store> open_file_store(const std::string& url, const std::string& dir,
                                       std::chrono::milliseconds timeout) {
  TG_CHECK(!dir.empty(), "rendezvous store URL '", url,
           "' names no directory (expected file://DIR, e.g. file:///shared/rdzv)");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TG_CHECK(!ec && std::filesystem::is_directory(dir), "rendezvous store ", url,
           ": cannot create directory '", dir,
           "': ", ec ? ec.message() : std::string("exists and is not a directory"));
  try {
    return std::make_unique<WrappedStore<CheckedFileStore>>(
        url, std::make_unique<CheckedFileStore>(dir), timeout, true);
  } catch (const std::exception& e) {
    TG_THROW("rendezvous store ", url, ": cannot open directory '", dir, "': ", e.what());
  }
}

std::unique_ptr<Store> open_redis_store(const std::string& url, const std::string& rest,
                                        std::chrono::milliseconds timeout) {
  const char* expected = "expected redis://HOST:PORT, e.g. redis://127.0.0.1:6379";
  TG_CHECK(rest.find_first_of("/@?#") == std::string::npos, "rendezvous store URL '", url,
           "' is not supported: Redis databases, passwords and options are not (", expected, ")");
  std::string host = rest, port_text;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:PORT
    const size_t close = rest.find(']');
    TG_CHECK(close != std::string::npos, "rendezvous store URL '", url,
             "': unterminated '[' in the host (", expected, ")");
    host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    TG_CHECK(after.empty() || after[0] == ':', "rendezvous store URL '", url,
             "': unexpected text after the host (", expected, ")");
    if (!after.empty()) port_text = after.substr(1);
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
    TG_CHECK(host.find(':') == std::string::npos, "rendezvous store URL '", url,
             "': an IPv6 host must be in brackets (", expected, ")");
  }
  TG_CHECK(!host.empty(), "rendezvous store URL '", url, "' names no host (", expected, ")");
  int port = 6379;
  if (!port_text.empty() || rest.find(':') != std::string::npos) {
    bool ok = !port_text.empty() && port_text.size() <= 5 &&
              port_text.find_first_not_of("0123456789") == std::string::npos;
    if (ok) port = std::stoi(port_text);
    TG_CHECK(ok && port >= 1 && port <= 65535, "rendezvous store URL '", url, "': bad port '",
             port_text, "' (", expected, ", port 1..65535)");
  }
  std::unique_ptr<TimedRedisStore> inner;
  try {
    inner = std::make_unique<TimedRedisStore>(host, port, timeout);
    inner->check({"tg-rendezvous-ping"});  // a round trip: the server answers Redis commands
  } catch (const std::exception& e) {
    TG_THROW("rendezvous store ", url, ": cannot reach a Redis server at ", host, ":", port,
             " (is redis-server running there and reachable?): ", e.what());
  }
  return std::make_unique<WrappedStore<TimedRedisStore>>(url, std::move(inner), timeout, false);
}

}  // namespace

std::unique_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout) {
  TG_CHECK(timeout.count() > 0, "rendezvous store ", url, ": timeout must be positive, got ",
           timeout.count(), " ms");
  const std::string file = "file://", redis = "redis://";
  if (url.rfind(file, 0) == 0) return open_file_store(url, url.substr(file.size()), timeout);
  if (url.rfind(redis, 0) == 0) return open_redis_store(url, url.substr(redis.size()), timeout);
  TG_THROW("unknown rendezvous store URL '", url,
           "': expected file://DIR (a directory every rank can reach) or redis://HOST:PORT");
}

}  // namespace tg::comm
