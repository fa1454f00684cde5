// Gradient-exchange benchmark (issue 5, item 7): the time to exchange ONE iteration's gradients of
// LeNet, AlexNet and VGG-A (their real per-tensor layouts, from make_net's parameter arena) between
// P processes, for fp32 ring allreduce and for TernGrad with each exact ternary collective
// (comm/ternary_collectives.h), with the bytes each rank put on and took off the wire.
//
// What one iteration's exchange is, per case:
//   fp32              one Gloo ring allreduce (sum) of the whole flat f32 gradient (n elements,
//                     the arena is contiguous, so one call: fp32's best case);
// --path product (default): what training runs, comm::aggregate_distributed with a terngrad
//   Compressor (shared scalers, --format codes, every tensor ternary) on the flat f32 gradient,
//   one worker per rank, into the averaged f32 gradient `out`:
//   ps / packed-      the ternary path: scaler meta allgather, encode, ONE bucket of every
//   allreduce / auto  tensor's codes through that algorithm (auto: the bucket cost model's pick),
//                     cut into --chunk-bytes chunks decoded while the next is on the wire
//                     (--no-overlap: one thread), finalize;
//   allgather         the generic path: whole messages allgathered, Compressor::accumulate.
//   time_ms is the whole call; xchg_ms the call minus its encode phase (local_meta + encode,
//   AggregateStats::encode_s): the exchange proper, comparable with fp32's allreduce, which has
//   nothing to encode. Every rank's `out` is hashed and must agree across ranks and algorithms.
// --path collectives: the per-tensor collectives alone (codes made before timing):
//   ps / allgather /  one max-allreduce of the T per-tensor scalers (T floats, one call: each
//   packed-allreduce  tensor keeps its own scaler), then per tensor ternary_aggregate of this
//   / auto            rank's packed codes into an int32 accumulator. The codes come from
//                     ternarize_pack_cpu with the shared scalers, made once before timing (the
//                     encode cost is reported apart, as encode_ms, measured in one process).
//                     auto picks per tensor; the picks are reported.
// The exchange time of one rep is the slowest rank's (each rank times barrier-to-return). The
// JSON line gives median/p10/p90 over reps; the wire bytes per rank of one rep from the
// communicator's wire() counters (rank 0's, the max and the mean over ranks); the bytes ratio
// fp32 / this (sent, busiest rank) and the speedup fp32 / this (median time); and each rank's
// CPU time per exchange, Gloo's network thread included (mean over ranks: with P ranks on C
// cores, P * cpu_ms close to C * median_ms means the exchange was CPU-bound, not link-bound).
// All algorithms' results are checked bit-identical (a hash on every rank) before timing.
//
// Processes: the benchmark forks itself into P ranks (fork + exec of its own binary with
// --worker) meeting through a Gloo FileStore in a temp directory, Gloo over TCP:
//   --link loopback   127.0.0.1 (default);
//   --link RATE       (e.g. 1gbit, 100mbit) every rank in its own network namespace, joined by a
//                     veth pair to one bridge, each veth shaped with tc tbf to RATE in both
//                     directions (a full-duplex NIC per node on a non-blocking switch). The
//                     benchmark creates the namespaces, bridge, veths and qdiscs itself and
//                     removes them on exit, on error and on Ctrl-C/SIGTERM (and removes those a
//                     killed earlier run left behind); without root / CAP_NET_ADMIN +
//                     CAP_SYS_ADMIN or without `ip` / `tc` it says so and exits non-zero.
// Each worker runs with OMP_NUM_THREADS = max(1, cores / P) unless the environment sets it, so P
// ranks on one small machine do not oversubscribe it (the load average is reported per case).
//
// Usage: bench_comm [--nets lenet,alexnet,vgg_a] [--procs 2,4,8]
//                   [--algos fp32,ps,allgather,packed-allreduce,auto] [--reps 5] [--warmup 2]
//                   [--format two_bit|base3] [--link loopback|1gbit] [--layout per-tensor|flat]
//                   [--path product|collectives] [--chunk-bytes 2097152] [--no-overlap]
//                   [--timeout-s 120]
// --layout flat treats the whole gradient as one tensor (one scaler, one ternary_aggregate call):
// not TernGrad as trained, but the bound that bucketing all tensors into one call could reach.
// JSON lines on stdout, progress and a table on stderr.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
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
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/harness.h"
#include "comm/aggregate.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "comm/ternary_collectives.h"
#include "nn/core/device.h"
#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "nn/nets/net.h"
#include "terngrad/compressor.h"
#include "terngrad/ternary_kernels.h"

