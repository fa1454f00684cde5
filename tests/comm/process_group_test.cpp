// ProcessGroup's failure path (comm/process_group.h): post_mortem's reports, and the watcher that
// aborts a rank's collectives when another rank raises the job's failure flag. Ranks are threads
// of this process over a file store and loopback, except where a rank must stay connected but
// unable to act (a stopped child process).
#include "comm/process_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "nn/core/error.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

ProcessGroup make_group(int rank, int world, const std::string& url,
                        const std::string& secret_file = "") {
  RankEnv env;
  env.rank = rank;
  env.world_size = world;
  env.rendezvous = url;
  env.source = "launcher";  // loopback only
  GroupOptions options;
  options.backend = Backend::gloo;
  options.timeout = 60.0;  // far beyond what any verdict below waits for
  options.secret_file = secret_file;
  return ProcessGroup(env, "job", options, Device::cpu(), RunIdentity{"config", 0, nullptr});
}

TEST(ProcessGroupFailure, AFailedRankWakesThePeerWaitingOnItAndBothReport) {
  // Rank 0 fails outside any collective (as a rank whose disk is full does) while rank 1 waits
  // in an allreduce for it. Rank 1 must fail at once and report within rank 0's 10 s window:
  // without that it would wait out its 60 s timeout and rank 0 would name it lost.
  tg::testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  std::vector<std::string> final_message(2);
  const auto errors = run_ranks(2, [&](int r) {
    ProcessGroup group = make_group(r, 2, url);
    int32_t x = 1;
    group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum);
    if (r == 0) {
      final_message[0] = group.post_mortem("cannot write checkpoint: No space left on device", 10s);
      return;
    }
    try {
      group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum);
    } catch (const Error& e) {
      final_message[1] = group.post_mortem(e.what(), 10s);
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) EXPECT_EQ(final_message[r].find("lost"), std::string::npos) << r;
  EXPECT_NE(final_message[0].find("rank 0: cannot write checkpoint: No space left on device\n"
                                  "  rank 1 reported: gloo allreduce"),
            std::string::npos)
      << final_message[0];
  EXPECT_NE(final_message[1].find("rank 0 reported: cannot write checkpoint"), std::string::npos)
      << final_message[1];
  auto store = open_store(url, 5s);
  EXPECT_TRUE(store->check({"tg/job/abort"}));
  EXPECT_EQ(store->get("tg/job/abort"), std::vector<char>{'0'});
}

TEST(ProcessGroupFailure, TheWatcherStopsACollectiveWaitingOnAStoppedPeerThatRaisedTheFlag) {
  // Rank 1 is a child process that joins, takes part in one allreduce, raises the job's failure
  // flag and stops itself (SIGSTOP): its connection stays open and nothing it could do closes
  // it. Rank 0 waits in the next allreduce; only its watcher can end that wait before the 60 s
  // timeout, and the error says which ended it.
  tg::testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 1;
    try {
      ProcessGroup group = make_group(1, 2, url);
      int32_t x = 1;
      group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum);
      open_store(url, 5s)->set("tg/job/abort", {'1'});
      ::raise(SIGSTOP);
      code = 0;
    } catch (...) {
    }
    ::_exit(code);  // no gtest or static destructors in the child
  }
  std::string error;
  try {
    ProcessGroup group = make_group(0, 2, url);
    int32_t x = 1;
    group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum);
    error = error_of([&] { group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum); });
  } catch (const std::exception& e) {
    error = std::string("unexpected: ") + e.what();
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(error, "gloo allreduce on rank 0 of 2 stopped: rank 1 reported a failure");
}

TEST(ProcessGroupFailure, WithAJobSecretAFlagFromAWriterWithoutItStopsNothing) {
  // A store writer without the job's secret raises the failure flag: it does not verify, so the
  // watchers ignore it and the ranks' next collectives (a second after it, five looks) succeed.
  tg::testing::TempDir dir;
  const std::string url = "file://" + dir.str() + "/rdv";
  const std::string secret = dir / "secret";
  tg::testing::write_text(secret, "0123456789abcdef0123456789abcdef0123456789abcdef\n");
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  const auto errors = run_ranks(2, [&](int r) {
    ProcessGroup group = make_group(r, 2, url, secret);
    int32_t x = 1;
    group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum);
    if (r == 0) open_store(url, 5s)->set("tg/job/abort", {'1'});
    std::this_thread::sleep_for(1s);
    x = 1;
    group.comm().allreduce(&x, 1, DType::i32, ReduceOp::sum);
    EXPECT_EQ(x, 2);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace tg::comm
