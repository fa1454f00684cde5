// Gradient-exchange benchmark (issue 5 item 7, issue 14 item 8): the time to exchange ONE
// iteration's gradients of LeNet, AlexNet and VGG-A (their real per-tensor layouts, from
// make_net's parameter arena) between P processes, through the product's path only: what
// `terngrad train` runs per step, tern::aggregate with a tern::Compressor made by
// tern::make_compressor from the default CompressionOptions (method and --format aside), one
// worker per rank, flat f32 gradient in, averaged f32 gradient out. Cases:
//   fp32        method none: the exact reduce-scatter + allgather of terngrad/exchange/aggregate.h
//   (the fp32
//               path). Always measured first: it is the reference of every ratio below.
//   ps / packed-allreduce / allgather / auto
//               method terngrad (shared scalers): the ternary path, every ternary slot's codes in
//               ONE bucket through that algorithm (auto: the bucket cost model's pick), cut into
//               --chunk-bytes chunks decoded while the next is on the wire (the collectives on
//               a second thread that lives for the run, as the trainer's hook keeps one;
//               --no-overlap: one thread). --algos picks these.
//   fp32-ring   with --methods ring: method none through a plain ring allreduce
//               (comm.algorithm = ring: not bit-identical to one process).
//   fp16        with --methods: the exact reduce-scatter at 2 bytes per element, f32 back.
//   qsgd / onebit
//               with --methods: the generic path (whole messages allgathered).
// Per rep every rank times barrier-to-return with the harness's Stopwatch; a rep's time is the
// slowest rank's. The JSON line per case gives median/p10/p90 over reps, xchg_ms (the call minus
// its encode phase, AggregateStats::encode_s: the exchange proper) and encode_ms (that phase,
// slowest rank, median), the wire bytes of one call (AggregateStats::wire: rank 0's, the max and
// the mean over ranks), each rank's CPU time per call (Gloo's thread included; mean over ranks:
// P * cpu_ms close to cores * median_ms means CPU-bound, not link-bound), and the ratios against
// the fp32 case of the same run: bytes (fp32 sent / this sent, busiest rank), speedup (fp32
// median / this median) and xchg speedup (fp32 median / this xchg median). Before timing, every
// rank's `out` is hashed and must agree across ranks, and across the terngrad algorithms.
//
// Processes: P copies of this binary (fork + exec with the same arguments and --worker), meeting
// through a Gloo FileStore in a temp directory, Gloo over TCP:
//   --link loopback   127.0.0.1 (default);
//   --link RATE       (e.g. 1gbit, 100mbit) each rank in its own network namespace, joined by a
//                     veth pair to one bridge, each veth shaped with tc tbf to RATE both ways (a
//                     full-duplex NIC per node on a non-blocking switch). The namespaces, bridge,
//                     veths and qdiscs are made here and removed on exit, on error and on
//                     Ctrl-C/SIGTERM (and those a killed earlier run left behind); without root
//                     (CAP_NET_ADMIN + CAP_SYS_ADMIN) or `ip` / `tc` it says so and exits 1.
// Each worker runs with OMP_NUM_THREADS = max(1, cores / P) unless the environment sets it.
//
// Usage: bench_comm [--nets lenet,alexnet,vgg_a] [--procs 2,4,8]
//                   [--methods none,terngrad,...] [--algos ps,allgather,packed-allreduce,auto]
//                   [--reps 5] [--warmup 2] [--format two_bit|base3] [--link loopback|RATE]
//                   [--chunk-bytes 2097152] [--no-overlap] [--timeout-s 120] [--secret]
//                   [--sched batch|normal]
// --sched: the ranks' threads under SCHED_BATCH (default, as `terngrad train` runs Gloo ranks:
// comm.sched_batch, nn/core/cpu_env.h) or the default policy, under which Gloo's event loop
// spins when the ranks outnumber the cores.
// --secret: every rank authenticates the rendezvous and every message header with a job secret
// (comm/secret.h), as `terngrad train` does with comm.secret_file: its cost on the exchange.
// JSON lines on stdout (from rank 0 of each group), progress and a table on stderr.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/harness.h"
#include "comm/communicator.h"
#include "comm/secret.h"
#include "comm/store.h"
#include "comm/topology.h"
#include "nn/core/cpu_env.h"
#include "nn/core/error.h"
#include "nn/core/hash.h"
#include "nn/core/worker_thread.h"
#include "nn/nets/net.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"
#include "terngrad/exchange/plan.h"

