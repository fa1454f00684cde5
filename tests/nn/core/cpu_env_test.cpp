// nn/core/cpu_env.h: use_batch_scheduling switches every thread of the process to SCHED_BATCH,
// the threads that exist (here one started before the call) and, by inheritance, those started
// after; the process is put back on SCHED_OTHER at the end so nothing else sees it.
#include "nn/core/cpu_env.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

namespace tg {
namespace {

// From the kernel (glibc's pthread_getschedparam caches what it read first).
int policy_of_this_thread() {
  return sched_getscheduler(static_cast<pid_t>(syscall(SYS_gettid)));
}

TEST(CpuEnv, BatchSchedulingReachesEveryThreadAndTheirChildren) {
  ASSERT_EQ(policy_of_this_thread(), SCHED_OTHER) << "the test starts under the default policy";
  // A thread started before the call, parked until the call has been made.
  std::mutex mu;
  std::condition_variable cv;
  bool called = false;
  std::atomic<int> earlier_policy{-1};
  std::thread earlier([&] {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return called; });
    earlier_policy = policy_of_this_thread();
  });

  const int switched = use_batch_scheduling();
  {
    std::lock_guard<std::mutex> lk(mu);
    called = true;
  }
  cv.notify_all();
  earlier.join();
  EXPECT_GE(switched, 2);  // this thread and `earlier` at least
  EXPECT_EQ(policy_of_this_thread(), SCHED_BATCH);
  EXPECT_EQ(earlier_policy.load(), SCHED_BATCH);
  int later_policy = -1;
  std::thread later([&] { later_policy = policy_of_this_thread(); });
  later.join();
  EXPECT_EQ(later_policy, SCHED_BATCH);

  const sched_param param{};
  ASSERT_EQ(sched_setscheduler(0, SCHED_OTHER, &param), 0);  // back to the default
  EXPECT_EQ(policy_of_this_thread(), SCHED_OTHER);
}

}  // namespace
}  // namespace tg