namespace tg::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 1;
constexpr double kClipSigmas = 2.5;  // TernGrad's gradient clipping (digest §1): s <= 2.5 sigma
constexpr double kSmallCaseSeconds = 0.5;  // small cases repeat until about this long
constexpr int kMaxReps = 100;
const char* const kSubnet = "10.213.0.";  // rank r is kSubnet + (r + 1) under --link

// ---- options ---------------------------------------------------------------------------------

struct Options {
  std::vector<std::string> nets = {"lenet", "alexnet", "vgg_a"};
  std::vector<int> procs = {2, 4, 8};
  std::vector<std::string> algos = {"fp32", "ps", "allgather", "packed-allreduce", "auto"};
  int reps = 5, warmup = 2;
  std::string format = "two_bit";
  std::string link = "loopback";
  bool flat = false;    // --layout flat: the whole gradient as one tensor (one scaler, one call)
  bool product = true;  // --path product: aggregate_distributed; collectives: ternary_aggregate
  int64_t chunk_bytes = comm::AggregateOptions{}.chunk_bytes;
  bool overlap = true;
  int timeout_s = 120;
  // worker only
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
      for (const auto& p : split(value(), ',')) o.procs.push_back(parse_int(a, p, 2, 64));
    } else if (a == "--algos") {
      o.algos = split(value(), ',');
      for (const auto& x : o.algos)
        if (x != "fp32") comm::parse_ternary_algorithm(x);  // throws listing the known names
      // fp32 first: its allreduce runs on the f32 gradient, freed before the ternary cases.
      std::stable_partition(o.algos.begin(), o.algos.end(),
                            [](const std::string& x) { return x == "fp32"; });
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
    } else if (a == "--layout") {
      const std::string v = value();
      TG_CHECK(v == "per-tensor" || v == "flat", a, ": expected per-tensor or flat, got '", v, "'");
      o.flat = v == "flat";
    } else if (a == "--path") {
      const std::string v = value();
      TG_CHECK(v == "product" || v == "collectives", a, ": expected product or collectives, got '",
               v, "'");
      o.product = v == "product";
    } else if (a == "--chunk-bytes") {
      o.chunk_bytes = parse_int(a, value(), 0, 1 << 30);
    } else if (a == "--no-overlap") {
      o.overlap = false;
    } else if (a == "--timeout-s") {
      o.timeout_s = parse_int(a, value(), 1, 3600);
    } else if (a == "--worker") {
      o.worker = true;
    } else if (a == "--rank") {
      o.rank = parse_int(a, value(), 0, 63);
    } else if (a == "--size") {
      o.size = parse_int(a, value(), 1, 64);
    } else if (a == "--dir") {
      o.dir = value();
    } else if (a == "--host") {
      o.host = value();
    } else if (a == "-h" || a == "--help") {
      std::fprintf(
          stderr,
          "usage: bench_comm [--nets lenet,alexnet,vgg_a] [--procs 2,4,8]\n"
          "                  [--algos fp32,ps,allgather,packed-allreduce,auto]\n"
          "                  [--reps 5] [--warmup 2] [--format two_bit|base3]\n"
          "                  [--link loopback|RATE e.g. 1gbit] [--layout per-tensor|flat]\n"
          "                  [--path product|collectives] [--chunk-bytes N] [--no-overlap]\n"
          "                  [--timeout-s 120]\n");
      std::exit(0);
    } else {
      TG_THROW("unknown argument '", a, "' (see --help)");
    }
  }
  TG_CHECK(!o.nets.empty() && !o.procs.empty() && !o.algos.empty(),
           "--nets, --procs and --algos need at least one entry each");
  return o;
}

// ---- gradients and codes (both sides) ---------------------------------------------------------

struct Slot {
  std::string name;
  int64_t numel = 0;
};