namespace tg::bench {
namespace {

namespace fs = std::filesystem;

constexpr double kSmallCaseSeconds = 0.5;  // small cases repeat until about this long
constexpr int kMaxReps = 100;
const char* const kSubnet = "10.213.0.";  // rank r is kSubnet + (r + 1) under --link

// ---- options ---------------------------------------------------------------------------------

struct Options {
  std::vector<std::string> nets = {"lenet", "alexnet", "vgg_a"};
  std::vector<int> procs = {2, 4, 8};
  std::vector<std::string> methods = {"none", "terngrad"};  // none first, always
  std::vector<std::string> algos = {"ps", "allgather", "packed-allreduce", "sharded", "auto"};
  int reps = 5, warmup = 2;
  std::string format = "two_bit";
  std::string link = "loopback";
  int64_t chunk_bytes = tern::AggregateOptions{}.chunk_bytes;
  bool overlap = true;
  int timeout_s = 120;
  int nodes = 0;                // --nodes G: G ranks per node (0: no node layout)
  bool plan_only = false;       // --plan-only: the plan's bytes, no processes
  bool secret = false;          // --secret: a job secret authenticates the store and every header
  std::string sched = "batch";  // --sched: batch (SCHED_BATCH, the trainer's default) or normal
  // --worker: this process is rank `rank` of `size` for the case in `dir`, bound to `host`.
  bool worker = false;
  int rank = 0, size = 1;
  std::string dir, host;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? std::string(1, sep) : "") + v[i];
  return s;
}

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  TG_CHECK(!v.empty() && *end == '\0' && x >= lo && x <= hi, flag, ": expected an integer in [", lo,
           ", ", hi, "], got '", v, "'");
  return static_cast<int>(x);
}

tern::PackFormat parse_format(const std::string& s) {
  if (s == "two_bit") return tern::PackFormat::two_bit;
  if (s == "base3") return tern::PackFormat::base3;
  TG_THROW("--format: expected two_bit or base3, got '", s, "'");
}

// A tc rate ("1gbit", "100mbit", "500kbit", "2.5gbit") in bits per second; throws otherwise.
double parse_rate_bps(const std::string& s) {
  static const std::pair<const char*, double> kUnits[] = {
      {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1.0}};
  for (const auto& [unit, mult] : kUnits) {
    const size_t u = std::strlen(unit);
    if (s.size() > u && s.compare(s.size() - u, u, unit) == 0) {
      const std::string num = s.substr(0, s.size() - u);
      char* end = nullptr;
      const double x = std::strtod(num.c_str(), &end);
      // Digits and a point only: the rate goes into a tc command line.
      if (*end == '\0' && x > 0 && num.find_first_not_of("0123456789.") == std::string::npos)
        return x * mult;
    }
  }
  TG_THROW("--link: expected 'loopback' or a tc rate such as 1gbit, 100mbit, got '", s, "'");
}

constexpr const char* kUsage =
    "usage: bench_comm [--nets lenet,alexnet,vgg_a,tensor:N] [--procs 2,4,8]\n"
    "                  [--methods none,terngrad,fp16,qsgd,onebit,ring]\n"
    "                  [--algos ps,allgather,packed-allreduce,sharded,hierarchical,auto]\n"
    "                  [--reps 5] [--warmup 2] [--format two_bit|base3]\n"
    "                  [--link loopback|RATE e.g. 1gbit] [--nodes G] [--chunk-bytes N]\n"
    "                  [--no-overlap] [--timeout-s 120] [--plan-only] [--secret]\n"
    "                  [--sched batch|normal]\n";

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      TG_CHECK(i + 1 < argc, a, ": missing value");
      return argv[++i];
    };
    if (a == "--nets") {
      o.nets = split(value(), ',');
    } else if (a == "--procs") {
      o.procs.clear();
      for (const auto& p : split(value(), ',')) o.procs.push_back(parse_int(a, p, 2, 1024));
    } else if (a == "--methods") {
      o.methods = {"none"};  // the reference of the ratios, measured first
      auto known = tern::compressor_names();
      known.push_back("ring");  // none through a plain ring allreduce
      for (const auto& m : split(value(), ',')) {
        TG_CHECK(std::find(known.begin(), known.end(), m) != known.end(), a, ": unknown method '",
                 m, "'; known: ", join(known, ','));
        if (m != "none") o.methods.push_back(m);
      }
    } else if (a == "--algos") {
      o.algos.clear();
      for (const auto& x : split(value(), ','))
        if (x != "fp32") {  // fp32 is always run; the name stays accepted
          parse_enum(tern::kAlgorithms, x, "--algos");  // throws listing the known names
          o.algos.push_back(x);
        }
    } else if (a == "--reps") {
      o.reps = parse_int(a, value(), 1, 1000);
    } else if (a == "--warmup") {
      o.warmup = parse_int(a, value(), 1, 100);
    } else if (a == "--format") {
      o.format = value();
      parse_format(o.format);
    } else if (a == "--link") {
      o.link = value();
      if (o.link != "loopback") parse_rate_bps(o.link);
    } else if (a == "--chunk-bytes") {
      o.chunk_bytes = parse_int(a, value(), 0, 1 << 30);
    } else if (a == "--no-overlap") {
      o.overlap = false;
    } else if (a == "--nodes") {
      o.nodes = parse_int(a, value(), 1, 64);
    } else if (a == "--plan-only") {
      o.plan_only = true;
    } else if (a == "--secret") {
      o.secret = true;
    } else if (a == "--sched") {
      o.sched = value();
      TG_CHECK(o.sched == "batch" || o.sched == "normal", a, ": expected batch or normal, got '",
               o.sched, "'");
    } else if (a == "--timeout-s") {
      o.timeout_s = parse_int(a, value(), 1, 3600);
    } else if (a == "--worker") {  // added by run_ranks, after the user's arguments
      o.worker = true;
      o.dir = value();
      o.rank = parse_int(a, value(), 0, 1023);
      o.size = parse_int(a, value(), 1, 1024);
      o.host = value();
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stderr);
      std::exit(0);
    } else {
      TG_THROW("unknown argument '", a, "' (see --help)");
    }
  }
  TG_CHECK(!o.nets.empty() && !o.procs.empty(), "--nets and --procs need at least one entry each");
  TG_CHECK(!o.algos.empty() ||
               std::find(o.methods.begin(), o.methods.end(), "terngrad") == o.methods.end(),
           "--algos: terngrad needs at least one ternary algorithm");
  return o;
}

