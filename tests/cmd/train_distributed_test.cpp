// Multi-process `terngrad train` (issue 5), run as real processes of the real binary over Gloo:
//   - the invariant: a run's params_sha256 is the same whether its N workers are N processes,
//     fewer processes hosting several workers, or all emulated in one process (N = 2 and 4,
//     every ternary algorithm), and a run interrupted and resumed across processes too;
//   - rendezvous through a real Redis server, and rank pick-up from a Slurm environment;
//   - faults: a worker killed with SIGKILL (the others exit non-zero in bounded time naming it,
//     the launcher non-zero), a mismatched config or world size, a rank that never arrives.
// Short LeNet runs on the real MNIST files (../shared/data/mnist).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nn/core/json.h"
#include "tests/cmd/cli_util.h"
#include "tests/testing/files.h"
#include "tests/testing/redis_server.h"
#include "train/checkpoint.h"

namespace tg::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kMnist = std::string(TG_SHARED_DATA_DIR) + "/mnist";

// A short LeNet/MNIST run with `workers` workers in all: batch 48 (2, 3 and 4 divide it),
// `iterations` iterations, evaluation on the first 500 test images; `extra` goes before --out.
std::vector<std::string> lenet_args(const std::string& out, int workers, const std::string& method,
                                    int iterations = 24,
                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"train", "--no-progress",
                                "--set", "data.path=" + kMnist,
                                "--set", "data.eval_limit=500",
                                "--set", "train.batch_size=48",
                                "--set", "train.iterations=" + std::to_string(iterations),
                                "--set", "train.log_every=8",
                                "--set", "train.checkpoint_every=0",
                                "--set", "workers.count=" + std::to_string(workers),
                                "--set", "compression.method=" + method,
                                "--set", "comm.timeout=30"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("--out");
  a.push_back(out);
  return a;
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end() - 2, b.begin(), b.end());  // before "--out DIR"
  return a;
}

json::Value summary_of(const std::string& out) {
  return json::parse(read_text(out + "/summary.json"));
}

std::string sha_of(const std::string& out) {
  return summary_of(out)["params_sha256"].as_string();
}

// params_sha256 of the all-emulated run (one process) with these settings, computed once per
// test binary.
std::string reference_sha(int workers, const std::string& method, int iterations = 24) {
  static std::map<std::string, std::string> cache;
  static TempDir dir;
  const std::string key = method + "-" + std::to_string(workers) + "-" + std::to_string(iterations);
  if (!cache.count(key)) {
    const std::string out = dir / key;
    const CliResult r = run_cli(lenet_args(out, workers, method, iterations));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return "reference run failed";
    EXPECT_EQ(summary_of(out)["processes"].as_number(), 1);
    cache[key] = sha_of(out);
  }
  return cache[key];
}

void expect_ok(const CliResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 0) << what << "\nstderr:\n" << r.err;
}