int64_t total_numel(const std::vector<Slot>& layout) {
  int64_t n = 0;
  for (const auto& s : layout) n += s.numel;
  return n;
}

// A gradient-like f32 vector per rank: a block of normals permuted per rank and tensor (cheap for
// 10^8 elements; the values only set the code density, the wire sizes do not depend on them).
void fill_gradient(const std::vector<Slot>& layout, int rank, float* g) {
  constexpr int64_t kBlock = 1 << 20;
  static const std::vector<float> block = [] {
    std::vector<float> b(kBlock);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& v : b) v = d(rng);
    return b;
  }();
  int64_t off = 0;
  for (size_t t = 0; t < layout.size(); ++t) {
    const float scale = 1e-3f * static_cast<float>(1 + t % 3);
    const int64_t shift = 7919 * rank + 131 * static_cast<int64_t>(t);
    for (int64_t i = 0; i < layout[t].numel; ++i)
      g[off + i] = scale * block[(i * 40503 + shift) & (kBlock - 1)];
    off += layout[t].numel;
  }
}

// This rank's TernGrad scaler per tensor: max |clip(g)| = min(max |g|, 2.5 sigma).
std::vector<float> local_scalers(const std::vector<Slot>& layout, const float* g) {
  std::vector<float> s;
  int64_t off = 0;
  for (const auto& slot : layout) {
    tern::TensorStats st;
    tern::tensor_stats_cpu(g + off, slot.numel, &st);
    s.push_back(static_cast<float>(std::min(st.max_abs, kClipSigmas * st.sigma())));
    off += slot.numel;
  }
  return s;
}

// Byte offsets of each tensor's packed codes (tensors packed separately, back to back).
std::vector<size_t> code_offsets(const std::vector<Slot>& layout, tern::PackFormat f) {
  std::vector<size_t> off{0};
  for (const auto& s : layout) off.push_back(off.back() + tern::packed_bytes(f, s.numel));
  return off;
}

void ternarize_all(const std::vector<Slot>& layout, const float* g, const std::vector<float>& s,
                   int worker, tern::PackFormat f, const std::vector<size_t>& coff,
                   uint8_t* codes) {
  int64_t off = 0;
  for (size_t t = 0; t < layout.size(); ++t) {
    tern::ternarize_pack_cpu(g + off, layout[t].numel, s[t], kSeed,
                             rng_stream(RngPurpose::ternarize, 0, worker, t), f, codes + coff[t]);
    off += layout[t].numel;
  }
}

// ---- worker (one rank) ------------------------------------------------------------------------

std::vector<Slot> read_layout(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in, "cannot open layout file ", path);
  std::vector<Slot> layout;
  Slot s;
  while (in >> s.name >> s.numel) layout.push_back(s);
  TG_CHECK(!layout.empty(), path, ": no tensors");
  return layout;
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

uint64_t hash_i32(const int32_t* a, int64_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(a[i])) * 1099511628211ULL;
  return h;
}