// ---- one rank ---------------------------------------------------------------------------------

// One exchange to time: `method` through tern::aggregate with ternary algorithm `algo`;
// `label` names it in the table and as the JSON "algo" (fp32, a ternary algorithm, the method).
struct Case {
  std::string label, method;
  tern::Route algo = tern::Route::automatic;  // ring: method none by a plain ring allreduce
};

std::vector<Case> make_cases(const Options& o) {
  std::vector<Case> cases;
  for (const auto& m : o.methods) {
    if (m == "none") {
      cases.push_back({"fp32", m});
    } else if (m == "ring") {
      cases.push_back({"fp32-ring", "none", tern::Route::ring});
    } else if (m == "terngrad") {
      for (const auto& a : o.algos)
        cases.push_back({a, m, parse_enum(tern::kAlgorithms, a, "--algos")});
    } else {
      cases.push_back({m, m});
    }
  }
  return cases;
}

// A gradient-like f32 vector per rank: a block of normals permuted per rank and tensor (cheap for
// 10^8 elements; the values only set the code density, the wire sizes do not depend on them).
void fill_gradient(const std::vector<tern::GradSlot>& layout, int rank, float* g) {
  constexpr int64_t kBlock = 1 << 20;
  static const std::vector<float> block = [] {
    std::vector<float> b(kBlock);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& v : b) v = d(rng);
    return b;
  }();
  for (size_t t = 0; t < layout.size(); ++t) {
    const float scale = 1e-3f * static_cast<float>(1 + t % 3);
    const int64_t shift = 7919 * rank + 131 * static_cast<int64_t>(t);
    float* dst = g + layout[t].offset;
    for (int64_t i = 0; i < layout[t].numel; ++i)
      dst[i] = scale * block[(i * 40503 + shift) & (kBlock - 1)];
  }
}

// The layout file the launcher writes: one "name offset numel" line per tensor.
std::vector<tern::GradSlot> read_layout(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in, "cannot open layout file ", path);
  std::vector<tern::GradSlot> layout;
  tern::GradSlot s;
  while (in >> s.name >> s.offset >> s.numel) layout.push_back(s);
  TG_CHECK(!layout.empty(), path, ": no tensors");
  return layout;
}

// What rank 0 keeps of the fp32 case for the ratios.
struct Reference {
  double median_ms = 0;
  uint64_t sent_max = 0;
};

// One timed exchange on one rank.
struct Sample {
  double ms, encode_ms, cpu_ms;
};

// Every rank's samples of one case and its wire bytes, gathered on every rank.
struct CaseResult {
  int reps = 0;
  std::vector<Sample> samples;  // rank r's rep i at r * reps + i
  std::vector<uint64_t> wire;   // rank r's sent, received at 2r, 2r + 1, ... across nodes at
                                // 2P + 2r, 2P + 2r + 1
  tern::AggregateStats stats;   // this rank's last call
};

// The warm-up call's result must be the same on every rank (and for every terngrad algorithm:
// integer code sums are exact in any order); throws naming the case otherwise.
void check_same_result(comm::Communicator& comm, const Case& c, const Tensor& out,
                       std::optional<uint64_t>& terngrad_hash) {
  const uint64_t h =
      fnv1a64(std::string_view(reinterpret_cast<const char*>(out.data<float>()), out.numel() * 4));
  std::vector<uint64_t> all(comm.size());
  comm.allgather(&h, all.data(), sizeof(h));
  for (int r = 0; r < comm.size(); ++r)
    TG_CHECK(all[r] == h, c.label, ": rank ", r, "'s averaged gradient differs from rank ",
             comm.rank(), "'s (hash ", all[r], " vs ", h, ")");
  if (c.method == "terngrad" && !terngrad_hash) terngrad_hash = h;
  TG_CHECK(c.method != "terngrad" || h == *terngrad_hash, c.label,
           ": averaged gradient differs from the first terngrad algorithm's (not exact)");
}