TEST(TrainDistributed, TwoProcessesMatchTwoEmulatedWorkers) {
  ASSERT_TRUE(fs::exists(kMnist + "/train-images-idx3-ubyte.gz")) << "MNIST missing at " << kMnist;
  TempDir dir;
  const std::string out = dir / "p2";
  const CliResult r = run_cli(plus(lenet_args(out, 2, "terngrad"), {"--nproc", "2"}));
  expect_ok(r, "--nproc 2");
  const json::Value s = summary_of(out);
  EXPECT_EQ(s["params_sha256"].as_string(), reference_sha(2, "terngrad"));
  EXPECT_EQ(s["processes"].as_number(), 2);
  EXPECT_EQ(s["workers_per_process"].as_number(), 1);
  EXPECT_EQ(s["comm_backend"].as_string(), "gloo");
  // Gloo ranks run under SCHED_BATCH by default (comm.sched_batch), and say so.
  EXPECT_TRUE(s["sched_batch"].b);
  EXPECT_NE(r.err.find("scheduling: SCHED_BATCH for this rank's"), std::string::npos) << r.err;
  // The launcher's stdout is rank 0's summary, unprefixed: one JSON object.
  EXPECT_EQ(json::parse(r.out)["params_sha256"].as_string(), s["params_sha256"].as_string());
  // Wire target: TernGrad sends <= 1/14 of what an fp32 ring allreduce sends per worker (at
  // P = 2 the ring sends the whole fp32 gradient once).
  const double fp32 = s["fp32_bytes_per_worker_per_iter"].as_number();
  const double sent = s["wire_bytes_sent_per_worker_per_iter"].as_number();
  EXPECT_GT(sent, 0.0);
  EXPECT_LE(sent, fp32 / 14.0) << "sent " << sent << " B per worker per iteration";
  EXPECT_GE(s["communication_seconds_per_iter"].as_number(), 0.0);
  EXPECT_GT(s["compute_seconds_per_iter"].as_number(), 0.0);
  EXPECT_GT(s["compression_seconds_per_iter"].as_number(), 0.0);
  // metrics.jsonl train records carry the same accounting per log window.
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  int train_records = 0;
  while (std::getline(in, line)) {
    const json::Value v = json::parse(line);
    if (v["type"].as_string() != "train") continue;
    ++train_records;
    EXPECT_GT(v["wire_bytes_sent_per_worker_per_iter"].as_number(), 0.0) << line;
    EXPECT_GT(v["wire_bytes_received_per_worker_per_iter"].as_number(), 0.0) << line;
    EXPECT_TRUE(v.has("communication_seconds_per_iter")) << line;
  }
  EXPECT_EQ(train_records, 3);
  // Only rank 0 prints: every progress line is rank 0's.
  EXPECT_NE(r.err.find("[rank 0] step 24/24"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[rank 1] step"), std::string::npos) << r.err;
}

TEST(TrainDistributed, FourWorkersAgreeAcrossProcessCountsAndAlgorithms) {
  const std::string want = reference_sha(4, "terngrad");
  TempDir dir;
  struct Case {
    std::string nproc, algorithm;
  };
  const std::vector<Case> cases = {
      {"2", "auto"}, {"4", "ps"}, {"4", "packed-allreduce"}, {"4", "allgather"}};
  for (const auto& c : cases) {
    const std::string out = dir / (c.nproc + c.algorithm);
    const CliResult r =
        run_cli(plus(lenet_args(out, 4, "terngrad"),
                     {"--set", "comm.algorithm=" + c.algorithm, "--nproc", c.nproc}));
    expect_ok(r, "--nproc " + c.nproc + " " + c.algorithm);
    if (r.exit_code != 0) continue;
    EXPECT_EQ(sha_of(out), want) << "--nproc " << c.nproc << ", comm.algorithm " << c.algorithm;
    EXPECT_EQ(summary_of(out)["workers_per_process"].as_number(), 4 / std::stoi(c.nproc));
  }
}

// The sharded and hierarchical routes (issue 42) as real processes: the one-process parameters
// for 3 and 4 processes, 2 and 3 "nodes" (comm.ranks_per_node), error feedback and base-3 codes;
// the log names the node layout, summary.json records it with each bucket's route and the bytes
// that crossed nodes (fewer than in all).
TEST(TrainDistributed, ShardedAndHierarchicalRoutesKeepTheOneProcessBits) {
  TempDir dir;
  struct Case {
    std::string nproc, algorithm;
    int workers, ranks_per_node;
    std::vector<std::string> sets;
    std::string nodes;  // the log's words for the layout
  };
  const std::vector<Case> cases = {
      {"3", "sharded", 6, 0, {}, "1 node of 3 ranks"},
      {"4", "hierarchical", 4, 2, {}, "2 nodes of 2 ranks"},
      {"3", "hierarchical", 3, 1, {}, "3 nodes of 1 rank"},
      {"4",
       "auto",
       4,
       2,
       {"compression.error_feedback=true", "compression.pack=base3"},
       "2 nodes of 2 ranks"},
  };
  int k = 0;
  for (const Case& c : cases) {
    std::vector<std::string> sets;
    for (const std::string& kv : c.sets) sets.insert(sets.end(), {"--set", kv});
    // The one-process reference with the same compression settings.
    const std::string ref = dir / ("ref" + std::to_string(k));
    const CliResult one = run_cli(plus(lenet_args(ref, c.workers, "terngrad"), sets));
    expect_ok(one, "reference " + std::to_string(k));
    const std::string out = dir / ("case" + std::to_string(k++));
    std::vector<std::string> extra = sets;
    extra.insert(extra.end(),
                 {"--set", "comm.algorithm=" + c.algorithm, "--set",
                  "comm.ranks_per_node=" + std::to_string(c.ranks_per_node), "--nproc", c.nproc});
    const CliResult r = run_cli(plus(lenet_args(out, c.workers, "terngrad"), extra));
    const std::string what = "--nproc " + c.nproc + " " + c.algorithm;
    expect_ok(r, what);
    if (r.exit_code != 0 || one.exit_code != 0) continue;
    EXPECT_EQ(sha_of(out), sha_of(ref)) << what;
    EXPECT_TRUE(contains(r.err, "nodes: " + c.nodes)) << r.err;
    const json::Value s = summary_of(out);
    EXPECT_EQ(s["nodes"]["count"].as_number(),
              c.ranks_per_node == 0 ? 1 : std::stoi(c.nproc) / c.ranks_per_node)
        << what;
    const std::string want_route = c.algorithm == "auto" ? "hierarchical" : c.algorithm;
    const json::Value& routes = s["comm_bucket_routes"];
    ASSERT_FALSE(routes.arr.empty()) << what;
    for (const json::Value& route : routes.arr) EXPECT_EQ(route.as_string(), want_route) << what;
    if (c.ranks_per_node > 0) {
      const double across = s["wire_bytes_sent_across_nodes_per_worker_per_iter"].as_number();
      EXPECT_GT(across, 0.0) << what;
      EXPECT_LT(across, s["wire_bytes_sent_per_worker_per_iter"].as_number()) << what;
    }
  }
}

// fp32 gradients travel by the exact reduce-scatter + allgather: the same parameters as one
// process for 2 and 4 processes, and per worker a ring allreduce's 2 (P - 1) / P of the bytes
// instead of an allgather's (P - 1).
TEST(TrainDistributed, Fp32ReduceScatterMatchesOneProcessAtRingAllreduceBytes) {
  const std::string want = reference_sha(4, "none");
  TempDir dir;
  for (const int p : {2, 4}) {
    const std::string out = dir / ("fp32_p" + std::to_string(p));
    const CliResult r = run_cli(plus(lenet_args(out, 4, "none"), {"--nproc", std::to_string(p)}));
    expect_ok(r, "fp32 --nproc " + std::to_string(p));
    if (r.exit_code != 0) continue;
    const json::Value s = summary_of(out);
    EXPECT_EQ(s["params_sha256"].as_string(), want) << "P = " << p;
    EXPECT_TRUE(contains(r.err, "gradients travel as fp32 by reduce-scatter + allgather")) << r.err;
    // Per worker: with W = 4 / P workers per rank the alltoall moves W ranges and the allgather
    // one, so per worker (P - 1) / P * (1 + 1 / W) of the gradient's bytes, plus a few bytes of
    // control (loss sums, the stop flag).
    const double fp32 = s["fp32_bytes_per_worker_per_iter"].as_number();
    const double w = 4.0 / p;
    const double model = (p - 1.0) / p * (1.0 + 1.0 / w) * fp32;
    const double sent = s["wire_bytes_sent_per_worker_per_iter"].as_number();
    EXPECT_GE(sent, model) << "P = " << p;
    EXPECT_LE(sent, model * 1.001 + 64) << "P = " << p;
  }
}

// fp32 over two nodes of two processes folds along the nodes (terngrad/exchange/aggregate.h):
// the one-process bits, and across the nodes only partial sums and averages, 4 bytes of each
// element per node pair: half of what the flat reduce-scatter + allgather sends across.
TEST(TrainDistributed, Fp32FoldsAlongTheNodesWithTheOneProcessBits) {
  const std::string want = reference_sha(4, "none");
  TempDir dir;
  const std::string out = dir / "fold";
  const CliResult r =
      run_cli(plus(lenet_args(out, 4, "none"), {"--nproc", "4", "--set", "comm.ranks_per_node=2"}));
  expect_ok(r, "fp32 --nproc 4 as 2 nodes");
  if (r.exit_code != 0) return;
  EXPECT_EQ(sha_of(out), want);
  EXPECT_TRUE(contains(r.err, "fp32 by a fold along the nodes")) << r.err;
  const json::Value s = summary_of(out);
  // Per worker across nodes (n elements, W = 1): node 0's ranks send their lane's partial sums
  // (4n / 2 bytes each), node 1's the averages (the same): half the fp32 gradient's bytes. The
  // flat path sends each of the 2 ranks on the other node a range and its average, 8n / 4
  // bytes each: all of them.
  const double fp32 = s["fp32_bytes_per_worker_per_iter"].as_number();
  const double across = s["wire_bytes_sent_across_nodes_per_worker_per_iter"].as_number();
  EXPECT_GE(across, 0.5 * fp32) << r.err;
  EXPECT_LE(across, 0.5 * fp32 * 1.001 + 64) << r.err;
}

// The reducer's buckets and its overlap with backward never change the bits: terngrad with tiny
// buckets, overlap on (each bucket exchanged from autograd's callback on the communication
// thread) and off, and fp16 on its exact reduce-scatter (2 bytes per element in, f32 out), all
// end with the one-process parameters.
TEST(TrainDistributed, BucketsOverlapAndFp16KeepTheOneProcessBits) {
  TempDir dir;
  struct Case {
    std::string method;
    std::vector<std::string> sets;
    bool overlap;
  };
  const std::vector<Case> cases = {
      {"terngrad", {"comm.bucket_mb=0.001"}, true},
      {"terngrad", {"comm.bucket_mb=0.001", "comm.overlap=false"}, false},
      {"fp16", {}, true},
  };
  int k = 0;
  for (const Case& c : cases) {
    const std::string want = reference_sha(2, c.method);
    const std::string out = dir / ("case" + std::to_string(k++));
    std::vector<std::string> extra = {"--nproc", "2"};
    for (const std::string& kv : c.sets) extra.insert(extra.end(), {"--set", kv});
    const std::string what = c.method + (c.overlap ? " overlapped" : " after backward");
    const CliResult r = run_cli(plus(lenet_args(out, 2, c.method), extra));
    expect_ok(r, what);
    if (r.exit_code != 0) continue;
    const json::Value s = summary_of(out);
    EXPECT_EQ(s["params_sha256"].as_string(), want) << what;
    EXPECT_EQ(s["comm_overlap"].b, c.overlap) << what;
    EXPECT_GE(s["comm_buckets"].as_number(), c.sets.empty() ? 2 : 5) << what;
    EXPECT_TRUE(
        contains(r.err, c.overlap ? "exchanged while backward runs" : "exchanged after backward"))
        << r.err;
    EXPECT_GE(s["comm_exposed_seconds_per_iter"].as_number(), 0.0) << what;
    if (c.method == "fp16") {
      EXPECT_TRUE(contains(r.err, "fp16 by allgather, summed in worker order")) << r.err;
      // P = 2, W = 1: the whole f16 gradient out, half the bytes of fp32 per worker, where a
      // reduce-scatter + allgather would send 3/4 (half of the f16 gradient out, half of the f32
      // average back); plus a few control bytes.
      const double fp32 = s["fp32_bytes_per_worker_per_iter"].as_number();
      const double sent = s["wire_bytes_sent_per_worker_per_iter"].as_number();
      EXPECT_GE(sent, 0.5 * fp32) << what;
      EXPECT_LE(sent, 0.5 * fp32 * 1.001 + 256) << what;
    }
  }
}

// comm.algorithm = ring: fp32 by a plain ring allreduce, opt-in, with a ring's bytes (2 (P - 1) / P
// of the gradient per rank); it trains.
TEST(TrainDistributed, RingAllreduceIsOptIn) {
  TempDir dir;
  const std::string out = dir / "ring";
  const CliResult r =
      run_cli(plus(lenet_args(out, 2, "none"), {"--nproc", "2", "--set", "comm.algorithm=ring"}));
  expect_ok(r, "ring");
  if (r.exit_code != 0) return;
  EXPECT_TRUE(contains(r.err, "fp32 by ring allreduce")) << r.err;
  const json::Value s = summary_of(out);
  const double fp32 = s["fp32_bytes_per_worker_per_iter"].as_number();
  const double sent = s["wire_bytes_sent_per_worker_per_iter"].as_number();
  EXPECT_GE(sent, fp32) << "a ring over P = 2 sends the whole gradient once";
  EXPECT_LE(sent, fp32 * 1.001 + 256);
  EXPECT_GT(s["test_accuracy"].as_number(), 0.5);
}

// True while `pid` runs (not exited, not a zombie waiting to be reaped).
TEST(TrainDistributed, InterruptedRunResumesAcrossProcessesBitIdentically) {
  // onebit keeps a residual per worker: the checkpoint must hold every rank's, gathered by rank
  // 0, for the resumed run to end bit-identical to an uninterrupted one-process run.
  constexpr int kIterations = 160;
  const std::string want = reference_sha(2, "onebit", kIterations);
  TempDir dir;
  const std::string out = dir / "run";
  const auto args = plus(lenet_args(out, 2, "onebit", kIterations), {"--nproc", "2"});
  const pid_t launcher = spawn_cli(args, dir / "out1", dir / "err1");
  ASSERT_TRUE(
      wait_for_line(out + "/metrics.jsonl", "\"step\":16", std::chrono::seconds(120), launcher))
      << read_text(dir / "err1");
  ::kill(launcher, SIGINT);
  const int code = wait_exit_within(launcher, 60);
  const std::string err1 = read_text(dir / "err1");
  ASSERT_EQ(code, 130) << err1;
  const tg::train::Checkpoint ck = tg::train::load_checkpoint(out + "/checkpoint.tgckpt");
  ASSERT_LT(ck.step, kIterations) << "the run ended before the interrupt";
  EXPECT_TRUE(ck.has("compressor/worker0/residual"));
  EXPECT_TRUE(ck.has("compressor/worker1/residual"));
  // Resume with the same number of processes ...
  const CliResult r = run_cli(plus(args, {"--resume"}));
  expect_ok(r, "resume");
  EXPECT_EQ(sha_of(out), want);
  EXPECT_EQ(summary_of(out)["start_iteration"].as_number(), static_cast<double>(ck.step));
}

TEST(TrainDistributed, KilledWorkerStopsTheOthersNamingIt) {
  TempDir dir;
  const std::string out = dir / "run";
  // comm.timeout 10 s: the survivors must be gone within it plus the post-mortem window (<= 10 s
  // at most, 2.5 s here) and start-up slack.
  auto args = lenet_args(out, 3, "terngrad", 1000000, {"--set", "comm.timeout=10"});
  args = plus(args, {"--nproc", "3"});
  const pid_t launcher = spawn_cli(args, dir / "out", dir / "err");
  ASSERT_TRUE(
      wait_for_line(out + "/metrics.jsonl", "\"step\":8", std::chrono::seconds(120), launcher))
      << read_text(dir / "err");
  const pid_t victim = rank_pid(launcher, 1);
  ASSERT_GT(victim, 0) << "rank 1's process not found";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  double seconds = 0;
  const int code = wait_exit_within(launcher, 40, &seconds);
  const std::string err = read_text(dir / "err");
  ASSERT_NE(code, -1) << "the launcher did not exit within 40 s of a killed rank:\n" << err;
  EXPECT_EQ(code, 128 + SIGKILL) << err;  // the first failing rank's status
  EXPECT_LE(seconds, 25.0) << err;
  EXPECT_NE(err.find("[launch] rank 1 was killed by signal 9"), std::string::npos) << err;
  for (const char* rank :
       {"[rank 0] terngrad: error: lost rank 1 of 3", "[rank 2] terngrad: error: lost rank 1 of 3"})
    EXPECT_NE(err.find(rank), std::string::npos) << "missing \"" << rank << "\" in\n" << err;
  EXPECT_FALSE(fs::exists(out + "/summary.json"));
}

// Two ranks started by hand (--rank/--world-size/--rendezvous), as on two nodes; returns both.
std::vector<CliResult> run_two_ranks(const std::vector<std::string>& rank0,
                                     const std::vector<std::string>& rank1,
                                     const std::vector<std::string>& env0 = {},
                                     const std::vector<std::string>& env1 = {},
                                     const std::string& cwd = "") {
  TempDir io;
  const pid_t p0 = spawn_cli(rank0, io / "out0", io / "err0", env0, cwd);
  const pid_t p1 = spawn_cli(rank1, io / "out1", io / "err1", env1, cwd);
  std::vector<CliResult> r(2);
  r[0].exit_code = wait_exit_within(p0, 120);
  r[1].exit_code = wait_exit_within(p1, 120);
  for (int i = 0; i < 2; ++i) {
    r[i].out = read_text(io / ("out" + std::to_string(i)));
    r[i].err = read_text(io / ("err" + std::to_string(i)));
  }
  return r;
}

std::vector<std::string> rank_flags(int rank, int world, const std::string& url) {
  return {"--rank", std::to_string(rank), "--world-size", std::to_string(world), "--rendezvous",
          url};
}

// One rank with a named rendezvous forms a real one-rank process group (how a one-GPU machine
// runs training through NCCL): the exchange goes through the communicator and the parameters are
// the same bits as the plain one-process run.
TEST(TrainDistributed, OneRankWithARendezvousUsesTheCommunicator) {
  TempDir dir;
  const std::string out = dir / "run";
  const std::string url = "file://" + (dir / "rdv");
  const CliResult r = run_cli(plus(lenet_args(out, 2, "terngrad"), rank_flags(0, 1, url)));
  expect_ok(r, "--rank 0 --world-size 1 --rendezvous " + url);
  const json::Value s = summary_of(out);
  EXPECT_EQ(s["params_sha256"].as_string(), reference_sha(2, "terngrad"));
  EXPECT_EQ(s["processes"].as_number(), 1);
  EXPECT_EQ(s["workers_per_process"].as_number(), 2);
  EXPECT_EQ(s["comm_backend"].as_string(), "gloo");  // a CPU run: auto picks Gloo
  EXPECT_EQ(s["rendezvous"].as_string(), url);

  // comm.sched_batch = false keeps the default policy; the bits are the same (speed only).
  const std::string out2 = dir / "run2";
  const std::string url2 = "file://" + (dir / "rdv2");
  const CliResult r2 =
      run_cli(plus(lenet_args(out2, 2, "terngrad"),
                   plus(rank_flags(0, 1, url2), {"--set", "comm.sched_batch=false"})));
  expect_ok(r2, "comm.sched_batch=false");
  const json::Value s2 = summary_of(out2);
  EXPECT_EQ(s2["params_sha256"].as_string(), s["params_sha256"].as_string());
  EXPECT_TRUE(s["sched_batch"].b);
  EXPECT_FALSE(s2["sched_batch"].b);
  EXPECT_EQ(r2.err.find("scheduling: SCHED_BATCH"), std::string::npos) << r2.err;
}

// ---- threads: the policy, and results that do not depend on it --------------------------------

CliResult run_cli_env(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  TempDir io;
  CliResult r;
  r.exit_code = wait_exit(spawn_cli(args, io / "out", io / "err", env));
  r.out = read_text(io / "out");
  r.err = read_text(io / "err");
  return r;
}

int cpus_here() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(CPU_COUNT(&set), 1) : 1;
}

// 1, 2 and 3 threads (by --threads and by OMP_NUM_THREADS) end a run with the same parameters,
// fp32 and TernGrad: every CPU kernel is thread-count invariant (OpenBLAS's own threading is
// not; nn/core/blas_cpu.cpp).
TEST(TrainThreads, SameParametersForAnyThreadCount) {
  TempDir dir;
  for (const std::string method : {"none", "terngrad"}) {
    SCOPED_TRACE(method);
    std::string first;
    const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> ways = {
        {{"--threads", "1"}, {}}, {{"--threads", "2"}, {}}, {{}, {"OMP_NUM_THREADS=3"}}};
    int i = 0;
    for (const auto& [flags, env] : ways) {
      const std::string out = dir / (method + std::to_string(i++));
      const CliResult r = run_cli_env(plus(lenet_args(out, 2, method, 16), flags), env);
      expect_ok(r, out);
      const json::Value s = summary_of(out);
      const int want = flags.empty() ? 3 : std::stoi(flags[1]);
      EXPECT_EQ(s["threads_per_process"].as_number(), want);
      EXPECT_TRUE(contains(s["threads_from"].as_string(),
                           flags.empty() ? "OMP_NUM_THREADS=3" : "--threads"))
          << s["threads_from"].as_string();
      EXPECT_TRUE(contains(r.err, std::to_string(want) + " CPU thread")) << r.err;
      if (first.empty())
        first = s["params_sha256"].as_string();
      else
        EXPECT_EQ(s["params_sha256"].as_string(), first) << "with " << want << " threads";
    }
  }
}

// Ranks on one host split its CPUs: --nproc 2, and two ranks started as Open MPI starts them,
// each get max(1, CPUs / 2) threads unless told otherwise; one process gets them all.
TEST(TrainThreads, RanksSharingAHostSplitItsCpus) {
  TempDir dir;
  const int want = std::max(1, cpus_here() / 2);
  const CliResult r = run_cli(plus(lenet_args(dir / "p2", 2, "terngrad"), {"--nproc", "2"}));
  expect_ok(r, "--nproc 2");
  EXPECT_EQ(summary_of(dir / "p2")["threads_per_process"].as_number(), want);
  EXPECT_TRUE(contains(summary_of(dir / "p2")["threads_from"].as_string(), "shared by 2"));
  EXPECT_EQ(sha_of(dir / "p2"), reference_sha(2, "terngrad"));

  auto mpi = [](int rank) {
    return std::vector<std::string>{"OMPI_COMM_WORLD_RANK=" + std::to_string(rank),
                                    "OMPI_COMM_WORLD_SIZE=2", "OMPI_MCA_ess_base_jobid=777"};
  };
  const auto m = run_two_ranks(lenet_args(dir / "mpi", 2, "terngrad"),
                               lenet_args(dir / "mpi1", 2, "terngrad"), mpi(0), mpi(1), dir.str());
  expect_ok(m[0], "Open MPI rank 0");
  expect_ok(m[1], "Open MPI rank 1");
  EXPECT_EQ(summary_of(dir / "mpi")["threads_per_process"].as_number(), want);
  EXPECT_EQ(sha_of(dir / "mpi"), reference_sha(2, "terngrad"));

  const CliResult one = run_cli(lenet_args(dir / "one", 2, "terngrad"));
  expect_ok(one, "one process");
  EXPECT_EQ(summary_of(dir / "one")["threads_per_process"].as_number(), cpus_here());
}

TEST(TrainDistributed, RanksMeetThroughRedis) {
  if (!have_redis_server()) GTEST_SKIP() << "redis-server is not installed";
  RedisServer server;
  TempDir dir;
  const auto base = lenet_args(dir / "run", 2, "terngrad");
  const auto r =
      run_two_ranks(plus(base, rank_flags(0, 2, server.url())),
                    plus(lenet_args(dir / "rank1", 2, "terngrad"), rank_flags(1, 2, server.url())));
  expect_ok(r[0], "rank 0");
  expect_ok(r[1], "rank 1");
  EXPECT_EQ(sha_of(dir / "run"), reference_sha(2, "terngrad"));
  EXPECT_EQ(summary_of(dir / "run")["rendezvous"].as_string(), server.url());
  // Only rank 0 writes its --out.
  EXPECT_FALSE(fs::exists(dir / "rank1"));
  EXPECT_EQ(r[1].out, "");
  // The same store and job id again: refused, naming the fix, instead of mixing two jobs' keys.
  const auto again = run_two_ranks(
      plus(lenet_args(dir / "again", 2, "terngrad"), rank_flags(0, 2, server.url())),
      plus(lenet_args(dir / "again1", 2, "terngrad"), rank_flags(1, 2, server.url())));
  EXPECT_NE(again[0].exit_code, 0);
  EXPECT_NE(again[0].err.find("--job-id"), std::string::npos) << again[0].err;
}

TEST(TrainDistributed, SlurmEnvironmentIsPickedUp) {
  TempDir dir;  // the working directory: the derived file store goes here
  const auto args = lenet_args(dir / "run", 2, "terngrad");
  auto env = [](int rank) {
    return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(rank), "SLURM_NTASKS=2",
                                    "SLURM_JOB_ID=4242"};
  };
  const auto r =
      run_two_ranks(args, lenet_args(dir / "run1", 2, "terngrad"), env(0), env(1), dir.str());
  expect_ok(r[0], "rank 0");
  expect_ok(r[1], "rank 1");
  const json::Value s = summary_of(dir / "run");
  EXPECT_EQ(s["params_sha256"].as_string(), reference_sha(2, "terngrad"));
  EXPECT_NE(s["rendezvous"].as_string().find(dir.str() + "/.tg-rendezvous-slurm-4242"),
            std::string::npos)
      << s["rendezvous"].as_string();
}