double process_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int worker_main(const Options& o) {
  const std::vector<Slot> layout = read_layout(o.dir + "/layout.txt");
  const tern::PackFormat fmt = parse_format(o.format);
  const int64_t n = total_numel(layout);
  const int T = static_cast<int>(layout.size());
  const std::chrono::milliseconds timeout(1000LL * o.timeout_s);

  auto store = comm::open_store("file://" + o.dir + "/store", timeout);
  comm::CommOptions co;
  co.backend = "gloo";
  co.rank = o.rank;
  co.size = o.size;
  co.hostname = o.host;
  co.timeout = timeout;
  auto comm = comm::make_communicator(co, *store, "bench");
  const int P = comm->size();
  const bool lead = comm->rank() == 0;
  const std::string tag = "[" + fs::path(o.dir).filename().string() + "]";

  // Gradients, shared scalers, codes (step 0, worker = rank).
  std::vector<float> g(n);
  fill_gradient(layout, o.rank, g.data());
  std::vector<float> scalers = local_scalers(layout, g.data());
  comm->allreduce(scalers.data(), T, DType::f32, comm::ReduceOp::max);
  const std::vector<size_t> coff = code_offsets(layout, fmt);
  std::vector<uint8_t> codes(coff.back());
  ternarize_all(layout, g.data(), scalers, o.rank, fmt, coff, codes.data());
  std::vector<int32_t> acc;
  // Product path: the compressor, this rank's gradient and the averaged output.
  tern::CompressionOptions copt;
  copt.method = "terngrad";
  copt.pack = fmt;
  copt.clip = kClipSigmas;
  std::vector<tern::GradSlot> slots;
  {
    int64_t off = 0;
    for (const Slot& s : layout) {
      slots.push_back({s.name, off, s.numel});
      off += s.numel;
    }
  }
  std::unique_ptr<tern::Compressor> compressor;
  std::vector<Tensor> grad;
  Tensor out;
  double encode_s = 0;  // this rep's AggregateStats::encode_s

  std::ofstream results;
  if (lead) {
    results.open(o.dir + "/results.txt");
    TG_CHECK(results, "cannot write ", o.dir, "/results.txt");
  }
  uint64_t reference_hash = 0;
  bool have_reference = false;

  for (const std::string& algo_name : o.algos) {
    const bool fp32 = algo_name == "fp32";
    const comm::TernaryAlgorithm algo =
        fp32 ? comm::TernaryAlgorithm::automatic : comm::parse_ternary_algorithm(algo_name);
    if (!fp32 && o.product && !compressor) {
      compressor = tern::make_compressor(copt, slots);
      grad.push_back(Tensor::empty({n}));
      fill_gradient(layout, o.rank, grad[0].data<float>());
      std::vector<float>().swap(g);  // the fp32 case's (summed) gradient is not needed any more
      out = Tensor::empty({n});
    }
    if (!fp32 && !o.product && acc.empty()) {
      std::vector<float>().swap(g);  // the f32 gradient is not needed any more
      acc.assign(n, 0);
    }
    std::map<std::string, int> picks;
    auto exchange = [&] {
      encode_s = 0;
      if (fp32) {
        comm->allreduce(g.data(), n, DType::f32, comm::ReduceOp::sum);
        return;
      }
      if (o.product) {
        comm::AggregateOptions ao;
        ao.algorithm = algo;
        ao.compression = copt;
        ao.chunk_bytes = o.chunk_bytes;
        ao.overlap = o.overlap;
        const comm::AggregateStats st =
            comm::aggregate_distributed(*compressor, *comm, grad, 0, out, ao);
        encode_s = st.encode_s;
        if (algo == comm::TernaryAlgorithm::automatic) ++picks[comm::name(st.bucket_algorithm)];
        return;
      }
      std::vector<float> s = scalers;
      comm->allreduce(s.data(), T, DType::f32, comm::ReduceOp::max);
      int64_t off = 0;
      for (int t = 0; t < T; ++t) {
        const comm::TernaryResult r = comm::ternary_aggregate(
            *comm, algo, codes.data() + coff[t], 1, layout[t].numel, fmt, acc.data() + off);
        if (algo == comm::TernaryAlgorithm::automatic) ++picks[comm::name(r.algorithm)];
        off += layout[t].numel;
      }
    };
    double cpu_ms = 0;  // this process's CPU time (all threads, Gloo's included) in exchange()
    auto timed = [&] {
      comm->barrier();
      const double c0 = process_cpu_ms();
      const auto t0 = Clock::now();
      exchange();
      const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      cpu_ms += process_cpu_ms() - c0;
      return wall;
    };

    // Warm-up; the first ternary rep (accumulator zeroed) also checks exactness on every rank.
    float warm_ms = 0;
    for (int w = 0; w < o.warmup; ++w) {
      if (!fp32 && w == 0 && !o.product) std::fill(acc.begin(), acc.end(), 0);
      warm_ms = static_cast<float>(timed());
      if (!fp32 && w == 0) {
        const uint64_t h = o.product
                               ? hash_i32(reinterpret_cast<const int32_t*>(out.data<float>()), n)
                               : hash_i32(acc.data(), n);
        std::vector<uint64_t> all(P);
        comm->allgather(&h, all.data(), sizeof(h));
        for (int r = 0; r < P; ++r)
          TG_CHECK(all[r] == all[0], algo_name, ": rank ", r,
                   "'s aggregated codes differ from rank 0's (hash ", all[r], " vs ", all[0], ")");
        if (!have_reference) {
          reference_hash = h;
          have_reference = true;
        }
        TG_CHECK(h == reference_hash, algo_name,
                 ": aggregated codes differ from the first ternary algorithm's (not exact)");
      }
      picks.clear();
    }
    // Small cases repeat until ~kSmallCaseSeconds; rank 0 decides so every rank runs as many.
    comm->allreduce(&warm_ms, 1, DType::f32, comm::ReduceOp::max);
    int reps = o.reps;
    if (warm_ms > 0)
      reps = std::clamp(static_cast<int>(std::ceil(kSmallCaseSeconds * 1e3 / warm_ms)), o.reps,
                        std::max(o.reps, kMaxReps));
    comm->broadcast(&reps, sizeof(reps), 0);

    std::vector<double> ms(reps), xchg(reps);  // whole call; minus the encode phase
    comm::WireBytes wire{};
    cpu_ms = 0;
    for (int i = 0; i < reps; ++i) {
      const comm::WireBytes before = comm->wire();
      ms[i] = timed();
      xchg[i] = ms[i] - 1e3 * encode_s;
      if (i == 0) {
        wire = comm->wire();
        wire.sent -= before.sent;
        wire.received -= before.received;
      }
      if (lead && ms[i] > 500)
        std::fprintf(stderr, "%s %s rep %d/%d: %.0f ms (rank 0)\n", tag.c_str(), algo_name.c_str(),
                     i + 1, reps, ms[i]);
    }

    // Per rep the slowest rank's time; wire bytes of every rank.
    std::vector<double> all_ms(static_cast<size_t>(reps) * P), all_xchg(all_ms.size());
    comm->allgather(ms.data(), all_ms.data(), reps * sizeof(double));
    comm->allgather(xchg.data(), all_xchg.data(), reps * sizeof(double));
    const uint64_t mine[2] = {wire.sent, wire.received};
    std::vector<uint64_t> all_wire(2 * P);
    comm->allgather(mine, all_wire.data(), sizeof(mine));
    float cpu_mean = static_cast<float>(cpu_ms / reps / P);
    comm->allreduce(&cpu_mean, 1, DType::f32, comm::ReduceOp::sum);
    if (lead) {
      std::vector<double> slowest(reps, 0.0), slowest_xchg(reps, 0.0);
      for (int r = 0; r < P; ++r)
        for (int i = 0; i < reps; ++i) {
          slowest[i] = std::max(slowest[i], all_ms[static_cast<size_t>(r) * reps + i]);
          slowest_xchg[i] = std::max(slowest_xchg[i], all_xchg[static_cast<size_t>(r) * reps + i]);
        }
      uint64_t sent_max = 0, recv_max = 0;
      double sent_mean = 0, recv_mean = 0;
      for (int r = 0; r < P; ++r) {
        sent_max = std::max(sent_max, all_wire[2 * r]);
        recv_max = std::max(recv_max, all_wire[2 * r + 1]);
        sent_mean += static_cast<double>(all_wire[2 * r]) / P;
        recv_mean += static_cast<double>(all_wire[2 * r + 1]) / P;
      }
      std::string pick_str;
      for (const auto& [k, v] : picks)
        pick_str += (pick_str.empty() ? "" : ";") + k + "=" + std::to_string(v / reps);
      if (pick_str.empty()) pick_str = "-";
      results << algo_name << ' ' << pct(slowest, 0.5) << ' ' << pct(slowest, 0.1) << ' '
              << pct(slowest, 0.9) << ' ' << reps << ' ' << all_wire[0] << ' ' << all_wire[1] << ' '
              << sent_max << ' ' << recv_max << ' ' << static_cast<uint64_t>(sent_mean) << ' '
              << static_cast<uint64_t>(recv_mean) << ' ' << cpu_mean << ' ' << pick_str << ' '
              << pct(slowest_xchg, 0.5) << '\n';
      results.flush();
      std::fprintf(stderr, "%s %-16s median %9.2f ms  (%d reps)  sent max %.2f MB\n", tag.c_str(),
                   algo_name.c_str(), pct(slowest, 0.5), reps, sent_max / 1e6);
    }
  }
  comm->barrier();
  return 0;
}