// Runs one case on this rank: warm-up (checking the result), repetitions (as many on every
// rank; small cases until ~kSmallCaseSeconds), and every rank's samples gathered.
CaseResult run_case(const Options& o, comm::Communicator& comm, const Case& c,
                    const std::vector<tern::GradSlot>& layout, const std::vector<Tensor>& grad,
                    Tensor& out, WorkerThread& collectives, std::optional<uint64_t>& tg_hash) {
  tern::AggregateOptions ao;
  ao.algorithm = c.algo;
  ao.chunk_bytes = o.chunk_bytes;
  ao.overlap = o.overlap;
  if (o.nodes > 0) ao.nodes = comm::NodeLayout::blocks(comm.size(), o.nodes);
  tern::CompressionOptions co;
  co.method = parse_enum(tern::kMethods, c.method, "method");
  co.pack = parse_format(o.format);
  const std::unique_ptr<tern::Compressor> compressor = tern::make_compressor(co, layout);
  CaseResult res;
  auto exchange = [&] {
    comm.barrier();
    const Stopwatch clock;
    res.stats = tern::aggregate(*compressor, comm, grad, 0, out, ao, {}, &collectives);
    return Sample{clock.ms(), 1e3 * res.stats.encode_s, clock.cpu_ms()};
  };
  float warm_ms = 0;
  for (int w = 0; w < o.warmup; ++w) {
    warm_ms = static_cast<float>(exchange().ms);
    if (w == 0) check_same_result(comm, c, out, tg_hash);
  }
  comm.allreduce(&warm_ms, 1, DType::f32, comm::ReduceOp::max);
  res.reps = o.reps;
  if (warm_ms > 0)
    res.reps = std::clamp(static_cast<int>(std::ceil(kSmallCaseSeconds * 1e3 / warm_ms)), o.reps,
                          std::max(o.reps, kMaxReps));
  comm.broadcast(&res.reps, sizeof(res.reps), 0);

  std::vector<Sample> mine(res.reps);
  for (Sample& s : mine) s = exchange();
  const int P = comm.size();
  res.samples.resize(static_cast<size_t>(res.reps) * P);
  comm.allgather(mine.data(), res.samples.data(), res.reps * sizeof(Sample));
  const uint64_t my_wire[2] = {res.stats.wire.sent, res.stats.wire.received};  // one call's
  const uint64_t my_inter[2] = {res.stats.inter_wire.sent, res.stats.inter_wire.received};
  res.wire.resize(4 * P);
  comm.allgather(my_wire, res.wire.data(), sizeof(my_wire));
  comm.allgather(my_inter, res.wire.data() + 2 * P, sizeof(my_inter));
  return res;
}

// Rank 0's report of one case: a rep's time is the slowest rank's; ratios against the fp32 case.
void report_case(const Options& o, const Case& c, const CaseResult& res, int P,
                 const std::vector<tern::GradSlot>& layout, int64_t n, double load1,
                 Reference& ref) {
  const std::string net = fs::path(o.dir).filename().string();  // NET_P<P>, made by launch()
  const int reps = res.reps;
  std::vector<double> slowest(reps, 0.0), slowest_xchg(reps, 0.0), slowest_enc(reps, 0.0);
  double cpu_ms = 0;
  for (int r = 0; r < P; ++r)
    for (int i = 0; i < reps; ++i) {
      const Sample& s = res.samples[static_cast<size_t>(r) * reps + i];
      slowest[i] = std::max(slowest[i], s.ms);
      slowest_xchg[i] = std::max(slowest_xchg[i], s.ms - s.encode_ms);
      slowest_enc[i] = std::max(slowest_enc[i], s.encode_ms);
      cpu_ms += s.cpu_ms / reps / P;
    }
  uint64_t sent_max = 0, recv_max = 0, inter_sent_max = 0;
  double sent_mean = 0, recv_mean = 0;
  // Bytes across each node's boundary (sent + received by its ranks to and from other nodes).
  std::vector<uint64_t> node_link(
      static_cast<size_t>(o.nodes > 0 ? (P + o.nodes - 1) / o.nodes : 0));
  for (int r = 0; r < P; ++r) {
    sent_max = std::max(sent_max, res.wire[2 * r]);
    recv_max = std::max(recv_max, res.wire[2 * r + 1]);
    inter_sent_max = std::max(inter_sent_max, res.wire[2 * P + 2 * r]);
    if (!node_link.empty())
      node_link[static_cast<size_t>(r / o.nodes)] +=
          res.wire[2 * P + 2 * r] + res.wire[2 * P + 2 * r + 1];
    sent_mean += static_cast<double>(res.wire[2 * r]) / P;
    recv_mean += static_cast<double>(res.wire[2 * r + 1]) / P;
  }
  const Timing t = summarize(slowest);
  const double xchg = percentile(slowest_xchg, 0.5), enc = percentile(slowest_enc, 0.5);
  if (c.method == "none" && c.algo != tern::Route::ring) ref = {t.median_ms, sent_max};
  const double bytes_x = sent_max ? static_cast<double>(ref.sent_max) / sent_max : 0;
  const double speedup = ref.median_ms / t.median_ms, xchg_x = ref.median_ms / xchg;

  JsonLine line;
  line.add("bench", "comm").add("net", net.substr(0, net.rfind("_P"))).add("params", n);
  line.add("tensors", layout.size()).add("procs", P);
  line.add("layout", "per-tensor").add("path", "product").add("method", c.method);
  line.add("chunk_bytes", o.chunk_bytes).add("overlap", o.overlap ? "on" : "off");
  line.add("link", o.link).add("format", o.format).add("algo", c.label);
  line.add("secret", o.secret).add("sched", o.sched);
  if (res.stats.ternary_path && c.algo == tern::Route::automatic)
    line.add("auto_picks", std::string(tern::name(res.stats.bucket_route)) + "=1");
  line.add_timing(t);
  line.add("sent_rank0", res.wire[0]).add("recv_rank0", res.wire[1]);
  line.add("sent_max", sent_max).add("recv_max", recv_max);
  line.add("sent_mean", std::llround(sent_mean)).add("recv_mean", std::llround(recv_mean));
  if (o.nodes > 0) {
    const int m = static_cast<int>(node_link.size());
    line.add("nodes", m).add("ranks_per_node", o.nodes);
    line.add("sent_across_nodes_max", inter_sent_max);
    line.add("node_link_bytes_max", *std::max_element(node_link.begin(), node_link.end()));
    // The reference for the node links: a hierarchical fp32 ring (Horovod's: reduce inside the
    // node, ring allreduce of the node sums across the M nodes, broadcast inside), each node
    // sending and receiving 2 (M - 1) / M of 4n bytes.
    line.add("fp32_hierarchical_node_link_bytes",
             std::llround(2.0 * 2.0 * (m - 1) / m * 4.0 * static_cast<double>(n)));
  }
  line.add("cpu_ms_per_rank", cpu_ms).add("xchg_ms", xchg).add("encode_ms", enc);
  line.add("bytes_ratio_vs_fp32", bytes_x).add("speedup_vs_fp32", speedup);
  line.add("xchg_speedup_vs_fp32", xchg_x);
  line.add("load1", load1).add("cpu", cpu_model());
  line.print();
  std::fprintf(stderr, "%-12s %-16s %9.2f %9.2f %9.2f %9.2f %4d %10.3f %7.2f %7.2f %7.2f %8.1f\n",
               net.c_str(), c.label.c_str(), t.median_ms, t.p90_ms, xchg, enc, reps,
               static_cast<double>(sent_max) / 1e6, bytes_x, speedup, xchg_x, cpu_ms);
}

