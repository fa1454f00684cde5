// Rank discovery (flags, launcher variables, Slurm, Open MPI, every error) and the local launcher
// (comm/launch.h), the latter driven with /bin/sh -c scripts as ranks. Timing bounds are generous
// (a loaded CI machine): "returns within 20 s" where the work itself takes a second or two.
#include "comm/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nn/core/error.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::comm {
namespace {

using tg::testing::expect_error_with;
using tg::testing::TempDir;

// Upper bound for a launch whose ranks take a second or two (grace periods included).
constexpr double kGenerousSeconds = 20.0;

// ---------------------------------------------------------------------------------------------
// discover_rank
// ---------------------------------------------------------------------------------------------

const std::string kCwd = "/shared/run";

RankFlags flags(std::optional<int> rank, std::optional<int> world,
                std::optional<std::string> rendezvous = std::nullopt) {
  return RankFlags{rank, world, rendezvous};
}

TEST(DiscoverRank, NothingSetIsOneProcess) {
  RankEnv r = discover_rank({}, {{"HOME", "/root"}}, kCwd);
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.rendezvous, "");
  EXPECT_EQ(r.source, "default");
  // A world of one keeps a rendezvous it is given, but needs none.
  r = discover_rank({}, {{"TG_RENDEZVOUS", "redis://h:1"}}, kCwd);
  EXPECT_EQ(r.rendezvous, "redis://h:1");
}

TEST(DiscoverRank, FlagsWinOverSlurmAndMpi) {
  const EnvMap env = {{"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "8"},
                      {"SLURM_JOB_ID", "812"},
                      {"OMPI_COMM_WORLD_RANK", "0"},
                      {"OMPI_COMM_WORLD_SIZE", "8"}};
  const RankEnv r = discover_rank(flags(2, 4, "redis://10.0.0.1:6379"), env, kCwd);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.rendezvous, "redis://10.0.0.1:6379");
  EXPECT_EQ(r.source, "flags");
}

TEST(DiscoverRank, FlagsTakeTheRendezvousFromTheEnvironment) {
  const RankEnv r = discover_rank(flags(1, 2), {{"TG_RENDEZVOUS", "file:///nfs/job"}}, kCwd);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.rendezvous, "file:///nfs/job");
  EXPECT_EQ(r.source, "flags");
  // --rendezvous beats TG_RENDEZVOUS.
  EXPECT_EQ(
      discover_rank(flags(1, 2, "redis://h:2"), {{"TG_RENDEZVOUS", "file:///x"}}, kCwd).rendezvous,
      "redis://h:2");
}

TEST(DiscoverRank, FlagsAgreeingWithTheLauncherAreFine) {
  const EnvMap env = {{"TG_RANK", "1"}, {"TG_WORLD_SIZE", "2"}, {"TG_RENDEZVOUS", "file:///t"}};
  const RankEnv r = discover_rank(flags(1, 2), env, kCwd);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.source, "flags");
  EXPECT_EQ(r.rendezvous, "file:///t");
}

TEST(DiscoverRank, LauncherVariablesWinOverSlurmAndMpi) {
  const EnvMap env = {{"TG_RANK", "2"},
                      {"TG_WORLD_SIZE", "3"},
                      {"TG_RENDEZVOUS", "file:///tmp/tg-rendezvous-abc"},
                      {"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "1"},
                      {"OMPI_COMM_WORLD_RANK", "5"},
                      {"OMPI_COMM_WORLD_SIZE", "6"}};
  const RankEnv r = discover_rank({}, env, kCwd);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 3);
  EXPECT_EQ(r.rendezvous, "file:///tmp/tg-rendezvous-abc");
  EXPECT_EQ(r.source, "launcher");
}

TEST(DiscoverRank, SlurmDerivesAFileStorePerJobStep) {
  EnvMap env = {{"SLURM_PROCID", "3"},
                {"SLURM_NTASKS", "8"},
                {"SLURM_JOB_ID", "812"},
                {"SLURM_STEP_ID", "0"}};
  RankEnv r = discover_rank({}, env, "/shared/run/");
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.source, "slurm");
  EXPECT_EQ(r.rendezvous, "file:///shared/run/.tg-rendezvous-slurm-812.0");
  env.erase("SLURM_STEP_ID");
  EXPECT_EQ(discover_rank({}, env, "/").rendezvous, "file:///.tg-rendezvous-slurm-812");
  // An explicit rendezvous replaces the derived one.
  env["TG_RENDEZVOUS"] = "redis://head:6379";
  EXPECT_EQ(discover_rank({}, env, kCwd).rendezvous, "redis://head:6379");
  EXPECT_EQ(discover_rank(flags(std::nullopt, std::nullopt, "file:///a"), env, kCwd).rendezvous,
            "file:///a");
}

