// Hostile peers and faults (issue 15 items 4 and 5), with real `terngrad` processes: two ranks
// started by hand over a file rendezvous, rank 0 honest, rank 1 misbehaving through the test
// driver terngrad_faulty (tests/testing/faulty_main.cpp: TG_FAULT and TG_FAULT_WRITE handed to
// the library's injection points; the release binary reads neither), or a raw TCP
// client that writes garbage to rank 0's listening port during rendezvous, or SIGSTOP. Every
// honest rank must exit 1 within its timeout with one error line naming what went wrong, never
// crash, and leave the last checkpoint loadable. The root-only faults (netem loss, delay and
// reordering; a full tmpfs) are in bench/faults.sh.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "tests/cmd/cli_util.h"
#include "tests/testing/files.h"
#include "train/checkpoint.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The comm timeout of these runs (s): every honest rank must be gone within it plus the
// post-mortem window and start-up slack.
constexpr int kTimeout = 3;
constexpr double kExitLimit = 20.0;

// A short synthetic LeNet run of two workers with a checkpoint every 10 iterations.
std::vector<std::string> args_for(const std::string& out, int rank, const std::string& url,
                                  int iterations = 1000000, int timeout = kTimeout) {
  auto a =
      quick_train_args(out, iterations,
                       {"--set", "workers.count=2", "--set", "compression.method=terngrad", "--set",
                        "comm.timeout=" + std::to_string(timeout), "--rank", std::to_string(rank),
                        "--world-size", "2", "--rendezvous", url, "--job-id", "faults"});
  return a;
}

// The lines of `err` that start with "terngrad: error:".
std::vector<std::string> leading_error_lines(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("terngrad: error:", 0) == 0) lines.push_back(line);
  return lines;
}

// The checkpoint rank 0 left in `out` loads (its digest checks) at a multiple of 10 iterations.
void expect_checkpoint_intact(const std::string& out) {
  const std::string path = out + "/checkpoint.tgckpt";
  ASSERT_TRUE(fs::exists(path)) << "no checkpoint was written before the fault";
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const train::Checkpoint ck = train::load_checkpoint(path);
  EXPECT_GT(ck.step, 0);
  EXPECT_EQ(ck.step % 10, 0);
}

struct Honest {
  int code = -1;
  double seconds = 0;
  std::string err;
};

// Rank 0 honest, rank 1 with `fault_env` (TG_FAULT=...): rank 0's outcome.
Honest run_with_faulty_rank1(const std::string& fault_env, const std::string& out,
                             const TempDir& dir) {
  const std::string url = "file://" + (dir / "rdv");
  const pid_t p0 = spawn_cli(args_for(out, 0, url), dir / "out0", dir / "err0", {fault_env}, "",
                             TG_TERNGRAD_FAULTY_BIN);
  const pid_t p1 = spawn_cli(args_for(dir / "out1", 1, url), dir / "o1", dir / "e1", {fault_env},
                             "", TG_TERNGRAD_FAULTY_BIN);
  Honest h;
  h.code = wait_exit_within(p0, 120, &h.seconds);
  wait_exit_within(p1, kExitLimit);
  h.err = read_text(dir / "err0");
  return h;
}

// Each malformed message from rank 1, well after the first checkpoint (the 10th iteration; a
// terngrad LeNet iteration makes about 5 exchanges, so call 90 falls near the 18th): rank 0
// exits 1 naming rank 1 and the fault, within its timeout, and its checkpoint stays intact.
TEST(HostilePeer, MalformedMessagesAreNamedAndTheCheckpointSurvives) {
  struct Case {
    std::string kind, expect;
  };
  const std::vector<Case> cases = {
      {"length", "rank 1's message announces"},
      {"truncate", "rank 1 sent a truncated message"},
      {"job", "rank 1 belongs to another job"},
      {"seq", "rank 1 is at collective #"},
      {"context", "rank 1 is aggregating another step, bucket or layout than this rank"},
      {"magic", "rank 1 sent a malformed message header"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind);
    TempDir dir;
    const Honest h =
        run_with_faulty_rank1("TG_FAULT=" + c.kind + ",rank=1,call=90", dir / "out", dir);
    EXPECT_EQ(h.code, 1) << h.err;
    EXPECT_LE(h.seconds, kExitLimit) << h.err;
    const auto lines = leading_error_lines(h.err);
    ASSERT_EQ(lines.size(), 1u) << h.err;
    std::printf("[observed] %s: exit %d after %.2f s: %s\n", c.kind.c_str(), h.code, h.seconds,
                lines[0].c_str());
    EXPECT_NE(lines[0].find(c.expect), std::string::npos) << lines[0];
    expect_checkpoint_intact(dir / "out");
    EXPECT_FALSE(fs::exists(dir / "out/summary.json"));
  }
}