// ---- orchestration: signals, commands, network namespaces -------------------------------------

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
    std::string out;
    if (run_cmd(ip_ + " netns list", false, &out) == 0) {
      std::istringstream is(out);
      std::string line;
      while (std::getline(is, line)) {
        const std::string name = line.substr(0, line.find(' '));
        if (name.rfind("tgbench", 0) != 0) continue;
        const std::string pid = name.substr(7, name.find('_') - 7);
        if (!pid.empty() && ::kill(std::stoi(pid), 0) != 0 && errno == ESRCH) {
          std::fprintf(stderr, "netns: removing %s left by a dead run\n", name.c_str());
          run_cmd(ip_ + " netns del " + name, false);
        }
      }
    }
    if (run_cmd(ip_ + " -o link show type bridge", false, &out) == 0) {
      std::istringstream is(out);
      std::string line;
      while (std::getline(is, line)) {
        const size_t a = line.find(": tgb"), b = line.find("br:");
        if (a == std::string::npos || b == std::string::npos || b < a) continue;
        const std::string pid = line.substr(a + 5, b - a - 5);
        if (!pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos &&
            ::kill(std::stoi(pid), 0) != 0 && errno == ESRCH)
          run_cmd(ip_ + " link del tgb" + pid + "br", false);
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

// ---- orchestration: cases ---------------------------------------------------------------------

std::vector<Slot> net_layout(const std::string& name) {
  std::unique_ptr<Net> net = make_net(name, NetOptions{}, Device::cpu());
  std::vector<Slot> layout;
  for (const auto& e : net->arena().entries()) layout.push_back({e.name, e.numel});
  return layout;
}

// ternarize_pack of every tensor in this one process (uncontended), ms.
double encode_ms(const std::vector<Slot>& layout, tern::PackFormat fmt) {
  std::vector<float> g(total_numel(layout));
  fill_gradient(layout, 0, g.data());
  const std::vector<float> s = local_scalers(layout, g.data());
  const std::vector<size_t> coff = code_offsets(layout, fmt);
  std::vector<uint8_t> codes(coff.back());
  const Timing t = time_it([&] { ternarize_all(layout, g.data(), s, 0, fmt, coff, codes.data()); },
                           [] {}, 0.2, 1, 3);
  return t.median_ms;
}

struct Row {
  std::string net, algo, picks;
  int procs = 0, reps = 0;
  double median = 0, p10 = 0, p90 = 0, load = 0, cpu_ms = 0;
  double xchg = 0, xchg_speedup = 0;  // median of (call - encode phase), fp32 / that
  uint64_t sent0 = 0, recv0 = 0, sent_max = 0, recv_max = 0, sent_mean = 0, recv_mean = 0;
  double bytes_ratio = 0, speedup = 0;
};

// Forks P workers (exec of this binary with --worker), in the namespaces when `lab` is set, and
// waits; if one fails the others are terminated. Throws naming the failed rank.
void run_workers(const Options& o, const std::string& dir, int P, const NetLab* lab) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string omp = std::to_string(std::max(1, cores / P));
  // The binary's own path (exec'ing /proc/self/exe directly would name the workers "exe").
  static const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids(P, -1);
  for (int r = 0; r < P; ++r) {
    std::vector<std::string> args = {"bench_comm",    "--worker",
                                     "--rank",        std::to_string(r),
                                     "--size",        std::to_string(P),
                                     "--dir",         dir,
                                     "--host",        lab ? NetLab::address(r) : "127.0.0.1",
                                     "--algos",       join(o.algos, ','),
                                     "--reps",        std::to_string(o.reps),
                                     "--warmup",      std::to_string(o.warmup),
                                     "--format",      o.format,
                                     "--path",        o.product ? "product" : "collectives",
                                     "--chunk-bytes", std::to_string(o.chunk_bytes),
                                     "--timeout-s",   std::to_string(o.timeout_s)};
    if (!o.overlap) args.push_back("--no-overlap");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    TG_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
    if (pid == 0) {
      if (lab) {
        const std::string path = "/run/netns/" + lab->ns(r);
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
          std::fprintf(stderr, "rank %d: cannot enter network namespace %s: %s\n", r, path.c_str(),
                       std::strerror(errno));
          ::_exit(126);
        }
      }
      ::setenv("OMP_NUM_THREADS", omp.c_str(), 0);
      ::setenv("OMP_WAIT_POLICY", "passive", 0);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(self.c_str(), argv.data());
      std::fprintf(stderr, "rank %d: exec %s failed: %s\n", r, self.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    pids[r] = pid;
  }
  std::string failure;
  int live = P;
  auto terminate_all = [&] {
    for (pid_t p : pids)
      if (p > 0) ::kill(p, SIGTERM);
  };
  while (live > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR && g_signal.load()) {
        terminate_all();
        while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
        }
        check_signal();
      }
      if (errno == ECHILD) break;
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    const int r = static_cast<int>(it - pids.begin());
    *it = -1;
    --live;
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok && failure.empty()) {
      failure = "rank " + std::to_string(r) +
                (WIFEXITED(st) ? " exited with status " + std::to_string(WEXITSTATUS(st))
                               : std::string(" was killed by ") + strsignal(WTERMSIG(st)));
      terminate_all();
    }
  }
  check_signal();
  TG_CHECK(failure.empty(), dir, ": ", failure, " (its error is printed above)");
}