TEST(DiscoverRank, OpenMpiDerivesAFileStoreFromItsJobId) {
  EnvMap env = {{"OMPI_COMM_WORLD_RANK", "1"},
                {"OMPI_COMM_WORLD_SIZE", "4"},
                {"PMIX_NAMESPACE", "prterun-node7-4242@1"},
                {"OMPI_MCA_ess_base_jobid", "99"}};
  RankEnv r = discover_rank({}, env, kCwd);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.source, "mpi");
  EXPECT_EQ(r.rendezvous, "file:///shared/run/.tg-rendezvous-mpi-prterun-node7-4242_1");
  env.erase("PMIX_NAMESPACE");
  EXPECT_EQ(discover_rank({}, env, kCwd).rendezvous, "file:///shared/run/.tg-rendezvous-mpi-99");
  env.erase("OMPI_MCA_ess_base_jobid");
  env["OMPI_MCA_orte_ess_jobid"] = "1234567";
  EXPECT_EQ(discover_rank({}, env, kCwd).rendezvous,
            "file:///shared/run/.tg-rendezvous-mpi-1234567");
}

TEST(DiscoverRank, SlurmAndMpiThatAgreeAreOpenMpi) {
  const EnvMap env = {{"SLURM_PROCID", "2"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_JOB_ID", "77"},
                      {"OMPI_COMM_WORLD_RANK", "2"},
                      {"OMPI_COMM_WORLD_SIZE", "4"}};
  const RankEnv r = discover_rank({}, env, kCwd);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.source, "mpi");
  // No Open MPI job id: the Slurm job names the store.
  EXPECT_EQ(r.rendezvous, "file:///shared/run/.tg-rendezvous-mpi-77");
}

TEST(DiscoverRank, WorldOfOneNeedsNoRendezvous) {
  const RankEnv r = discover_rank({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}, kCwd);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.source, "slurm");
  EXPECT_EQ(r.rendezvous, "");
  EXPECT_EQ(discover_rank(flags(0, 1), {}, kCwd).rendezvous, "");
}

TEST(DiscoverRank, EmptyVariablesCountAsUnset) {
  const EnvMap env = {{"TG_RANK", ""},       {"TG_WORLD_SIZE", ""}, {"TG_RENDEZVOUS", ""},
                      {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "5"}};
  const RankEnv r = discover_rank({}, env, kCwd);
  EXPECT_EQ(r.source, "slurm");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.rendezvous, "file:///shared/run/.tg-rendezvous-slurm-5");
}

TEST(DiscoverRank, HalfSpecifiedPairsAreErrors) {
  expect_error_with([] { discover_rank(flags(1, std::nullopt), {}, kCwd); },
                    {"--rank 1 was given without --world-size"});
  expect_error_with([] { discover_rank(flags(std::nullopt, 4), {}, kCwd); },
                    {"--world-size 4 was given without --rank"});
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RANK", "1"}}, kCwd);
      },
      {"TG_RANK=1 is set but TG_WORLD_SIZE is not"});
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_WORLD_SIZE", "2"}}, kCwd);
      },
      {"TG_WORLD_SIZE=2 is set but TG_RANK is not"});
  expect_error_with(
      [] {
        discover_rank({}, {{"SLURM_PROCID", "0"}}, kCwd);
      },
      {"SLURM_PROCID=0 is set but SLURM_NTASKS is not", "Slurm"});
  expect_error_with(
      [] {
        discover_rank({}, {{"OMPI_COMM_WORLD_SIZE", "2"}}, kCwd);
      },
      {"OMPI_COMM_WORLD_SIZE=2 is set but OMPI_COMM_WORLD_RANK is not", "Open MPI"});
}

TEST(DiscoverRank, NonNumericValuesAreErrors) {
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RANK", "abc"}, {"TG_WORLD_SIZE", "2"}}, kCwd);
      },
      {"TG_RANK='abc' is not a non-negative integer"});
  expect_error_with(
      [] {
        discover_rank({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4x"}}, kCwd);
      },
      {"SLURM_NTASKS='4x' is not a non-negative integer"});
  expect_error_with(
      [] {
        discover_rank({}, {{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, kCwd);
      },
      {"OMPI_COMM_WORLD_RANK='-1' is not a non-negative integer"});
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RANK", " 1"}, {"TG_WORLD_SIZE", "2"}}, kCwd);
      },
      {"TG_RANK=' 1'"});
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RANK", "0"}, {"TG_WORLD_SIZE", "99999999999"}}, kCwd);
      },
      {"TG_WORLD_SIZE='99999999999' is not a non-negative integer"});
}