// A job secret (comm/secret.h) for the tests below: 32 random bytes, the owner's only.
std::string write_secret(const TempDir& dir, const std::string& name) {
  const std::string path = dir / name;
  std::string bytes(32, '\0');
  std::random_device rd;
  for (char& c : bytes) c = static_cast<char>(rd());
  write_text(path, bytes);
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  return path;
}

// With a job secret (issue 44 item 2): rank 1 sends a well-formed header whose MAC is wrong, as a
// stranger on its connection would, well after the first checkpoint. Rank 0 refuses it, naming
// rank 1, before receiving the payload: one error line, exit 1, the checkpoint intact, and no
// summary (the parameters never took a step with the stranger's bytes).
//
// Rank 0 also closes its connections as it refuses the header, so rank 1, blocked in the same
// collective, fails at once and reports (comm/process_group.h) instead of waiting out its comm
// timeout: rank 0's message carries rank 1's report and does not call rank 1 lost. The comm
// timeout here is 40 s, so rank 0's post-mortem window is 10 s (train/trainer.cpp) and rank 1 has
// that long to report; without the closing it would sit 40 s in its receive.
TEST(HostilePeer, HeaderWithoutTheJobSecretIsRefusedBeforeItsPayload) {
  TempDir dir;
  const std::string secret = write_secret(dir, "job.secret");
  const std::string url = "file://" + (dir / "rdv");
  const std::string fault = "TG_FAULT=mac,rank=1,call=90";
  constexpr int kLongTimeout = 40;
  const pid_t p0 =
      spawn_cli(args_for(dir / "out", 0, url, 1000000, kLongTimeout), dir / "out0", dir / "err0",
                {fault, "TG_SECRET_FILE=" + secret}, "", TG_TERNGRAD_FAULTY_BIN);
  const pid_t p1 =
      spawn_cli(args_for(dir / "out1", 1, url, 1000000, kLongTimeout), dir / "o1", dir / "e1",
                {fault, "TG_SECRET_FILE=" + secret}, "", TG_TERNGRAD_FAULTY_BIN);
  double seconds = 0;
  const int code = wait_exit_within(p0, 120, &seconds);
  wait_exit_within(p1, kExitLimit);
  const std::string err = read_text(dir / "err0");
  EXPECT_EQ(code, 1) << err;
  const auto lines = leading_error_lines(err);
  ASSERT_EQ(lines.size(), 1u) << err;
  std::printf("[observed] mac: exit %d after %.2f s: %s\n", code, seconds, lines[0].c_str());
  EXPECT_NE(lines[0].find("rank 1 sent a message header that is not authenticated with this "
                          "job's secret"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(err.find("job secret: TG_SECRET_FILE " + secret), std::string::npos) << err;
  EXPECT_EQ(lines[0].find("lost rank"), std::string::npos) << lines[0];
  EXPECT_NE(err.find("\n  rank 1 reported: "), std::string::npos) << err;
  expect_checkpoint_intact(dir / "out");
  EXPECT_FALSE(fs::exists(dir / "out/summary.json"));
}

// A stranger who can write the store but has no secret: its rendezvous entry for rank 1 (written
// before the real rank 1 starts) is refused by rank 0 naming the key, before any step; a rank
// with another secret, and a rank with none, are refused the same way, and the rank without a
// secret says why on its side. No run takes a step: no checkpoint anywhere.
TEST(HostilePeer, RendezvousEntriesWithoutTheJobSecretAreRefused) {
  TempDir dir;
  const std::string secret = write_secret(dir, "job.secret");
  const std::string other = write_secret(dir, "other.secret");
  struct Case {
    std::string name, rank1_secret;  // "" = no secret; "stranger" = a store writer, no rank 1
    std::string expect0, expect1;
  };
  const std::vector<Case> cases = {
      {"stranger", "stranger", "rendezvous entry 'tg/faults/hello/1' is not signed", ""},
      {"none", "", "rendezvous entry 'tg/faults/hello/1' is not signed",
       "rank 0's start-up record is signed with a job secret and this rank has none"},
      {"other", other, "rendezvous entry 'tg/faults/hello/1' is signed with another secret",
       "rendezvous entry 'tg/faults/hello/0' is signed with another secret"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string url = "file://" + (dir / ("rdv-" + c.name));
    const std::string out0 = dir / ("out0-" + c.name), out1 = dir / ("out1-" + c.name);
    if (c.rank1_secret == "stranger") {
      auto store = comm::open_store(url, std::chrono::seconds(5));
      const std::string hello = R"({"world_size":2,"backend":"gloo","start_step":0})";
      store->set("tg/faults/hello/1", std::vector<char>(hello.begin(), hello.end()));
    }
    const pid_t p0 =
        spawn_cli(args_for(out0, 0, url), dir / "o0", dir / "e0", {"TG_SECRET_FILE=" + secret});
    pid_t p1 = -1;
    if (c.rank1_secret != "stranger") {
      std::vector<std::string> env;
      if (!c.rank1_secret.empty()) env.push_back("TG_SECRET_FILE=" + c.rank1_secret);
      p1 = spawn_cli(args_for(out1, 1, url), dir / "o1", dir / "e1", env);
    }
    EXPECT_EQ(wait_exit_within(p0, kExitLimit), 1);
    const auto lines0 = leading_error_lines(read_text(dir / "e0"));
    ASSERT_EQ(lines0.size(), 1u) << read_text(dir / "e0");
    EXPECT_NE(lines0[0].find(c.expect0), std::string::npos) << lines0[0];
    if (p1 > 0) {
      EXPECT_EQ(wait_exit_within(p1, kExitLimit), 1);
      const auto lines1 = leading_error_lines(read_text(dir / "e1"));
      ASSERT_EQ(lines1.size(), 1u) << read_text(dir / "e1");
      EXPECT_NE(lines1[0].find(c.expect1), std::string::npos) << lines1[0];
    }
    EXPECT_FALSE(fs::exists(out0 + "/checkpoint.tgckpt"));
    EXPECT_FALSE(fs::exists(out1 + "/checkpoint.tgckpt"));
  }
}

// A secret file others can read is refused before anything starts, naming its mode.
TEST(HostilePeer, SecretFileReadableByOthersIsRefused) {
  TempDir dir;
  const std::string secret = write_secret(dir, "open.secret");
  fs::permissions(secret, fs::perms::group_read | fs::perms::others_read, fs::perm_options::add);
  const std::string url = "file://" + (dir / "rdv");
  const pid_t p = spawn_cli(args_for(dir / "out", 0, url), dir / "o0", dir / "e0",
                            {"TG_SECRET_FILE=" + secret});
  EXPECT_EQ(wait_exit_within(p, kExitLimit), 1);
  const auto lines = leading_error_lines(read_text(dir / "e0"));
  ASSERT_EQ(lines.size(), 1u) << read_text(dir / "e0");
  EXPECT_NE(lines[0].find("TG_SECRET_FILE '" + secret + "' can be read by others (mode 0644)"),
            std::string::npos)
      << lines[0];
}

// A bad TG_FAULT spec is refused, not ignored (a typo would make a fault test pass vacuously);
// the release binary ignores the variable altogether: no fault can reach it from the
// environment.
TEST(HostilePeer, UnknownFaultIsRefused) {
  TempDir dir;
  const Honest h = run_with_faulty_rank1("TG_FAULT=bogus,rank=1,call=0", dir / "out", dir);
  EXPECT_EQ(h.code, 1);
  EXPECT_NE(h.err.find("TG_FAULT='bogus,rank=1,call=0': unknown fault 'bogus'"), std::string::npos)
      << h.err;
}

// The terngrad binary reads no fault from its environment: with both variables set (a disk full
// from the first byte) a run writes its outputs and succeeds.
TEST(HostilePeer, TheReleaseBinaryReadsNoFault) {
  TempDir dir;
  const std::string out = dir / "out";
  const pid_t p = spawn_cli(quick_train_args(out, 12), dir / "o", dir / "e",
                            {"TG_FAULT=magic,rank=0,call=0", "TG_FAULT_WRITE=enospc@0"});
  EXPECT_EQ(wait_exit_within(p, 120), 0) << read_text(dir / "e");
  EXPECT_TRUE(fs::exists(out + "/summary.json"));
  EXPECT_TRUE(fs::exists(out + "/checkpoint.tgckpt"));
}

// The TCP ports process `pid` listens on (from /proc/net/tcp and its socket descriptors).
std::vector<std::pair<std::string, int>> listening_ports(pid_t pid) {
  std::vector<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char target[128] = {};
      const std::string link = fd_dir + "/" + e->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      const std::string t(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (t.rfind("socket:[", 0) == 0) inodes.push_back(t.substr(8, t.size() - 9));
    }
    ::closedir(d);
  }
  std::vector<std::pair<std::string, int>> out;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state != "0A" || std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) continue;
    const uint32_t addr = static_cast<uint32_t>(std::stoul(local.substr(0, 8), nullptr, 16));
    const int port = std::stoi(local.substr(9), nullptr, 16);
    in_addr a{};
    a.s_addr = addr;  // /proc prints the address in host order of the raw network bytes
    out.emplace_back(::inet_ntoa(a), port);
  }
  return out;
}