int worker_main(const Options& o) {
  const std::vector<tern::GradSlot> layout = read_layout(o.dir + "/layout.txt");
  const int64_t n = layout.back().offset + layout.back().numel;
  const std::chrono::milliseconds timeout(1000LL * o.timeout_s);
  auto store = comm::open_store("file://" + o.dir + "/store", timeout);
  comm::CommOptions co;
  if (o.secret) {  // what the trainer does with comm.secret_file (comm/secret.h), fixed bytes
    co.mac_key = comm::job_mac_key("bench_comm --secret: a fixed test secret", "bench");
    store = comm::signed_store(std::move(store), *co.mac_key);
  }
  co.backend = comm::Backend::gloo;
  co.rank = o.rank;
  co.size = o.size;
  co.hostname = o.host;
  co.timeout = timeout;
  auto comm = comm::make_communicator(co, *store, "bench");
  if (o.sched == "batch") use_batch_scheduling();  // as the trainer does (comm.sched_batch)
  const bool lead = comm->rank() == 0;

  std::vector<Tensor> grad = {Tensor::empty({n})};
  fill_gradient(layout, o.rank, grad[0].data<float>());
  Tensor out = Tensor::empty({n});
  double load[3] = {0, 0, 0};
  ::getloadavg(load, 3);
  Reference ref;
  WorkerThread collectives;  // the ternary path's chunk collectives, as the trainer's hook has
  std::optional<uint64_t> terngrad_hash;  // the first terngrad algorithm's result: others match
  if (lead)
    std::fprintf(stderr, "%-12s %-16s %9s %9s %9s %9s %4s %10s %7s %7s %7s %8s\n", "case", "algo",
                 "median_ms", "p90_ms", "xchg_ms", "enc_ms", "reps", "sentmax_MB", "bytes_x",
                 "speedup", "xchg_x", "cpu_ms");
  for (const Case& c : make_cases(o)) {
    const CaseResult res = run_case(o, *comm, c, layout, grad, out, collectives, terngrad_hash);
    if (lead) report_case(o, c, res, comm->size(), layout, n, load[0], ref);
  }
  comm->barrier();
  return 0;
}

// ---- launcher: signals, network namespaces, processes ------------------------------------------

std::atomic<int> g_signal{0};

void on_signal(int sig) {
  g_signal = sig;
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid returns EINTR so the main loop sees the signal
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

struct Interrupted : std::runtime_error {
  explicit Interrupted(int sig)
      : std::runtime_error(std::string("interrupted by ") + strsignal(sig)) {}
};

void check_signal() {
  if (const int sig = g_signal.load()) throw Interrupted(sig);
}

// Runs a shell command line (built only from our own names and numbers), returns its exit status
// and output; throws when `check` and it fails.
int run_cmd(const std::string& cmd, bool check, std::string* output = nullptr) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  TG_CHECK(p, "cannot run `", cmd, "`: ", std::strerror(errno));
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  const int st = ::pclose(p);
  const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  if (output) *output = out;
  TG_CHECK(!check || rc == 0, "`", cmd, "` failed (exit ", rc, "): ", out);
  return rc;
}

// The full path of an executable in PATH or the usual sbin folders, "" when there is none.
std::string find_in_path(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  for (const auto& d : split(path, ':'))
    if (::access((d + "/" + name).c_str(), X_OK) == 0) return d + "/" + name;
  return "";
}

bool has_capability(int cap) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
  return false;
}

