// Rendezvous stores (see comm/store.h): Gloo's FileStore and RedisStore behind tg::comm::Store,
// with our own deadline-bounded wait that names the missing keys, file-name-safe keys for the
// file store, a socket timeout on every Redis command, and every Gloo exception turned into a
// tg::Error naming the URL.
#include "comm/store.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cctype>
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
#include <hiredis/hiredis.h>

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
// (network partition, SIGSTOP) makes the command fail instead of blocking forever (the same as
// hiredis's redisSetTimeout, done on the descriptor), and that authenticates first when the URL
// carries a password: AUTH password (requirepass), or AUTH user password (Redis 6 ACL users).
// Errors never contain the password.
class TimedRedisStore : public gloo::rendezvous::RedisStore {
 public:
  TimedRedisStore(const std::string& host, int port, std::chrono::milliseconds timeout,
                  const std::string& user, const std::string& password)
      : RedisStore(host, port) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
    if (::setsockopt(redis_->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        ::setsockopt(redis_->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
      TG_THROW("cannot set a timeout on the Redis socket: ", std::strerror(errno));
    }
    if (password.empty()) return;
    auto* reply = static_cast<redisReply*>(
        user.empty() ? redisCommand(redis_, "AUTH %b", password.data(), password.size())
                     : redisCommand(redis_, "AUTH %b %b", user.data(), user.size(), password.data(),
                                    password.size()));
    TG_CHECK(reply != nullptr, "no answer to AUTH (", redis_->errstr, ")");
    const bool ok = reply->type == REDIS_REPLY_STATUS;
    std::string why = reply->type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len) : "";
    freeReplyObject(reply);
    TG_CHECK(ok, "the server refused the password",
             user.empty() ? std::string() : " of user '" + user + "'", ": ", why);
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

  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> mapped;
    mapped.reserve(keys.size());
    for (const auto& key : keys) mapped.push_back(map(key));
    std::lock_guard<std::mutex> lock(mu_);
    return checked_exists(mapped);
  }

  std::string url() const override { return url_; }

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

// "user:password" -> "user:***" ("user" alone unchanged).
std::string redact_userinfo(const std::string& info) {
  const size_t colon = info.find(':');
  return colon == std::string::npos ? info : info.substr(0, colon) + ":***";
}

// redis://[[USER]:PASSWORD@]HOST[:PORT]: the userinfo split off, %XX escapes decoded (a password
// with ':' '@' or '/' in it is written %3A %40 %2F). `shown` is the URL to print: the password
// replaced by ***.
struct RedisUserinfo {
  std::string user, password, rest, shown;
};

RedisUserinfo split_userinfo(const std::string& url, const std::string& rest,
                             const char* expected) {
  RedisUserinfo u;
  u.rest = rest;
  u.shown = url;
  const size_t at = rest.rfind('@');
  if (at == std::string::npos) return u;
  const std::string info = rest.substr(0, at);
  u.rest = rest.substr(at + 1);
  u.shown = "redis://" + redact_userinfo(info) + "@" + u.rest;
  const size_t colon = info.find(':');
  TG_CHECK(colon != std::string::npos, "rendezvous store URL '", u.shown,
           "': a user without a password (", expected, ")");
  auto decode = [&](const std::string& s, const char* what) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '%') {
        out += s[i];
        continue;
      }
      const bool ok = i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
                      std::isxdigit(static_cast<unsigned char>(s[i + 2]));
      TG_CHECK(ok, "rendezvous store URL '", u.shown, "': a bad %-escape in the ", what);
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    return out;
  };
  u.user = decode(info.substr(0, colon), "user");
  u.password = decode(info.substr(colon + 1), "password");
  TG_CHECK(!u.password.empty(), "rendezvous store URL '", u.shown, "': an empty password (",
           expected, ")");
  return u;
}

std::unique_ptr<Store> open_redis_store(const std::string& url, const std::string& full_rest,
                                        std::chrono::milliseconds timeout) {
  const char* expected =
      "expected redis://[[USER]:PASSWORD@]HOST[:PORT], e.g. redis://:secret@10.0.0.1:6379";
  const RedisUserinfo auth = split_userinfo(url, full_rest, expected);
  const std::string& rest = auth.rest;
  TG_CHECK(rest.find_first_of("/?#@") == std::string::npos, "rendezvous store URL '", auth.shown,
           "' is not supported: Redis databases and options are not (", expected, ")");
  std::string host = rest, port_text;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:PORT
    const size_t close = rest.find(']');
    TG_CHECK(close != std::string::npos, "rendezvous store URL '", auth.shown,
             "': unterminated '[' in the host (", expected, ")");
    host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    TG_CHECK(after.empty() || after[0] == ':', "rendezvous store URL '", auth.shown,
             "': unexpected text after the host (", expected, ")");
    if (!after.empty()) port_text = after.substr(1);
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
    TG_CHECK(host.find(':') == std::string::npos, "rendezvous store URL '", auth.shown,
             "': an IPv6 host must be in brackets (", expected, ")");
  }
  TG_CHECK(!host.empty(), "rendezvous store URL '", auth.shown, "' names no host (", expected, ")");
  int port = 6379;
  if (!port_text.empty() || rest.find(':') != std::string::npos) {
    bool ok = !port_text.empty() && port_text.size() <= 5 &&
              port_text.find_first_not_of("0123456789") == std::string::npos;
    if (ok) port = std::stoi(port_text);
    TG_CHECK(ok && port >= 1 && port <= 65535, "rendezvous store URL '", auth.shown,
             "': bad port '", port_text, "' (", expected, ", port 1..65535)");
  }
  std::unique_ptr<TimedRedisStore> inner;
  try {
    inner = std::make_unique<TimedRedisStore>(host, port, timeout, auth.user, auth.password);
    inner->check({"tg-rendezvous-ping"});  // a round trip: the server answers Redis commands
  } catch (const std::exception& e) {
    TG_THROW("rendezvous store ", auth.shown, ": cannot reach a Redis server at ", host, ":", port,
             " (is redis-server running there and reachable, and the password right?): ", e.what());
  }
  return std::make_unique<WrappedStore<TimedRedisStore>>(auth.shown, std::move(inner), timeout,
                                                         false);
}

}  // namespace

std::string redact_store_url(const std::string& url) {
  const std::string redis = "redis://";
  if (url.rfind(redis, 0) != 0) return url;
  const size_t at = url.rfind('@');
  if (at == std::string::npos || at < redis.size()) return url;
  return redis + redact_userinfo(url.substr(redis.size(), at - redis.size())) + url.substr(at);
}

std::unique_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout) {
  TG_CHECK(timeout.count() > 0, "rendezvous store ", redact_store_url(url),
           ": timeout must be positive, got ", timeout.count(), " ms");
  const std::string file = "file://", redis = "redis://";
  if (url.rfind(file, 0) == 0) return open_file_store(url, url.substr(file.size()), timeout);
  if (url.rfind(redis, 0) == 0) return open_redis_store(url, url.substr(redis.size()), timeout);
  TG_THROW("unknown rendezvous store URL '", redact_store_url(url),
           "': expected file://DIR (a directory every rank can reach) or "
           "redis://[[USER]:PASSWORD@]HOST[:PORT]");
}

}  // namespace tg::comm