// Connects to host:port and writes `bytes`; true when all were written.
bool write_garbage(const std::string& host, int port, const std::vector<uint8_t>& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  bool ok =
      ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  // Held open while rank 0 decides: a stranger that stays connected.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::close(fd);
  return ok;
}

// The harness plays rank 1 at the store (its start-up record and world size, copied from rank
// 0's), then, instead of connecting as Gloo would, writes garbage into rank 0's listening port:
// zeros, seeded random bytes, and a well-formed Gloo preamble for a slot nobody posted. Rank 0
// exits 1 with one error line within its timeout, never killed by a signal. Since the harness
// never publishes rank 1's Gloo addresses the clean outcome is the rendezvous timeout naming
// them; a preamble that Gloo's event thread cannot handle ends in the one-line background-thread
// error instead of an abort.
TEST(HostilePeer, GarbageOnTheListeningSocketDuringRendezvous) {
  std::mt19937 rng(15);
  std::vector<uint8_t> random(4096);
  for (auto& b : random) b = static_cast<uint8_t>(rng());
  // Gloo 0.5's tcp Op preamble: nbytes, opcode, slot, offset, length, roffset (size_t each).
  std::vector<uint64_t> preamble = {48 + 64, 1, 12345, 0, 64, 0};
  std::vector<uint8_t> unbound(48 + 64, 0);
  std::memcpy(unbound.data(), preamble.data(), 48);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> payloads = {
      {"zeros", std::vector<uint8_t>(4096, 0)}, {"random", random}, {"unbound send", unbound}};
  for (const auto& [what, bytes] : payloads) {
    SCOPED_TRACE(what);
    TempDir dir;
    const std::string url = "file://" + (dir / "rdv");
    fs::create_directories(dir / "rdv");
    const pid_t p0 = spawn_cli(args_for(dir / "out", 0, url, 40), dir / "out0", dir / "err0");
    auto store = comm::open_store(url, std::chrono::milliseconds(30000));
    store->wait({"tg/faults/hello/0"}, std::chrono::milliseconds(30000));
    store->set("tg/faults/hello/1", store->get("tg/faults/hello/0"));
    store->set("tg/faults/gloo/size/1", std::vector<char>{'2'});
    std::vector<std::pair<std::string, int>> ports;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (ports.empty() && Clock::now() < deadline) {
      ports = listening_ports(p0);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(ports.empty()) << "rank 0 never listened\n" << read_text(dir / "err0");
    for (const auto& [host, port] : ports) {
      EXPECT_NE(host, "0.0.0.0") << "rank 0 listens on every interface";
      write_garbage(host, port, bytes);
    }
    double seconds = 0;
    const int code = wait_exit_within(p0, kExitLimit, &seconds);
    const std::string err = read_text(dir / "err0");
    EXPECT_EQ(code, 1) << err;
    const auto lines = leading_error_lines(err);
    ASSERT_EQ(lines.size(), 1u) << err;
    std::printf("[observed] garbage (%s): exit %d after %.2f s: %s\n", what.c_str(), code, seconds,
                lines[0].c_str());
    EXPECT_TRUE(contains(lines[0], "did not arrive") || contains(lines[0], "timed out") ||
                contains(lines[0], "background thread failed"))
        << lines[0];
  }
}

// A rank stopped (SIGSTOP) for longer than the timeout: the other exits 1 naming it as lost
// within the timeout plus the post-mortem window; the stopped rank is then killed.
TEST(Faults, StoppedRankIsNamedByTheOthers) {
  TempDir dir;
  const std::string url = "file://" + (dir / "rdv");
  const pid_t p0 = spawn_cli(args_for(dir / "out", 0, url), dir / "out0", dir / "err0");
  const pid_t p1 = spawn_cli(args_for(dir / "out1", 1, url), dir / "o1", dir / "e1");
  // Stop rank 1 once the step-10 checkpoint is on disk (renamed into place, so complete). Not
  // at the step-10 metrics line: the checkpoint is written after it and gathers every rank's
  // compressor state, so a rank stopped in between leaves no checkpoint at all.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && !fs::exists(dir / "out/checkpoint.tgckpt"))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(p1, SIGSTOP), 0);
  double seconds = 0;
  const int code = wait_exit_within(p0, kExitLimit, &seconds);
  ::kill(p1, SIGKILL);
  wait_exit_within(p1, 10);
  const std::string err = read_text(dir / "err0");
  EXPECT_EQ(code, 1) << err;
  EXPECT_GE(seconds, kTimeout - 1.0) << "rank 0 gave up before the timeout:\n" << err;
  EXPECT_LE(seconds, kTimeout + 8.0) << err;
  const auto lines = leading_error_lines(err);
  ASSERT_EQ(lines.size(), 1u) << err;
  std::printf("[observed] SIGSTOP: exit %d after %.2f s: %s\n", code, seconds, lines[0].c_str());
  EXPECT_NE(lines[0].find("lost rank 1 of 2"), std::string::npos) << lines[0];
  expect_checkpoint_intact(dir / "out");
}

// The disk fills while a checkpoint is written (TG_FAULT_WRITE: writes fail with ENOSPC after a
// budget of 1.5 checkpoints): exit 1 naming the file and the error, the previous checkpoint
// intact, no temp file left. The same with EIO.
TEST(Faults, DiskFullDuringACheckpointKeepsThePreviousOne) {
  TempDir dir;
  const CliResult clean = run_cli(quick_train_args(dir / "clean", 10));
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  const auto size = fs::file_size(dir / "clean/checkpoint.tgckpt");
  const CliResult whole = run_cli(quick_train_args(dir / "whole", 40));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const std::string want =
      json::parse(read_text(dir / "whole/summary.json"))["params_sha256"].as_string();
  for (const std::string kind : {"enospc", "eio"}) {
    SCOPED_TRACE(kind);
    const std::string out = dir / kind;
    const std::string env = "TG_FAULT_WRITE=" + kind + "@" + std::to_string(size * 3 / 2);
    const pid_t p = spawn_cli(quick_train_args(out, 40), dir / "o", dir / "e", {env}, "",
                              TG_TERNGRAD_FAULTY_BIN);
    const int code = wait_exit_within(p, 120);
    const std::string err = read_text(dir / "e");
    EXPECT_EQ(code, 1) << err;
    const auto lines = leading_error_lines(err);
    ASSERT_EQ(lines.size(), 1u) << err;
    std::printf("[observed] %s: exit %d: %s\n", kind.c_str(), code, lines[0].c_str());
    EXPECT_NE(lines[0].find("cannot write " + out + "/checkpoint.tgckpt.tmp: " +
                            (kind == "enospc" ? "No space left on device" : "Input/output error")),
              std::string::npos)
        << lines[0];
    const train::Checkpoint ck = train::load_checkpoint(out + "/checkpoint.tgckpt");
    EXPECT_EQ(ck.step, 10);
    EXPECT_FALSE(fs::exists(out + "/checkpoint.tgckpt.tmp"));
    EXPECT_FALSE(fs::exists(out + "/summary.json"));
    // Once there is room again, --resume continues from that checkpoint and ends where the run
    // never interrupted ends.
    std::vector<std::string> resume = quick_train_args(out, 40);
    resume.push_back("--resume");
    const CliResult r = run_cli(resume);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json::Value s = json::parse(read_text(out + "/summary.json"));
    EXPECT_EQ(s["start_iteration"].as_number(), 10);
    EXPECT_EQ(s["params_sha256"].as_string(), want);
  }
}

}  // namespace
}  // namespace tg::testing