TEST(TrainDistributed, MismatchedConfigIsRefusedAtStartUp) {
  TempDir dir;
  const std::string url = "file://" + (dir / "rdv");
  const auto r =
      run_two_ranks(plus(lenet_args(dir / "a", 2, "terngrad"), rank_flags(0, 2, url)),
                    plus(lenet_args(dir / "b", 2, "terngrad", 24, {"--set", "train.lr=0.02"}),
                         rank_flags(1, 2, url)));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r[i].exit_code, 1) << r[i].err;
    EXPECT_NE(r[i].err.find("runs another config than this rank"), std::string::npos) << r[i].err;
    EXPECT_NE(r[i].err.find("lr = 0.02"), std::string::npos) << r[i].err;
  }
  EXPECT_FALSE(fs::exists(dir / "a/summary.json"));
}

TEST(TrainDistributed, MismatchedWorldSizeAndMissingRankAreNamed) {
  TempDir dir;
  const std::string url = "file://" + (dir / "rdv");
  const std::vector<std::string> quick = {"--set", "comm.timeout=3"};
  const auto r =
      run_two_ranks(plus(lenet_args(dir / "a", 2, "terngrad", 24, quick), rank_flags(0, 2, url)),
                    plus(lenet_args(dir / "b", 3, "terngrad", 24, quick), rank_flags(1, 3, url)));
  EXPECT_EQ(r[0].exit_code, 1);
  EXPECT_NE(r[0].err.find("rank 1 was started with world size 3, this rank (0) with 2"),
            std::string::npos)
      << r[0].err;
  // The world-of-3 rank waits for a rank 2 that never comes.
  EXPECT_EQ(r[1].exit_code, 1);
  EXPECT_NE(r[1].err.find("rank(s) 2 of 3 did not arrive within 3 s"), std::string::npos)
      << r[1].err;
}

TEST(TrainDistributed, BadProcessCountsAreRefused) {
  TempDir dir;
  CliResult r = run_cli(plus(lenet_args(dir / "a", 2, "terngrad"), {"--nproc", "3"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--nproc 3: workers.count = 2 cannot be spread"), std::string::npos)
      << r.err;
  r = run_cli(plus(lenet_args(dir / "b", 2, "terngrad"),
                   {"--nproc", "2", "--rank", "0", "--world-size", "2"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot be combined with --rank"), std::string::npos) << r.err;
  r = run_cli(
      plus(lenet_args(dir / "c", 2, "terngrad"), {"--set", "comm.backend=nccl", "--nproc", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("comm.backend = \"nccl\" needs CUDA training"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "c/summary.json"));
}

}  // namespace
}  // namespace tg::testing