// Namespaces tgbench<pid>_<r>, bridge tgb<pid>br, veths tgb<pid>n<r> (in the namespace) /
// tgb<pid>h<r> (on the bridge); removed by the destructor (and by remove_stale for dead pids).
class NetLab {
 public:
  NetLab(int ranks, const std::string& rate)
      : pid_(std::to_string(::getpid())), ip_(find_in_path("ip")), tc_(find_in_path("tc")) {
    check_privilege();
    remove_stale();
    const double bps = parse_rate_bps(rate);
    // tbf needs a bucket of at least one (GSO) packet; ~1 ms of traffic at the rate, >= 128 KiB.
    const long burst = std::max(128L * 1024, static_cast<long>(bps / 8 / 1000));
    try {
      run_cmd(ip_ + " link add " + bridge() + " type bridge", true);
      bridge_made_ = true;
      run_cmd(ip_ + " link set " + bridge() + " up", true);
      for (int r = 0; r < ranks; ++r) {
        check_signal();
        run_cmd(ip_ + " netns add " + ns(r), true);
        made_.push_back(r);
        run_cmd(ip_ + " link add " + inner(r) + " type veth peer name " + outer(r), true);
        run_cmd(ip_ + " link set " + inner(r) + " netns " + ns(r), true);
        run_cmd(ip_ + " link set " + outer(r) + " master " + bridge() + " up", true);
        run_cmd(ip_ + " -n " + ns(r) + " addr add " + address(r) + "/24 dev " + inner(r), true);
        run_cmd(ip_ + " -n " + ns(r) + " link set " + inner(r) + " up", true);
        run_cmd(ip_ + " -n " + ns(r) + " link set lo up", true);
        const std::string tbf =
            " root tbf rate " + rate + " burst " + std::to_string(burst) + " latency 50ms";
        run_cmd(tc_ + " -n " + ns(r) + " qdisc add dev " + inner(r) + tbf, true);  // rank -> switch
        run_cmd(tc_ + " qdisc add dev " + outer(r) + tbf, true);                   // switch -> rank
      }
      std::string show;
      run_cmd(tc_ + " -n " + ns(0) + " qdisc show dev " + inner(0), true, &show);
      std::fprintf(stderr, "netns: %d namespaces on bridge %s, each veth shaped both ways: %s",
                   ranks, bridge().c_str(), show.c_str());
    } catch (...) {
      cleanup();
      throw;
    }
  }
  ~NetLab() { cleanup(); }
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  std::string ns(int r) const { return "tgbench" + pid_ + "_" + std::to_string(r); }
  static std::string address(int r) { return kSubnet + std::to_string(r + 1); }

 private:
  std::string bridge() const { return "tgb" + pid_ + "br"; }
  std::string inner(int r) const { return "tgb" + pid_ + "n" + std::to_string(r); }
  std::string outer(int r) const { return "tgb" + pid_ + "h" + std::to_string(r); }

  void check_privilege() const {
    std::vector<std::string> missing;
    if (ip_.empty()) missing.push_back("ip");
    if (tc_.empty()) missing.push_back("tc");
    TG_CHECK(missing.empty(),
             "--link needs the iproute2 tools; not found in PATH: ", join(missing, ','),
             " (install iproute2, or run with --link loopback)");
    constexpr int kCapNetAdmin = 12, kCapSysAdmin = 21;
    std::vector<std::string> lacking;
    if (!has_capability(kCapNetAdmin)) lacking.push_back("CAP_NET_ADMIN");
    if (!has_capability(kCapSysAdmin)) lacking.push_back("CAP_SYS_ADMIN");
    TG_CHECK(lacking.empty(), "--link needs CAP_NET_ADMIN and CAP_SYS_ADMIN to create network ",
             "namespaces, veth pairs and tc qdiscs; this process (euid ", ::geteuid(), ") lacks ",
             join(lacking, ','), ". Run it as root (sudo), or with --link loopback");
  }

  // Namespaces and bridges of earlier runs whose process is gone (killed with SIGKILL).
  void remove_stale() const {
    auto dead = [](const std::string& pid) {
      return !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos &&
             ::kill(std::stoi(pid), 0) != 0 && errno == ESRCH;
    };
    std::string out, line;
    if (run_cmd(ip_ + " netns list", false, &out) == 0) {
      std::istringstream is(out);
      while (std::getline(is, line)) {
        const std::string name = line.substr(0, line.find(' '));
        if (name.rfind("tgbench", 0) == 0 && dead(name.substr(7, name.find('_') - 7))) {
          std::fprintf(stderr, "netns: removing %s left by a dead run\n", name.c_str());
          run_cmd(ip_ + " netns del " + name, false);
        }
      }
    }
    if (run_cmd(ip_ + " -o link show type bridge", false, &out) == 0) {
      std::istringstream is(out);
      while (std::getline(is, line)) {
        const size_t a = line.find(": tgb"), b = line.find("br:");
        if (a == std::string::npos || b == std::string::npos || b < a) continue;
        const std::string pid = line.substr(a + 5, b - a - 5);
        if (dead(pid)) run_cmd(ip_ + " link del tgb" + pid + "br", false);
      }
    }
  }

  void cleanup() {
    for (int r : made_) {
      run_cmd(ip_ + " link del " + outer(r), false);  // takes its peer inside the namespace with it
      run_cmd(ip_ + " netns del " + ns(r), false);
    }
    made_.clear();
    if (bridge_made_) run_cmd(ip_ + " link del " + bridge(), false);
    bridge_made_ = false;
  }