std::vector<Row> read_results(const std::string& path, const std::string& net, int P) {
  std::ifstream in(path);
  TG_CHECK(in, "no results in ", path);
  std::vector<Row> rows;
  Row r;
  while (in >> r.algo >> r.median >> r.p10 >> r.p90 >> r.reps >> r.sent0 >> r.recv0 >> r.sent_max >>
         r.recv_max >> r.sent_mean >> r.recv_mean >> r.cpu_ms >> r.picks >> r.xchg) {
    r.net = net;
    r.procs = P;
    rows.push_back(r);
  }
  return rows;
}

double mb(uint64_t b) {
  return static_cast<double>(b) / 1e6;
}

void print_table(const std::vector<Row>& rows, const std::string& link) {
  std::fprintf(stderr,
               "\n%-8s %2s %-16s %10s %10s %10s %9s %4s %11s %11s %8s %8s %8s %9s %5s  %s\n", "net",
               "P", "algo", "median_ms", "p10_ms", "p90_ms", "xchg_ms", "reps", "sentmax_MB",
               "recvmax_MB", "bytes_x", "speedup", "xchg_x", "cpu_ms", "load", "auto picks");
  for (const Row& r : rows)
    std::fprintf(stderr,
                 "%-8s %2d %-16s %10.2f %10.2f %10.2f %9.2f %4d %11.3f %11.3f %8.2f %8.2f %8.2f "
                 "%9.1f %5.2f  %s\n",
                 r.net.c_str(), r.procs, r.algo.c_str(), r.median, r.p10, r.p90, r.xchg, r.reps,
                 mb(r.sent_max), mb(r.recv_max), r.bytes_ratio, r.speedup, r.xchg_speedup, r.cpu_ms,
                 r.load, r.picks == "-" ? "" : r.picks.c_str());
  std::fprintf(stderr,
               "(link %s; bytes_x = fp32 sent / this sent, busiest rank; speedup = fp32 median / "
               "this median; xchg = the call minus its encode phase, xchg_x = fp32 median / "
               "xchg median; cpu_ms = CPU time per exchange per rank, mean over ranks)\n",
               link.c_str());
}

