// Rendezvous stores: set/get/wait and timeouts on file:// (a temp directory) and redis:// (a real
// redis-server this test starts on a free 127.0.0.1 port; skipped when redis-server is not
// installed), URL parsing errors, a dead Redis server, and a Gloo group meeting through Redis.
#include "comm/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "nn/core/error.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"
#include "tests/testing/redis_server.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

std::vector<char> bytes_of(const std::string& s) {
  return std::vector<char>(s.begin(), s.end());
}

// The message of the tg::Error `fn` throws; fails the test if it throws nothing or another type.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tg::Error, got another exception: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected tg::Error, nothing was thrown";
  return "";
}

// The behaviour every store URL must have, given a second handle on the same store (as a second
// process would open it).
void check_set_get_wait(Store& a, Store& b) {
  // Binary values (NUL bytes) and keys that are not file names ('/', leading '.', spaces).
  const std::vector<char> value = {'x', '\0', 'y', static_cast<char>(0xff)};
  a.set("job/rank 0/.addr", value);
  EXPECT_EQ(b.get("job/rank 0/.addr"), value);
  EXPECT_EQ(a.get("job/rank 0/.addr"), value);
  const std::string empty = error_of([&] { a.set("empty", {}); });
  EXPECT_NE(empty.find("empty value for key 'empty'"), std::string::npos) << empty;

  // wait() returns once keys set by another rank (thread) later appear.
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    b.set("late/1", bytes_of("one"));
    b.set("late/2", bytes_of("two"));
  });
  a.wait({"late/1", "late/2"});
  EXPECT_EQ(a.get("late/2"), bytes_of("two"));
  writer.join();

  // Keys are written once.
  const std::string twice = error_of([&] { b.set("late/1", bytes_of("again")); });
  EXPECT_NE(twice.find("'late/1' is already set"), std::string::npos) << twice;
  EXPECT_NE(twice.find(a.url()), std::string::npos) << twice;
  EXPECT_EQ(a.get("late/1"), bytes_of("one"));
}