  std::string pid_, ip_, tc_;  // ip_, tc_: full paths of the iproute2 tools
  std::vector<int> made_;
  bool bridge_made_ = false;
};

// Starts P ranks: fork + exec of this binary with the user's arguments plus "--worker DIR RANK P
// HOST" (exec, not a bare fork: the parent has run OpenMP code, which a forked child cannot
// reuse), each in its namespace when `lab` is set, and waits. When one fails the others get
// SIGTERM; throws naming the first failed rank.
void run_ranks(const std::vector<std::string>& argv, const std::string& dir, int P,
               const NetLab* lab, int ranks_per_node) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string omp = std::to_string(std::max(1, cores / P));
  static const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids(P, -1);
  auto terminate_all = [&] {
    for (pid_t p : pids)
      if (p > 0) ::kill(p, SIGTERM);
  };
  std::string failure;
  int live = 0;
  for (int r = 0; r < P; ++r) {
    std::vector<std::string> args = argv;
    // With --nodes the ranks of a node share its namespace (and address): what they send each
    // other stays on that host's loopback, what crosses nodes goes through the shaped veths.
    const int host = ranks_per_node > 0 ? r / ranks_per_node : r;
    for (const std::string& a : {std::string("--worker"), dir, std::to_string(r), std::to_string(P),
                                 lab ? NetLab::address(host) : "127.0.0.1"})
      args.push_back(a);
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    const std::string ns_path = lab ? "/run/netns/" + lab->ns(host) : "";
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      failure = "fork of rank " + std::to_string(r) + " failed: " + std::strerror(errno);
      terminate_all();
      break;
    }
    if (pid == 0) {
      if (lab) {
        const int fd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
          std::fprintf(stderr, "rank %d: cannot enter %s: %s\n", r, ns_path.c_str(),
                       std::strerror(errno));
          ::_exit(126);
        }
      }
      for (const auto& [var, val] :
           {std::pair{"OMP_NUM_THREADS", omp.c_str()}, std::pair{"OMP_WAIT_POLICY", "passive"}}) {
        const char* set = std::getenv(var);
        if (!set || !*set) ::setenv(var, val, 1);  // empty counts as unset (libgomp rejects it)
      }
      ::execv(self.c_str(), cargs.data());
      std::fprintf(stderr, "rank %d: exec %s failed: %s\n", r, self.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    pids[r] = pid;
    ++live;
  }
  while (live > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid < 0 && errno == EINTR && g_signal.load()) {
      terminate_all();
      while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
      }
      check_signal();
    }
    if (pid < 0 && errno == ECHILD) break;
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (pid < 0 || it == pids.end()) continue;
    *it = -1;
    --live;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && failure.empty()) {
      failure = "rank " + std::to_string(it - pids.begin()) +
                (WIFEXITED(st) ? " exited with status " + std::to_string(WEXITSTATUS(st))
                               : std::string(" was killed by ") + strsignal(WTERMSIG(st)));
      terminate_all();
    }
  }
  check_signal();
  TG_CHECK(failure.empty(), dir, ": ", failure, " (its error is printed above)");
}

// Namespaces (hosts) the lab needs: one per node of the largest P (one per rank without --nodes).
int lab_hosts(const Options& o) {
  const int p = *std::max_element(o.procs.begin(), o.procs.end());
  return o.nodes > 0 ? (p + o.nodes - 1) / o.nodes : p;
}