int orchestrate(const Options& o) {
  install_signal_handlers();
  const tern::PackFormat fmt = parse_format(o.format);
  for (const auto& name : o.nets) {  // fail fast on an unknown net
    const auto names = net_names();
    TG_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "--nets: unknown net '",
             name, "'; known: ", join(names, ','));
  }
  std::unique_ptr<NetLab> lab;
  if (o.link != "loopback") {
    lab = std::make_unique<NetLab>(*std::max_element(o.procs.begin(), o.procs.end()), o.link);
  }
  char tmpl[] = "/tmp/bench_comm.XXXXXX";
  TG_CHECK(::mkdtemp(tmpl), "mkdtemp failed: ", std::strerror(errno));
  const std::string root = tmpl;
  struct RemoveDir {
    std::string d;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } remove_root{root};

  const std::string cpu = cpu_model();
  std::fprintf(stderr, "bench_comm: %s, %u cores, link %s, format %s, store %s\n", cpu.c_str(),
               std::thread::hardware_concurrency(), o.link.c_str(), o.format.c_str(), root.c_str());
  std::vector<Row> all;
  int failures = 0;
  for (const auto& net : o.nets) {
    check_signal();
    std::vector<Slot> layout = net_layout(net);
    const int64_t n = total_numel(layout);
    if (o.flat) layout = {{"flat", n}};
    const double enc = encode_ms(layout, fmt);
    std::fprintf(stderr, "%s: %lld parameters in %zu tensors; ternarize+pack all: %.2f ms\n",
                 net.c_str(), static_cast<long long>(n), layout.size(), enc);
    for (int P : o.procs) {
      check_signal();
      const std::string dir = root + "/" + net + "_P" + std::to_string(P);
      fs::create_directories(dir);
      {
        std::ofstream out(dir + "/layout.txt");
        for (const auto& s : layout) out << s.name << ' ' << s.numel << '\n';
      }
      double load[3] = {0, 0, 0};
      ::getloadavg(load, 3);
      std::vector<Row> rows;
      try {
        run_workers(o, dir, P, lab.get());
        rows = read_results(dir + "/results.txt", net, P);
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "FAILED %s P=%d: %s\n", net.c_str(), P, e.what());
        ++failures;
        continue;
      }
      const Row* fp = nullptr;
      for (const Row& r : rows)
        if (r.algo == "fp32") fp = &r;
      for (Row& r : rows) {
        r.load = load[0];
        if (fp) {
          r.bytes_ratio = r.sent_max ? static_cast<double>(fp->sent_max) / r.sent_max : 0;
          r.speedup = r.median > 0 ? fp->median / r.median : 0;
          r.xchg_speedup = r.xchg > 0 ? fp->median / r.xchg : 0;
        }
        JsonLine line;
        line.add("bench", "comm").add("net", net).add("params", static_cast<long long>(n));
        line.add("tensors", static_cast<int>(layout.size())).add("procs", P);
        line.add("layout", o.flat ? "flat" : "per-tensor");
        line.add("path", o.product ? "product" : "collectives");
        if (o.product) line.add("chunk_bytes", static_cast<long long>(o.chunk_bytes));
        if (o.product) line.add("overlap", o.overlap ? "on" : "off");
        line.add("link", o.link).add("format", o.format).add("algo", r.algo);
        if (r.picks != "-") line.add("auto_picks", r.picks);
        line.add_timing({r.median, r.p10, r.p90, r.reps});
        line.add("sent_rank0", static_cast<long long>(r.sent0))
            .add("recv_rank0", static_cast<long long>(r.recv0))
            .add("sent_max", static_cast<long long>(r.sent_max))
            .add("recv_max", static_cast<long long>(r.recv_max))
            .add("sent_mean", static_cast<long long>(r.sent_mean))
            .add("recv_mean", static_cast<long long>(r.recv_mean))
            .add("cpu_ms_per_rank", r.cpu_ms);
        line.add("xchg_ms", r.xchg);
        if (fp) line.add("bytes_ratio_vs_fp32", r.bytes_ratio).add("speedup_vs_fp32", r.speedup);
        if (fp) line.add("xchg_speedup_vs_fp32", r.xchg_speedup);
        if (r.algo != "fp32") line.add("encode_ms", enc);
        line.add("load1", load[0]).add("cpu", cpu);
        line.print();
        all.push_back(r);
      }
      print_table(rows, o.link);
    }
  }
  if (o.nets.size() * o.procs.size() > 1 && !all.empty()) {
    std::fprintf(stderr, "\n==== all cases ====");
    print_table(all, o.link);
  }
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  using namespace tg::bench;
  try {
    const Options o = parse_args(argc, argv);
    if (o.worker) return worker_main(o);
    return orchestrate(o);
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "bench_comm: %s; workers stopped, namespaces and temp files removed\n",
                 e.what());
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_comm: %s\n", e.what());
    return 1;
  }
}