void check_timeouts(Store& s) {
  s.set("here", bytes_of("1"));
  // wait names exactly the missing keys, the URL and how many were present.
  std::string msg = error_of([&] { s.wait({"here", "gone/a", "gone/b"}, 300ms); });
  EXPECT_NE(msg.find("timed out after 300 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'gone/a', 'gone/b'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'here'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 of 3 present"), std::string::npos) << msg;
  EXPECT_NE(msg.find(s.url()), std::string::npos) << msg;
  // get and the one-argument wait use the store's own timeout.
  msg = error_of([&] { s.get("never"); });
  EXPECT_NE(msg.find("'never'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
  msg = error_of([&] { s.wait({"never"}); });
  EXPECT_NE(msg.find("'never'"), std::string::npos) << msg;
}

// The store timeout used where a test wants a get or wait to time out.
constexpr auto kShortTimeout = 500ms;

TEST(FileStore, SetGetWaitAcrossHandles) {
  tg::testing::TempDir dir;
  const std::string url = "file://" + dir.str() + "/rdzv";  // created on open
  auto a = open_store(url, 10s);
  auto b = open_store(url, 10s);
  EXPECT_EQ(a->url(), url);
  check_set_get_wait(*a, *b);
}

TEST(FileStore, TimeoutsNameMissingKeys) {
  tg::testing::TempDir dir;
  auto s = open_store("file://" + dir.str(), kShortTimeout);
  check_timeouts(*s);
}

TEST(FileStore, DirectoryThatCannotBeCreated) {
  tg::testing::TempDir dir;
  tg::testing::write_text(dir / "plain_file", "x");
  const std::string url = "file://" + (dir / "plain_file") + "/sub";
  const std::string msg = error_of([&] { open_store(url, 1s); });
  EXPECT_NE(msg.find(url), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot create directory"), std::string::npos) << msg;
}

TEST(StoreUrl, MalformedUrlsAreRejectedByName) {
  struct Case {
    const char* url;
    const char* expect;
  };
  const Case cases[] = {
      {"ftp://host/dir", "expected file://DIR"},
      {"/just/a/path", "expected file://DIR"},
      {"file://", "names no directory"},
      {"redis://", "names no host"},
      {"redis://:6379", "names no host"},
      {"redis://host:", "bad port ''"},
      {"redis://host:port", "bad port 'port'"},
      {"redis://host:0", "bad port '0'"},
      {"redis://host:65536", "bad port '65536'"},
      {"redis://host:6379/0", "not supported"},
      {"redis://user@host:6379", "a user without a password"},
      {"redis://:@host:6379", "an empty password"},
      {"redis://:pw%zz@host:6379", "a bad %-escape in the password"},
      {"redis://::1:6379", "IPv6 host must be in brackets"},
      {"redis://[::1", "unterminated '['"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of([&] { open_store(c.url, 1s); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.url << ": " << msg;
    EXPECT_NE(msg.find(redact_store_url(c.url)), std::string::npos) << c.url << ": " << msg;
    EXPECT_EQ(msg.find("pw%zz"), std::string::npos) << msg;  // passwords are never printed
  }
  tg::testing::TempDir dir;
  const std::string msg = error_of([&] { open_store("file://" + dir.str(), 0ms); });
  EXPECT_NE(msg.find("timeout must be positive"), std::string::npos) << msg;
}

using tg::testing::free_port;

TEST(StoreUrl, PasswordsAreRedactedForPrinting) {
  EXPECT_EQ(redact_store_url("redis://:s3cret@10.0.0.1:6379"), "redis://:***@10.0.0.1:6379");
  EXPECT_EQ(redact_store_url("redis://alice:s3cret@host"), "redis://alice:***@host");
  EXPECT_EQ(redact_store_url("redis://alice:a@b@host:1"), "redis://alice:***@host:1");
  EXPECT_EQ(redact_store_url("redis://host:6379"), "redis://host:6379");
  EXPECT_EQ(redact_store_url("file:///shared/a:b@c"), "file:///shared/a:b@c");
}

TEST(RedisStore, UnreachableServerIsNamed) {
  const std::string url = "redis://127.0.0.1:" + std::to_string(free_port());
  const std::string msg = error_of([&] { open_store(url, 2s); });
  EXPECT_NE(msg.find(url), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot reach a Redis server"), std::string::npos) << msg;
}

// A redis-server of our own (tests/testing/redis_server.h), stopped in TearDown.
class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tg::testing::have_redis_server()) {
      GTEST_SKIP() << "redis-server is not installed (apt-get install redis-server): the "
                      "redis:// store tests need a real server";
    }
    try {
      server_ = std::make_unique<tg::testing::RedisServer>();
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    url_ = server_->url();
  }
  void TearDown() override { server_.reset(); }
  void stop_server(int signal) { server_->stop(signal); }

  std::unique_ptr<tg::testing::RedisServer> server_;
  std::string url_;
};

TEST_F(RedisStoreTest, SetGetWaitAcrossHandles) {
  auto a = open_store(url_, 10s);
  auto b = open_store(url_, 10s);
  EXPECT_EQ(a->url(), url_);
  check_set_get_wait(*a, *b);
}

TEST_F(RedisStoreTest, TimeoutsNameMissingKeys) {
  auto s = open_store(url_, kShortTimeout);
  check_timeouts(*s);
}

TEST_F(RedisStoreTest, DeadServerThrowsInsteadOfHanging) {
  auto s = open_store(url_, 2s);
  s->set("k", bytes_of("v"));
  stop_server(SIGKILL);
  const std::string msg = error_of([&] { s->get("k2"); });
  EXPECT_NE(msg.find(url_), std::string::npos) << msg;
}

// A server that asks for a password (requirepass) or an ACL user's: the right one opens the store
// (url() shows it as ***), a wrong or missing one is refused in a message that names the server
// but never the password.
class RedisAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tg::testing::have_redis_server()) GTEST_SKIP() << "redis-server is not installed";
  }
  static std::string at(const tg::testing::RedisServer& s, const std::string& userinfo) {
    return "redis://" + userinfo + (userinfo.empty() ? "" : "@") +
           "127.0.0.1:" + std::to_string(s.port());
  }
};

TEST_F(RedisAuthTest, RequirepassServer) {
  const tg::testing::RedisServer server({"--requirepass", "pa:ss@w/rd"}, ":pa%3Ass%40w%2Frd");
  auto a = open_store(server.url(), 10s);
  auto b = open_store(server.url(), 10s);
  EXPECT_EQ(a->url(), at(server, ":***"));
  check_set_get_wait(*a, *b);
  for (const std::string& userinfo : {std::string(":wrong-pass"), std::string()}) {
    const std::string msg = error_of([&] { open_store(at(server, userinfo), 2s); });
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << msg;
    EXPECT_EQ(msg.find("wrong-pass"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NE(
      error_of([&] { open_store(at(server, ":wrong-pass"), 2s); }).find("refused the password"),
      std::string::npos);
}

TEST_F(RedisAuthTest, AclUser) {
  const tg::testing::RedisServer server(
      {"--user", "default", "off", "--user", "alice", "on", ">alice-pw", "~*", "&*", "+@all"},
      "alice:alice-pw");
  auto a = open_store(server.url(), 10s);
  EXPECT_EQ(a->url(), at(server, "alice:***"));
  a->set("k", bytes_of("v"));
  EXPECT_EQ(a->get("k"), bytes_of("v"));
  const std::string msg = error_of([&] { open_store(at(server, "alice:nope-pw"), 2s); });
  EXPECT_NE(msg.find("refused the password of user 'alice'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("nope-pw"), std::string::npos) << msg;
}

// The CI check of issue 5: ranks meet through a real Redis server.
TEST_F(RedisStoreTest, GlooGroupMeetsThroughRedis) {
  constexpr int kRanks = 3;
  std::vector<std::string> errors(kRanks);
  std::vector<std::vector<int64_t>> results(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = open_store(url_, 10s);
        auto comm = make_communicator(gloo_loopback(r, kRanks, 10s), *store, "redis-job");
        std::vector<int64_t> v = {r + 1, 10 * (r + 1)};
        comm->allreduce(v.data(), 2, DType::i64, ReduceOp::sum);
        results[r] = v;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(results[r], (std::vector<int64_t>{6, 60})) << "rank " << r;
  }
}

}  // namespace
}  // namespace tg::comm