TEST(DiscoverRank, OutOfRangeValuesAreErrors) {
  expect_error_with([] { discover_rank(flags(4, 4), {}, kCwd); },
                    {"--rank 4 --world-size 4", "rank 4 is out of range", "0 <= rank < 4"});
  expect_error_with([] { discover_rank(flags(-1, 4), {}, kCwd); }, {"rank -1 is out of range"});
  expect_error_with([] { discover_rank(flags(0, 0), {}, kCwd); },
                    {"world size 0 is invalid", "at least 1"});
  expect_error_with(
      [] {
        discover_rank({}, {{"SLURM_PROCID", "8"}, {"SLURM_NTASKS", "8"}}, kCwd);
      },
      {"SLURM_PROCID=8, SLURM_NTASKS=8", "rank 8 is out of range"});
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RANK", "0"}, {"TG_WORLD_SIZE", "0"}}, kCwd);
      },
      {"TG_WORLD_SIZE=0", "world size 0 is invalid"});
}

TEST(DiscoverRank, ConflictingSourcesAreErrors) {
  expect_error_with(
      [] {
        discover_rank({},
                      {{"SLURM_PROCID", "0"},
                       {"SLURM_NTASKS", "2"},
                       {"OMPI_COMM_WORLD_RANK", "3"},
                       {"OMPI_COMM_WORLD_SIZE", "4"}},
                      kCwd);
      },
      {"conflicting rank sources", "SLURM_PROCID=0, SLURM_NTASKS=2",
       "OMPI_COMM_WORLD_RANK=3, OMPI_COMM_WORLD_SIZE=4", "--rank/--world-size"});
  expect_error_with(
      [] {
        discover_rank(flags(0, 2, "file:///x"), {{"TG_RANK", "1"}, {"TG_WORLD_SIZE", "2"}}, kCwd);
      },
      {"conflicting rank sources", "--rank 0 --world-size 2", "TG_RANK=1, TG_WORLD_SIZE=2",
       "--nproc"});
}

TEST(DiscoverRank, MissingRendezvousIsAnError) {
  expect_error_with(
      [] { discover_rank(flags(0, 2), {}, kCwd); },
      {"world size 2 (from --world-size) needs a rendezvous", "--rendezvous", "TG_RENDEZVOUS"});
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RANK", "0"}, {"TG_WORLD_SIZE", "2"}}, kCwd);
      },
      {"world size 2 (from TG_WORLD_SIZE) needs a rendezvous"});
  expect_error_with(
      [] {
        discover_rank({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, kCwd);
      },
      {"(from Slurm) needs a rendezvous", "SLURM_JOB_ID is not set"});
  expect_error_with(
      [] {
        discover_rank({}, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, kCwd);
      },
      {"(from Open MPI) needs a rendezvous", "PMIX_NAMESPACE"});
  expect_error_with(
      [] {
        discover_rank({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "1"}},
                      "relative/dir");
      },
      {"'relative/dir' is not an absolute path"});
}

TEST(DiscoverRank, MalformedRendezvousIsAnError) {
  for (const std::string bad : {"foo", "://x", "file://", "1abc://x", "/tmp/x", "re dis://h"}) {
    SCOPED_TRACE(bad);
    expect_error_with([&] { discover_rank(flags(0, 2, bad), {}, kCwd); },
                      {"--rendezvous '" + bad + "' is not a store URL", "file:///"});
  }
  expect_error_with(
      [] {
        discover_rank({}, {{"TG_RENDEZVOUS", "/tmp/x"}}, kCwd);
      },
      {"TG_RENDEZVOUS '/tmp/x' is not a store URL"});
}

TEST(DiscoverRank, Describe) {
  EXPECT_EQ(describe({1, 4, "file:///x", "slurm"}),
            "rank 1 of 4 (from slurm), rendezvous file:///x");
  EXPECT_EQ(describe({0, 1, "", "default"}), "rank 0 of 1 (from default)");
}

TEST(DiscoverRank, ProcessEnvironmentOverload) {
  ::setenv("TG_TEST_LAUNCH_MARKER", "42", 1);
  EXPECT_EQ(current_environment().at("TG_TEST_LAUNCH_MARKER"), "42");
  ::unsetenv("TG_TEST_LAUNCH_MARKER");
  // Whatever this process's environment is, explicit flags decide.
  const RankEnv r = discover_rank(flags(0, 1));
  EXPECT_EQ(r.source, "flags");
}

// ---------------------------------------------------------------------------------------------
// launch_local
// ---------------------------------------------------------------------------------------------

struct LaunchRun {
  int status = -1;
  std::string out, err;
  double seconds = 0;
};