// --plan-only: the bytes of one exchange of every net, P and case from the plans the routes run
// (terngrad/exchange/plan.h; the tests check that the communicators count exactly these), with
// no process started: for P and nets too large for this machine (AlexNet at P = 64 needs 64
// copies of its 244 MB gradient). fp32 is the exact reduce-scatter + allgather of
// terngrad/exchange/aggregate.h: (P - 1) blocks of ceil(n / P) floats each way, twice.
int plan_only(const Options& o) {
  tern::CompressionOptions co;
  co.method = tern::Method::terngrad;
  co.pack = parse_format(o.format);
  for (const auto& net : o.nets) {
    const std::unique_ptr<Net> model = make_net(net, NetOptions{}, Device::cpu());
    std::vector<tern::GradSlot> layout;
    std::vector<int64_t> numel;
    int64_t n = 0;
    for (const auto& e : model->arena().entries()) {
      layout.push_back({e.name, e.offset, e.numel});
      numel.push_back(e.numel);
      n += e.numel;
    }
    const auto compressor = tern::make_compressor(co, layout);
    const auto t = static_cast<uint64_t>(compressor->num_meta());
    for (int P : o.procs) {
      const auto p = static_cast<uint64_t>(P);
      const uint64_t range = (static_cast<uint64_t>(n) + p - 1) / p;
      const uint64_t fp32 = 2 * (p - 1) * 4 * range;
      const int m = o.nodes > 0 ? (P + o.nodes - 1) / o.nodes : 0;
      auto emit = [&](const std::string& algo, const std::string& method, uint64_t sent,
                      const tern::TernaryCost* cost) {
        JsonLine line;
        line.add("bench", "comm").add("mode", "plan").add("net", net).add("params", n);
        line.add("tensors", layout.size()).add("procs", P).add("method", method);
        line.add("algo", algo).add("format", o.format).add("chunk_bytes", o.chunk_bytes);
        line.add("sent_max", sent).add("bytes_ratio_vs_fp32", static_cast<double>(fp32) / sent);
        if (m > 0 && cost) {
          line.add("nodes", m).add("ranks_per_node", o.nodes);
          line.add("node_link_bytes_max", cost->busiest_link);
          line.add("fp32_hierarchical_node_link_bytes",
                   std::llround(2.0 * 2.0 * (m - 1) / m * 4.0 * static_cast<double>(n)));
        }
        line.print();
        std::fprintf(stderr, "%-8s P=%-5d %-18s sent_max %12llu  bytes_x %6.2f\n", net.c_str(), P,
                     algo.c_str(), static_cast<unsigned long long>(sent),
                     static_cast<double>(fp32) / sent);
      };
      emit("fp32", "none", fp32, nullptr);
      tern::TernaryBucketShape shape{numel, P, 1, co.pack, "local", o.chunk_bytes};
      if (o.nodes > 0) shape.nodes = comm::NodeLayout::blocks(P, o.nodes);
      const uint64_t meta = (p - 1) * 4 * t;  // the scalers' allgather
      for (const std::string& a : o.algos) {
        tern::Route r = parse_enum(tern::kAlgorithms, a, "--algos");
        if (r == tern::Route::allgather) {  // the generic path: whole messages
          const uint64_t msg = (compressor->payload_bytes(0) + 3) / 4 * 4;
          emit(a, "terngrad", meta + (p - 1) * msg, nullptr);
          continue;
        }
        if (r == tern::Route::automatic || r == tern::Route::ring)
          r = tern::choose_bucket_route(shape);
        const tern::TernaryCost cost = tern::ternary_bucket_cost(r, shape, 0);
        emit(a == "auto" ? "auto=" + std::string(tern::name(r)) : a, "terngrad",
             meta + cost.sent_max, &cost);
      }
    }
  }
  return 0;
}

int launch(const Options& o, const std::vector<std::string>& argv) {
  if (o.plan_only) return plan_only(o);
  install_signal_handlers();
  const auto names = net_names();
  for (const auto& name : o.nets) {  // fail fast on an unknown net
    if (name.rfind("tensor:", 0) == 0) {
      parse_int("--nets", name.substr(7), 1, 1 << 30);
      continue;
    }
    TG_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "--nets: unknown net '",
             name, "'; known: ", join(names, ','), ", tensor:N");
  }
  std::unique_ptr<NetLab> lab;
  if (o.link != "loopback") lab = std::make_unique<NetLab>(lab_hosts(o), o.link);
  char tmpl[] = "/tmp/bench_comm.XXXXXX";
  TG_CHECK(::mkdtemp(tmpl), "mkdtemp failed: ", std::strerror(errno));
  struct RemoveDir {
    std::string d;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } root{tmpl};

  std::fprintf(stderr, "bench_comm: %s, %u cores, link %s, format %s, store %s\n",
               cpu_model().c_str(), std::thread::hardware_concurrency(), o.link.c_str(),
               o.format.c_str(), root.d.c_str());
  int failures = 0;
  for (const auto& net : o.nets) {
    check_signal();
    std::string layout;
    int64_t params = 0, tensors = 0;
    if (net.rfind("tensor:", 0) == 0) {
      // One tensor of N elements: the fixed cost of a call (a phase's messages and handshakes),
      // for the simulator's per-message constant (bench/sim_check.py).
      params = parse_int("--nets", net.substr(7), 1, 1 << 30);
      tensors = 1;
      layout = "t 0 " + std::to_string(params) + "\n";
    } else {
      const std::unique_ptr<Net> model = make_net(net, NetOptions{}, Device::cpu());
      for (const auto& e : model->arena().entries()) {
        layout += e.name + ' ' + std::to_string(e.offset) + ' ' + std::to_string(e.numel) + '\n';
        params += e.numel;
        ++tensors;
      }
    }
    std::fprintf(stderr, "%s: %lld parameters in %lld tensors\n", net.c_str(),
                 static_cast<long long>(params), static_cast<long long>(tensors));
    for (int P : o.procs) {
      check_signal();
      const std::string dir = root.d + "/" + net + "_P" + std::to_string(P);
      fs::create_directories(dir);
      std::ofstream(dir + "/layout.txt") << layout;
      try {
        run_ranks(argv, dir, P, lab.get(), o.nodes);
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "FAILED %s P=%d: %s\n", net.c_str(), P, e.what());
        ++failures;
      }
    }
  }
  std::fprintf(stderr,
               "(link %s; bytes_x = fp32 sent / this sent, busiest rank; speedup = fp32 median / "
               "this median; xchg = the call minus its encode phase, xchg_x = fp32 median / xchg "
               "median; cpu_ms = CPU time per call per rank, mean over ranks)\n",
               o.link.c_str());
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  using namespace tg::bench;
  try {
    const Options o = parse_args(argc, argv);
    if (o.worker) return worker_main(o);
    return launch(o, std::vector<std::string>(argv, argv + argc));
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "bench_comm: %s; ranks stopped, namespaces and temp files removed\n",
                 e.what());
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm: %s\n", e.what());
    return 1;
  }
}