// Runs `script` under /bin/sh -c as `nproc` ranks, capturing the launcher's two outputs in files.
// `during`, if given, runs on a second thread while the launch runs, with the stdout file's path.
LaunchRun run_ranks(int nproc, const std::string& script, LaunchOptions options = {},
                    const std::function<void(const std::string& out_path)>& during = {}) {
  TempDir io;
  const std::string out_path = io / "out", err_path = io / "err";
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(out_fd, 0);
  EXPECT_GE(err_fd, 0);
  options.out_fd = out_fd;
  options.err_fd = err_fd;
  std::thread helper;
  if (during) helper = std::thread([&] { during(out_path); });
  LaunchRun run;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run.status = launch_local(nproc, {"/bin/sh", "-c", script}, options);
  } catch (...) {
    if (helper.joinable()) helper.join();
    ::close(out_fd);
    ::close(err_fd);
    throw;
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (helper.joinable()) helper.join();
  ::close(out_fd);
  ::close(err_fd);
  run.out = tg::testing::read_text(out_path);
  run.err = tg::testing::read_text(err_path);
  return run;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// The lines of `text` that carry rank r's prefix, prefix removed, in order.
std::vector<std::string> rank_lines(const std::string& text, int r) {
  const std::string prefix = "[rank " + std::to_string(r) + "] ";
  std::vector<std::string> out;
  for (const std::string& line : split_lines(text))
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  return out;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Waits until the file at `path` holds `count` occurrences of `what` (or kGenerousSeconds pass).
void wait_for_text(const std::string& path, const std::string& what, int count) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kGenerousSeconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = tg::testing::read_text(path);
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    if (n >= count) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Whether process `pid` still runs (a zombie left to a non-reaping init counts as gone).
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

bool dir_is_empty(const std::string& dir) {
  return std::filesystem::is_empty(std::filesystem::path(dir));
}

TEST(LaunchLocal, EachRankSeesItsRankWorldSizeAndRendezvous) {
  TempDir parent;
  // Values inherited from the caller's environment are replaced, not duplicated.
  ::setenv("TG_RANK", "99", 1);
  ::setenv("TG_RENDEZVOUS", "file:///stale", 1);
  LaunchOptions opt;
  opt.rendezvous_parent = parent.str();
  const LaunchRun run = run_ranks(3,
                                  "echo \"rank=$TG_RANK world=$TG_WORLD_SIZE url=$TG_RENDEZVOUS\"\n"
                                  "[ -d \"${TG_RENDEZVOUS#file://}\" ] && echo dir-exists\n"
                                  "if read x; then echo \"stdin=$x\"; else echo stdin-empty; fi\n",
                                  opt);
  ::unsetenv("TG_RANK");
  ::unsetenv("TG_RENDEZVOUS");
  ASSERT_EQ(run.status, 0) << run.err;
  std::string url;
  for (int r = 0; r < 3; ++r) {
    const std::vector<std::string> lines = rank_lines(run.out, r);
    ASSERT_EQ(lines.size(), 3u) << run.out;
    const std::string head =
        "rank=" + std::to_string(r) + " world=3 url=file://" + parent.str() + "/tg-rendezvous-";
    EXPECT_EQ(lines[0].rfind(head, 0), 0u) << lines[0];
    if (r == 0) url = lines[0].substr(lines[0].find("url=") + 4);
    EXPECT_EQ(lines[0].substr(lines[0].find("url=") + 4), url) << "every rank shares one store";
    EXPECT_EQ(lines[1], "dir-exists");
    EXPECT_EQ(lines[2], "stdin-empty");
  }
  EXPECT_EQ(split_lines(run.out).size(), 9u) << run.out;
  EXPECT_TRUE(dir_is_empty(parent.str())) << "the rendezvous directory is removed afterwards";
  EXPECT_EQ(run.err, "");
}

TEST(LaunchLocal, PrefixesWholeLinesOnBothStreams) {
  const size_t kLong = 200000;  // several pipe buffers: arrives in many reads
  const LaunchRun run = run_ranks(2,
                                  "printf 'part-'; sleep 0.3; printf 'ial\\n'\n"
                                  "echo \"to-stderr $TG_RANK\" >&2\n"
                                  "head -c " +
                                      std::to_string(kLong) +
                                      " /dev/zero | tr '\\0' x; echo\n"
                                      "printf 'err-without-newline' >&2\n"
                                      "printf 'no-newline-at-end'\n");
  ASSERT_EQ(run.status, 0) << run.err;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<std::string> out = rank_lines(run.out, r);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0], "part-ial");  // one line across two writes 0.3 s apart
    EXPECT_EQ(out[1], std::string(kLong, 'x'));
    EXPECT_EQ(out[2], "no-newline-at-end");
    const std::vector<std::string> err = rank_lines(run.err, r);
    ASSERT_EQ(err.size(), 2u) << run.err;
    EXPECT_EQ(err[0], "to-stderr " + std::to_string(r));
    EXPECT_EQ(err[1], "err-without-newline");
  }
  // Nothing unprefixed, and every line (the partial last ones too) ends in a newline.
  EXPECT_EQ(split_lines(run.out).size(), 6u);
  EXPECT_EQ(split_lines(run.err).size(), 4u);
  EXPECT_EQ(run.out.back(), '\n');
  EXPECT_EQ(run.err.back(), '\n');
}

TEST(LaunchLocal, ManyLinesFromSeveralRanksNeverInterleave) {
  const int kLines = 2000;
  const std::string fill(120, 'f');
  const LaunchRun run =
      run_ranks(3, "i=0; while [ $i -lt " + std::to_string(kLines) +
                       " ]; do echo \"$TG_RANK:$i:" + fill + "\"; i=$((i+1)); done\n");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> all = split_lines(run.out);
  EXPECT_EQ(all.size(), 3u * kLines);
  for (int r = 0; r < 3; ++r) {
    const std::vector<std::string> lines = rank_lines(run.out, r);
    ASSERT_EQ(lines.size(), static_cast<size_t>(kLines));
    for (int i = 0; i < kLines; ++i) {
      ASSERT_EQ(lines[static_cast<size_t>(i)],
                std::to_string(r) + ":" + std::to_string(i) + ":" + fill);
    }
  }
}

TEST(LaunchLocal, AllRanksSucceedingReturnsZero) {
  const LaunchRun run = run_ranks(4, "exit 0");
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "");
}

TEST(LaunchLocal, FirstFailingRankStatusIsReturnedAndTheOthersAreStopped) {
  TempDir dir;
  const std::string marker = dir / "rank0-finished";
  LaunchOptions opt;
  opt.grace_seconds = 1.0;
  opt.term_seconds = 1.0;
  const LaunchRun run =
      run_ranks(2,
                "if [ \"$TG_RANK\" = 1 ]; then echo 'rank one fails' >&2; exit 3; fi\n"
                "sleep 60; touch " +
                    marker + "\n",
                opt);
  EXPECT_EQ(run.status, 3);
  EXPECT_LT(run.seconds, kGenerousSeconds);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "rank 0 was left to finish";
  EXPECT_TRUE(contains(run.err, "[rank 1] rank one fails\n")) << run.err;
  EXPECT_TRUE(
      contains(run.err, "[launch] rank 1 exited with status 3; waiting up to 1 s for ranks 0"))
      << run.err;
  EXPECT_TRUE(contains(run.err, "sending SIGTERM")) << run.err;
  EXPECT_TRUE(contains(run.err,
                       "[launch] rank 1 failed first (exited with status 3); exiting with "
                       "status 3"))
      << run.err;
  // The failure message comes after the rank's own last words.
  EXPECT_LT(run.err.find("rank one fails"), run.err.find("[launch] rank 1 exited"));
}

TEST(LaunchLocal, OtherRanksMayFinishWithinTheGracePeriod) {
  LaunchOptions opt;
  opt.grace_seconds = 15.0;
  const LaunchRun run = run_ranks(2,
                                  "if [ \"$TG_RANK\" = 0 ]; then exit 2; fi\n"
                                  "sleep 0.5; echo 'rank one saw the loss'; exit 1\n",
                                  opt);
  EXPECT_EQ(run.status, 2);
  EXPECT_LT(run.seconds, 10.0) << "the launcher returns when the last rank exits, not at the grace";
  EXPECT_TRUE(contains(run.out, "[rank 1] rank one saw the loss\n")) << run.out;
  EXPECT_FALSE(contains(run.err, "SIGTERM")) << run.err;
  EXPECT_TRUE(contains(run.err, "rank 0 failed first (exited with status 2)")) << run.err;
}

TEST(LaunchLocal, TheEarliestFailureWinsOverLaterOnes) {
  LaunchOptions opt;
  opt.grace_seconds = 15.0;
  const LaunchRun run = run_ranks(3,
                                  "case $TG_RANK in\n"
                                  "  2) exit 5 ;;\n"
                                  "  0) sleep 1; exit 4 ;;\n"
                                  "  *) exit 0 ;;\n"
                                  "esac\n",
                                  opt);
  EXPECT_EQ(run.status, 5);
  EXPECT_TRUE(contains(run.err, "rank 2 failed first (exited with status 5)")) << run.err;
}

TEST(LaunchLocal, SignalDeathGives128PlusTheSignal) {
  LaunchRun run = run_ranks(1, "kill -9 $$");
  EXPECT_EQ(run.status, 137);
  EXPECT_TRUE(contains(run.err, "rank 0 failed first (was killed by signal 9 (SIGKILL))"))
      << run.err;
  LaunchOptions opt;
  opt.grace_seconds = 15.0;
  run = run_ranks(2, "if [ \"$TG_RANK\" = 1 ]; then kill -SEGV $$; fi; sleep 0.3", opt);
  EXPECT_EQ(run.status, 128 + SIGSEGV);
  EXPECT_TRUE(contains(run.err, "rank 1 was killed by signal 11 (SIGSEGV)")) << run.err;
}

TEST(LaunchLocal, InterruptIsForwardedToEveryRank) {
  LaunchOptions opt;
  opt.grace_seconds = 15.0;
  const LaunchRun run =
      run_ranks(2,
                "trap 'echo \"got-int $TG_RANK\"; exit 0' INT\n"
                "echo ready\n"
                "while :; do sleep 0.1; done\n",
                opt, [](const std::string& out) {
                  wait_for_text(out, "ready", 2);
                  ::kill(::getpid(), SIGINT);  // as a terminal's Ctrl-C would reach the launcher
                });
  EXPECT_EQ(run.status, 128 + SIGINT) << "interrupted, though every rank exited 0";
  EXPECT_LT(run.seconds, kGenerousSeconds);
  EXPECT_TRUE(contains(run.out, "[rank 0] got-int 0\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "[rank 1] got-int 1\n")) << run.out;
  EXPECT_TRUE(contains(run.err, "[launch] got SIGINT; forwarding it to ranks 0, 1")) << run.err;
  EXPECT_FALSE(contains(run.err, "SIGTERM")) << run.err;
  // The launcher's handlers are gone again.
  struct sigaction now {};
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(LaunchLocal, RanksThatIgnoreTheInterruptAreTerminatedThenKilled) {
  LaunchOptions opt;
  opt.grace_seconds = 0.5;
  opt.term_seconds = 0.5;
  const LaunchRun run = run_ranks(2,
                                  "trap '' INT TERM\n"
                                  "echo ready\n"
                                  "while :; do sleep 0.1; done\n",
                                  opt, [](const std::string& out) {
                                    wait_for_text(out, "ready", 2);
                                    ::kill(::getpid(), SIGTERM);
                                  });
  EXPECT_EQ(run.status, 128 + SIGTERM);
  EXPECT_LT(run.seconds, kGenerousSeconds);
  EXPECT_TRUE(contains(run.err, "got SIGTERM; forwarding it")) << run.err;
  EXPECT_TRUE(contains(run.err, "sending SIGTERM")) << run.err;
  EXPECT_TRUE(contains(run.err, "sending SIGKILL")) << run.err;
}

TEST(LaunchLocal, SecondInterruptKillsAtOnce) {
  LaunchOptions opt;
  opt.grace_seconds = 600.0;  // only the second Ctrl-C can end this run in time
  const LaunchRun run = run_ranks(2,
                                  "trap '' INT\n"
                                  "echo ready\n"
                                  "while :; do sleep 0.1; done\n",
                                  opt, [](const std::string& out) {
                                    wait_for_text(out, "ready", 2);
                                    ::kill(::getpid(), SIGINT);
                                    std::this_thread::sleep_for(std::chrono::milliseconds(300));
                                    ::kill(::getpid(), SIGINT);
                                  });
  EXPECT_EQ(run.status, 128 + SIGINT);
  EXPECT_LT(run.seconds, kGenerousSeconds);
  EXPECT_TRUE(contains(run.err, "got SIGINT again; killing ranks 0, 1")) << run.err;
}

TEST(LaunchLocal, NoHelperProcessOutlivesItsRank) {
  TempDir dir;
  LaunchOptions opt;
  opt.grace_seconds = 0.5;
  opt.term_seconds = 0.5;
  // Each rank leaves a background sleep that holds its output pipe; rank 1 then fails while
  // rank 0 keeps running, so both the reaping and the stopping paths are exercised.
  const LaunchRun run = run_ranks(2,
                                  "sleep 300 & echo $! > " + dir.str() +
                                      "/helper.$TG_RANK\n"
                                      "if [ \"$TG_RANK\" = 1 ]; then exit 1; fi\n"
                                      "sleep 300\n",
                                  opt);
  EXPECT_EQ(run.status, 1);
  EXPECT_LT(run.seconds, kGenerousSeconds);
  for (int r = 0; r < 2; ++r) {
    const std::string text = tg::testing::read_text(dir / ("helper." + std::to_string(r)));
    ASSERT_FALSE(text.empty());
    const pid_t helper = static_cast<pid_t>(std::stol(text));
    // Reparented orphans are reaped by init asynchronously: allow it a moment.
    for (int i = 0; i < 100 && process_alive(helper); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(process_alive(helper)) << "rank " << r << "'s helper " << helper;
  }
}

TEST(LaunchLocal, RanksDieWithAKilledLauncher) {
  TempDir dir;
  // The launcher runs in a forked copy of this test, which is then killed with SIGKILL: no handler
  // runs, so only PR_SET_PDEATHSIG can take the ranks down. `exec` makes each rank the sleep.
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    int rc = 100;
    try {
      LaunchOptions opt;
      opt.out_fd = opt.err_fd = ::open("/dev/null", O_WRONLY);
      rc = launch_local(2,
                        {"/bin/sh", "-c",
                         "echo $$ > " + dir.str() + "/pid.$TG_RANK.tmp; mv " + dir.str() +
                             "/pid.$TG_RANK.tmp " + dir.str() + "/pid.$TG_RANK; exec sleep 300"},
                        opt);
    } catch (...) {
    }
    ::_exit(rc);
  }
  std::vector<pid_t> ranks;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kGenerousSeconds);
  for (int r = 0; r < 2; ++r) {
    const std::string file = dir / ("pid." + std::to_string(r));
    while (!std::filesystem::exists(file) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string text = tg::testing::read_text(file);
    if (!text.empty()) ranks.push_back(static_cast<pid_t>(std::stol(text)));
  }
  ::kill(launcher, SIGKILL);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start";
  for (pid_t pid : ranks) {
    for (int i = 0; i < 250 && process_alive(pid); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(process_alive(pid)) << "rank process " << pid << " outlived its launcher";
    if (process_alive(pid)) ::kill(pid, SIGKILL);
  }
}

TEST(LaunchLocal, AProgramThatCannotRunIsAnError) {
  TempDir parent;
  LaunchOptions opt;
  opt.rendezvous_parent = parent.str();
  expect_error_with([&] { launch_local(2, {"/nonexistent/terngrad"}, opt); },
                    {"cannot execute '/nonexistent/terngrad'", "No such file"});
  expect_error_with([&] { launch_local(2, {"tg-no-such-program-xyz"}, opt); },
                    {"cannot execute 'tg-no-such-program-xyz': not found in PATH"});
  // Executable but not a program: execve itself fails in the child, after fork.
  TempDir dir;
  const std::string junk = dir / "junk";
  tg::testing::write_text(junk, "not an executable format\n");
  ::chmod(junk.c_str(), 0755);
  expect_error_with([&] { launch_local(2, {junk}, opt); },
                    {"cannot execute '" + junk + "' for rank 0", "format"});
  EXPECT_TRUE(dir_is_empty(parent.str())) << "the rendezvous directory is removed on errors too";
}

TEST(LaunchLocal, InvalidArgumentsAreErrors) {
  expect_error_with([] { launch_local(0, {"/bin/true"}); }, {"nproc 0 is invalid"});
  expect_error_with([] { launch_local(1, {}); }, {"command line is empty"});
  LaunchOptions opt;
  opt.grace_seconds = -1;
  expect_error_with([&] { launch_local(1, {"/bin/true"}, opt); }, {"must be non-negative"});
}

// ---------------------------------------------------------------------------------------------
// Restarts
// ---------------------------------------------------------------------------------------------

TEST(LaunchLocal, AFailedRankRestartsEveryRankWithTheRestartArguments) {
  // Rank 1 fails on the first start; rank 0 would sleep a minute (a rank waiting on a lost peer).
  // The restart kills rank 0 after the short grace, and every rank starts again with --resume
  // and TG_RESTARTS=1, in a fresh rendezvous directory.
  TempDir parent;
  LaunchOptions opt;
  opt.rendezvous_parent = parent.str();
  opt.max_restarts = 2;
  opt.restart_args = {"--resume"};
  opt.restart_grace_seconds = 0.5;
  const LaunchRun run = run_ranks(
      2,
      "echo \"start $TG_RESTARTS args=${0##*/} url=$TG_RENDEZVOUS\"\n"
      "if [ \"$TG_RESTARTS\" = 0 ]; then\n"
      "  if [ \"$TG_RANK\" = 1 ]; then echo 'terngrad: error: disk on fire' >&2; exit 4; fi\n"
      "  sleep 60\n"
      "fi\n",
      opt);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_LT(run.seconds, kGenerousSeconds) << "rank 0 was not stopped at once";
  for (int r = 0; r < 2; ++r) {
    const std::vector<std::string> lines = rank_lines(run.out, r);
    ASSERT_EQ(lines.size(), 2u) << run.out;
    // sh -c takes the first argument after the script as $0: the added --resume.
    EXPECT_EQ(lines[0].rfind("start 0 args=sh url=", 0), 0u) << lines[0];
    EXPECT_EQ(lines[1].rfind("start 1 args=--resume url=", 0), 0u) << lines[1];
    EXPECT_NE(lines[0].substr(lines[0].find("url=")), lines[1].substr(lines[1].find("url=")))
        << "each start gets its own rendezvous store";
  }
  EXPECT_TRUE(contains(run.err,
                       "[launch] rank 1 exited with status 4; stopping ranks 0 to "
                       "restart"))
      << run.err;
  EXPECT_TRUE(contains(run.err,
                       "[launch] restart 1 of 2 after rank 1 exited with status 4: terngrad: "
                       "error: disk on fire; starting ranks 0-1 again with --resume\n"))
      << run.err;
  EXPECT_FALSE(contains(run.err, "SIGTERM")) << "a restart kills, it does not ask" << run.err;
  EXPECT_TRUE(dir_is_empty(parent.str())) << "every start's rendezvous directory is removed";
}

TEST(LaunchLocal, RestartsStopAtTheLimitWithTheLastFailure) {
  LaunchOptions opt;
  opt.max_restarts = 2;
  opt.restart_args = {"--resume"};
  opt.restart_grace_seconds = 0.2;
  opt.grace_seconds = 0.5;
  opt.term_seconds = 0.5;
  const LaunchRun run = run_ranks(
      2,
      "echo \"start $TG_RESTARTS ${0##*/}\"; if [ \"$TG_RANK\" = 0 ]; then exit 5; fi; sleep 60\n",
      opt);
  EXPECT_EQ(run.status, 5);
  EXPECT_LT(run.seconds, kGenerousSeconds);
  const std::vector<std::string> lines = rank_lines(run.out, 0);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_EQ(lines[0], "start 0 sh");
  EXPECT_EQ(lines[1], "start 1 --resume");
  EXPECT_EQ(lines[2], "start 2 --resume") << "the restart argument is added once";
  EXPECT_TRUE(contains(run.err, "restart 2 of 2 after rank 0 exited with status 5;")) << run.err;
  EXPECT_FALSE(contains(run.err, "restart 3")) << run.err;
  // The last start stops its ranks as a launch without restarts does.
  EXPECT_TRUE(contains(run.err,
                       "rank 0 failed first (exited with status 5); exiting with status "
                       "5"))
      << run.err;
}

TEST(LaunchLocal, ASignalDeathIsACauseToRestart) {
  LaunchOptions opt;
  opt.max_restarts = 1;
  opt.restart_grace_seconds = 0.2;
  const LaunchRun run = run_ranks(
      2, "if [ \"$TG_RESTARTS$TG_RANK\" = 01 ]; then kill -9 $$; fi; echo done $TG_RESTARTS\n",
      opt);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(contains(run.err, "restart 1 of 1 after rank 1 was killed by signal 9 (SIGKILL);"))
      << run.err;
  EXPECT_TRUE(contains(run.out, "[rank 1] done 1\n")) << run.out;
}

TEST(LaunchLocal, AnInterruptIsNeverRestarted) {
  LaunchOptions opt;
  opt.max_restarts = 3;
  opt.grace_seconds = 5.0;
  const LaunchRun run = run_ranks(
      2, "trap 'exit 130' INT; echo \"start $TG_RESTARTS\"; while :; do sleep 0.1; done\n", opt,
      [](const std::string& out_path) {
        wait_for_text(out_path, "start 0", 2);
        ::kill(::getpid(), SIGINT);
      });
  EXPECT_EQ(run.status, 130) << run.err;
  EXPECT_FALSE(contains(run.out, "start 1")) << run.out;
  EXPECT_FALSE(contains(run.err, "restart")) << run.err;
}

TEST(WorkerArgv, DropsTheLauncherFlagsItIsGiven) {
  const std::vector<std::string> out =
      worker_argv({"terngrad", "train", "--nproc", "2", "--max-restarts", "3", "--out", "o",
                   "--max-restarts=1"},
                  {"--nproc", "--max-restarts"});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1], "train");
  EXPECT_EQ(out[2], "--out");
  EXPECT_EQ(out[3], "o");
}

TEST(WorkerArgv, DropsNprocAndReexecutesThisBinary) {
  const std::vector<std::string> in = {"terngrad", "train",     "--nproc", "4", "--config",
                                       "x.toml",   "--nproc=2", "--steps", "3"};
  const std::vector<std::string> out = worker_argv(in);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(std::filesystem::path(out[0]).is_absolute()) << out[0];
  EXPECT_EQ(std::filesystem::path(out[0]).filename(), "comm_launch_test");
  EXPECT_EQ(out[1], "train");
  EXPECT_EQ(out[2], "--config");
  EXPECT_EQ(out[3], "x.toml");
  EXPECT_EQ(out[4], "--steps");
  EXPECT_EQ(out[5], "3");
  EXPECT_EQ(worker_argv({"t", "--steps", "3"}).size(), 3u);
}

}  // namespace
}  // namespace tg::comm
