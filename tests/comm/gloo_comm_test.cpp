// The Gloo communicator with P = 2, 3, 4 ranks as threads of this process (one communicator and
// one file store handle per thread, 127.0.0.1): every collective and dtype against hand-computed
// results, bit-identical f32 sums on every rank, wire bytes against the documented formulas
// (comm/gloo_comm.h), and the failure paths: a rank that never arrives, a mismatched world size,
// a rank that stops taking part, and ranks that exit or die (a real killed process) mid-job.
#include "comm/gloo_comm.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/store.h"
#include "nn/core/error.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

// Generous: only failure tests wait this long, and those use their own short timeouts.
constexpr auto kTimeout = 10s;

CommOptions options_for(int rank, int size, std::chrono::milliseconds timeout = kTimeout) {
  return gloo_loopback(rank, size, timeout);
}

// Runs body(comm) on `p` threads, rank r on thread r, each with its own store handle on `url`
// and its own communicator; returns each rank's error message ("" when it threw nothing). Each
// group meets under a fresh key prefix: store keys are written once per job.
std::vector<std::string> run_group(const std::string& url, int p,
                                   const std::function<void(Communicator&)>& body,
                                   std::chrono::milliseconds timeout = kTimeout) {
  static std::atomic<int> groups{0};
  const std::string prefix = "group" + std::to_string(groups++);
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = open_store(url, timeout);
        auto comm = make_communicator(options_for(r, p, timeout), *store, prefix);
        EXPECT_EQ(comm->backend(), "gloo");
        EXPECT_EQ(comm->rank(), r);
        EXPECT_EQ(comm->size(), p);
        EXPECT_TRUE(comm->device().is_cpu());
        body(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

WireBytes delta(const WireBytes& after, const WireBytes& before) {
  return {after.sent - before.sent, after.received - before.received};
}

// ---- wire formulas, by hand (no network) -----------------------------------------------------

TEST(GlooWire, RingAllreduceUnevenChunksByHand) {
  // n = 1001 f32 (B = 4004) over P = 3: S = 6 segments of 668 bytes, 2 per chunk, so chunks of
  // 1336, 1336 and 1332 bytes. Rank r sends 2B - C(r) - C(r-1), receives 2B - C(r+1) - C(r).
  const WireBytes r0 = gloo_wire::allreduce(4004, 4, 3, 0);
  const WireBytes r1 = gloo_wire::allreduce(4004, 4, 3, 1);
  const WireBytes r2 = gloo_wire::allreduce(4004, 4, 3, 2);
  EXPECT_EQ(r0.sent, 8008u - 1336 - 1332);
  EXPECT_EQ(r0.received, 8008u - 1336 - 1336);
  EXPECT_EQ(r1.sent, 8008u - 1336 - 1336);
  EXPECT_EQ(r1.received, 8008u - 1332 - 1336);
  EXPECT_EQ(r2.sent, 8008u - 1332 - 1336);
  EXPECT_EQ(r2.received, 8008u - 1336 - 1332);
  // P = 2 always moves B each way.
  EXPECT_EQ(gloo_wire::allreduce(4004, 4, 2, 1).sent, 4004u);
  EXPECT_EQ(gloo_wire::allreduce(4004, 4, 2, 1).received, 4004u);
  // Many segments (B = 9.6 MB of u64 over P = 4: 12 segments of 800000 bytes, 3 per chunk).
  EXPECT_EQ(gloo_wire::allreduce(9600000, 8, 4, 2).sent, 2u * 3 * 9600000 / 4);
  // Nothing moves for one rank or no data.
  EXPECT_EQ(gloo_wire::allreduce(4004, 4, 1, 0).sent, 0u);
  EXPECT_EQ(gloo_wire::allreduce(0, 4, 3, 0).received, 0u);
}

TEST(GlooWire, BinomialBroadcastByHand) {
  // P = 4, root 1: virtual ranks 0..3 are ranks 1, 2, 3, 0; v0 sends to v1 and v2, v1 to v3.
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 1, 1).sent, 200u);
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 1, 1).received, 0u);
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 2, 1).sent, 100u);
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 2, 1).received, 100u);
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 3, 1).sent, 0u);
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 0, 1).sent, 0u);
  EXPECT_EQ(gloo_wire::broadcast(100, 4, 0, 1).received, 100u);
  // P = 3, root 0: the root sends both copies.
  EXPECT_EQ(gloo_wire::broadcast(100, 3, 0, 0).sent, 200u);
  EXPECT_EQ(gloo_wire::broadcast(100, 3, 1, 0).sent, 0u);
}

// ---- the collectives, P = 2, 3, 4 --------------------------------------------------------------

class GlooComm : public ::testing::TestWithParam<int> {
 protected:
  std::string url() const { return "file://" + dir_.str(); }
  int p() const { return GetParam(); }
  tg::testing::TempDir dir_;
};

// Test names P2, P3, P4 (built with +=: GCC 12 warns falsely on "P" + std::string).
std::string ranks_name(const ::testing::TestParamInfo<int>& info) {
  std::string name = "P";
  name += std::to_string(info.param);
  return name;
}
INSTANTIATE_TEST_SUITE_P(Ranks, GlooComm, ::testing::Values(2, 3, 4), ranks_name);

// Rank r's input for the allreduce tests: fixed seed per (rank, dtype, n). f32 values are
// multiples of 1/16 in [-64, 64], so every summation order gives the same exact sum.
template <typename T>
std::vector<T> rank_input(int rank, int64_t n) {
  std::mt19937_64 rng(1000003u * static_cast<uint64_t>(rank) + 7919u * static_cast<uint64_t>(n) +
                      sizeof(T) + std::is_floating_point_v<T>);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>(static_cast<int>(rng() % 2049) - 1024) / 16;
    } else {
      x = static_cast<T>(rng());  // full range: integer sums wrap
    }
  }
  return v;
}

// The naive reference: op over ranks in rank order, integers wrapping modulo 2^bits.
template <typename T>
std::vector<T> reference(int p, int64_t n, ReduceOp op) {
  std::vector<T> acc = rank_input<T>(0, n);
  for (int r = 1; r < p; ++r) {
    const std::vector<T> x = rank_input<T>(r, n);
    for (size_t i = 0; i < acc.size(); ++i) {
      if (op == ReduceOp::max) {
        acc[i] = std::max(acc[i], x[i]);
      } else if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(x[i]));
      } else {
        acc[i] += x[i];
      }
    }
  }
  return acc;
}

template <typename T>
void check_allreduce(const std::string& url, int p, int64_t n) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    SCOPED_TRACE(std::string(dtype_name(dtype_v<T>)) + " " + name(op) + " n=" + std::to_string(n));
    const std::vector<T> expected = reference<T>(p, n, op);
    const auto errors = run_group(url, p, [&](Communicator& comm) {
      std::vector<T> buf = rank_input<T>(comm.rank(), n);
      const WireBytes before = comm.wire();
      comm.allreduce(buf.data(), n, dtype_v<T>, op);
      EXPECT_TRUE(buf == expected) << "rank " << comm.rank();
      const WireBytes w = delta(comm.wire(), before);
      const WireBytes f = gloo_wire::allreduce(n * sizeof(T), sizeof(T), p, comm.rank());
      EXPECT_EQ(w.sent, f.sent) << "rank " << comm.rank();
      EXPECT_EQ(w.received, f.received) << "rank " << comm.rank();
    });
    expect_no_errors(errors);
  }
}

TEST_P(GlooComm, AllreduceEveryDtypeAndOp) {
  for (int64_t n : {1, 7, 1001}) {
    check_allreduce<float>(url(), p(), n);
    check_allreduce<int32_t>(url(), p(), n);
    check_allreduce<int64_t>(url(), p(), n);
    check_allreduce<uint64_t>(url(), p(), n);
  }
  // Over 2P MiB: more than two 1 MiB segments per rank in Gloo's ring.
  check_allreduce<uint64_t>(url(), p(), 1200001);
}

TEST_P(GlooComm, AllreduceWireBytesFollowTheRingFormula) {
  // Evenly split buffers move 2 (P - 1) / P * B each way; uneven ones move 2 (P - 1) B summed
  // over the ranks, received as much as sent.
  const int P = p();
  for (int64_t n : {int64_t{2} * P * 500, int64_t{1001}}) {
    std::vector<WireBytes> wire(P);
    const auto errors = run_group(url(), P, [&](Communicator& comm) {
      std::vector<float> buf(n, 1.0f);
      comm.allreduce(buf.data(), n, DType::f32, ReduceOp::sum);
      EXPECT_EQ(buf[n - 1], static_cast<float>(P));
      wire[comm.rank()] = comm.wire();
    });
    expect_no_errors(errors);
    const uint64_t B = static_cast<uint64_t>(n) * 4;
    uint64_t sent = 0, received = 0;
    for (int r = 0; r < P; ++r) {
      sent += wire[r].sent;
      received += wire[r].received;
      if (n % (2 * P) == 0) {
        EXPECT_EQ(wire[r].sent, 2 * (P - 1) * B / P) << "rank " << r;
        EXPECT_EQ(wire[r].received, 2 * (P - 1) * B / P) << "rank " << r;
      }
    }
    EXPECT_EQ(sent, 2 * (P - 1) * B);
    EXPECT_EQ(received, 2 * (P - 1) * B);
  }
}

TEST_P(GlooComm, F32SumIsBitIdenticalOnEveryRank) {
  // Values of mixed magnitudes whose sum depends on the order: every rank must still hold the
  // same bits (Gloo's ring reduces each chunk once and copies it), close to the double sum.
  const int P = p();
  constexpr int64_t kN = 100003;
  // Float sums of P values of magnitude <= 1e3 against their double sum: a few ulps of 1e3.
  constexpr double kAbsTolerance = 1e-3;
  auto input = [](int rank) {
    std::mt19937 rng(4242 + rank);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(kN);
    for (int64_t i = 0; i < kN; ++i) v[i] = normal(rng) * std::pow(10.0f, (i % 7) - 3.0f);
    return v;
  };
  std::vector<std::vector<float>> out(P);
  const auto errors = run_group(url(), P, [&](Communicator& comm) {
    std::vector<float> buf = input(comm.rank());
    comm.allreduce(buf.data(), kN, DType::f32, ReduceOp::sum);
    out[comm.rank()] = buf;
  });
  expect_no_errors(errors);
  std::vector<double> exact(kN, 0.0);
  for (int r = 0; r < P; ++r) {
    const auto x = input(r);
    for (int64_t i = 0; i < kN; ++i) exact[i] += x[i];
  }
  for (int r = 1; r < P; ++r) {
    ASSERT_EQ(std::memcmp(out[r].data(), out[0].data(), kN * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
  for (int64_t i = 0; i < kN; ++i) ASSERT_NEAR(out[0][i], exact[i], kAbsTolerance) << i;
}

TEST_P(GlooComm, AlltoallDeliversEachBlockToItsRankAndCountsPairwiseBytes) {
  const int P = p();
  constexpr size_t kB = 1003;
  auto byte = [](int from, int to, size_t i) {
    return static_cast<uint8_t>(from * 50 + to * 7 + i * 3);
  };
  const auto errors = run_group(url(), P, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<uint8_t> in(kB * P), out(kB * P, 0xee);
    for (int q = 0; q < P; ++q)
      for (size_t i = 0; i < kB; ++i) in[q * kB + i] = byte(r, q, i);
    const WireBytes before = comm.wire();
    comm.alltoall(in.data(), out.data(), kB);
    for (int from = 0; from < P; ++from)
      for (size_t i = 0; i < kB; ++i)
        if (out[from * kB + i] != byte(from, r, i))
          throw std::runtime_error("alltoall: wrong byte from rank " + std::to_string(from));
    EXPECT_EQ(delta(comm.wire(), before).sent, (P - 1) * kB);
    EXPECT_EQ(delta(comm.wire(), before).received, (P - 1) * kB);
  });
  expect_no_errors(errors);
}

// exchange: the test plan of rank_threads.h (asymmetric pairs, empty messages), three times back
// to back, interleaved with an alltoall so the collectives' tags stay in step.
TEST_P(GlooComm, ExchangeDeliversThePlanAndCountsItsBytes) {
  const auto errors = run_group(url(), p(), [&](Communicator& comm) {
    for (int round = 0; round < 3; ++round) {
      run_exchange_plan(comm);
      std::vector<uint8_t> in(4 * static_cast<size_t>(comm.size()), 1), out(in.size());
      comm.alltoall(in.data(), out.data(), 4);
    }
    comm.exchange({}, {});  // nothing to move: still a collective every rank calls
  });
  expect_no_errors(errors);
}

// A receive that expects another length than the peer sends is named from the header, before
// any payload is received.
TEST_P(GlooComm, ExchangeNamesAPeerThatSendsAnotherLength) {
  const auto errors = run_group(url(), p(), [&](Communicator& comm) {
    // Every rank connected first: ranks 0 .. last-1 are done at once below and close their
    // connections, which a last rank still joining the mesh would meet as a connect timeout.
    comm.barrier();
    std::vector<uint8_t> data(64, 3);
    const int r = comm.rank(), last = comm.size() - 1;
    const SendSpec s{last, data.data(), 16};
    const RecvSpec rv{0, data.data(), 17};
    if (r == 0)
      comm.exchange({&s, 1}, {});
    else if (r == last)
      comm.exchange({}, {&rv, 1});
    else
      comm.exchange({}, {});
  });
  EXPECT_NE(errors.back().find("announces 16 bytes, this rank expects 17"), std::string::npos)
      << errors.back();
}

// Payloads of at most 448 bytes travel inside their header's message, longer ones after it
// (comm/gloo_comm.cpp, kInlineBytes): both sides of the boundary arrive intact, and a peer that
// cuts one short or announces another length is named on either side of it.
TEST(GlooCommInline, BothSidesOfTheBoundaryDeliverAndNameAFaultyPeer) {
  tg::testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  for (const size_t bytes :
       {size_t{1}, size_t{16}, size_t{447}, size_t{448}, size_t{449}, size_t{5000}}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    const auto byte = [](int from, size_t i) { return static_cast<uint8_t>(from * 31 + i * 7); };
    const auto clean = run_group(url, 3, [&](Communicator& comm) {
      std::vector<uint8_t> all(bytes * 3, 0);
      for (size_t i = 0; i < bytes; ++i) all[comm.rank() * bytes + i] = byte(comm.rank(), i);
      comm.allgather(all.data() + comm.rank() * bytes, all.data(), bytes);
      for (int from = 0; from < 3; ++from)
        for (size_t i = 0; i < bytes; ++i)
          if (all[from * bytes + i] != byte(from, i))
            throw std::runtime_error("allgather: wrong byte from rank " + std::to_string(from));
    });
    expect_no_errors(clean);
    for (const auto& [kind, expect] :
         {std::pair<std::string, std::string>{"truncate", "rank 1 sent a truncated message"},
          {"length", "rank 1's message announces " + std::to_string(bytes + 8) +
                         " bytes, this rank expects " + std::to_string(bytes)}}) {
      if (kind == "truncate" && bytes == 1) continue;  // half of one byte is an empty payload
      SCOPED_TRACE(kind);
      inject_wire_fault({kind, 1, 0});
      const auto errors = run_group(url, 2, [&](Communicator& comm) {
        std::vector<uint8_t> data(bytes, 5);
        const SendSpec s{0, data.data(), bytes};
        const RecvSpec rv{1, data.data(), bytes};
        if (comm.rank() == 1)
          comm.exchange({&s, 1}, {});
        else
          comm.exchange({}, {&rv, 1});
      });
      inject_wire_fault({});
      EXPECT_NE(errors[0].find(expect), std::string::npos) << errors[0];
    }
  }
}

TEST_P(GlooComm, AllgatherGatherBroadcastBarrier) {
  const int P = p();
  constexpr size_t kB = 1003;  // odd: Gloo's allgather splits each block in two uneven halves
  auto block = [](int rank) {
    std::vector<uint8_t> v(kB);
    for (size_t i = 0; i < kB; ++i) v[i] = static_cast<uint8_t>(rank * 31 + i * 7);
    return v;
  };
  std::vector<uint8_t> all;
  for (int r = 0; r < P; ++r) {
    const auto b = block(r);
    all.insert(all.end(), b.begin(), b.end());
  }
  const auto errors = run_group(url(), P, [&](Communicator& comm) {
    const int r = comm.rank();
    const auto mine = block(r);
    WireBytes before = comm.wire();

    // allgather, from a separate input and in place.
    std::vector<uint8_t> out(kB * P, 0);
    comm.allgather(mine.data(), out.data(), kB);
    EXPECT_TRUE(out == all) << "allgather, rank " << r;
    EXPECT_EQ(delta(comm.wire(), before).sent, (P - 1) * kB);
    EXPECT_EQ(delta(comm.wire(), before).received, (P - 1) * kB);
    std::vector<uint8_t> in_place(kB * P, 0);
    std::memcpy(in_place.data() + r * kB, mine.data(), kB);
    comm.allgather(in_place.data() + r * kB, in_place.data(), kB);
    EXPECT_TRUE(in_place == all) << "in-place allgather, rank " << r;

    // gather to every root in turn; the root's output may hold its input in place.
    for (int root = 0; root < P; ++root) {
      before = comm.wire();
      std::vector<uint8_t> g(r == root ? kB * P : 0, 0);
      comm.gather(mine.data(), r == root ? g.data() : nullptr, kB, root);
      if (r == root) {
        EXPECT_TRUE(g == all) << "gather to " << root;
      }
      const WireBytes w = delta(comm.wire(), before);
      EXPECT_EQ(w.sent, r == root ? 0 : kB) << "gather to " << root << ", rank " << r;
      EXPECT_EQ(w.received, r == root ? (P - 1) * kB : 0) << "gather to " << root;
    }
    if (r == 0) {
      std::vector<uint8_t> g(kB * P, 0);
      std::memcpy(g.data(), mine.data(), kB);
      comm.gather(g.data(), g.data(), kB, 0);
      EXPECT_TRUE(g == all) << "in-place gather";
    } else {
      comm.gather(mine.data(), nullptr, kB, 0);
    }

    // broadcast from every root; wire bytes of Gloo's binomial tree.
    uint64_t sends = 0;
    for (int root = 0; root < P; ++root) {
      before = comm.wire();
      std::vector<uint8_t> buf = r == root ? block(100 + root) : std::vector<uint8_t>(kB, 0);
      comm.broadcast(buf.data(), kB, root);
      EXPECT_TRUE(buf == block(100 + root)) << "broadcast from " << root << ", rank " << r;
      const WireBytes w = delta(comm.wire(), before);
      EXPECT_EQ(w.received, r == root ? 0 : kB) << "broadcast from " << root;
      EXPECT_EQ(w.sent, gloo_wire::broadcast(kB, P, r, root).sent);
      sends += w.sent;
    }
    // Over all roots each rank is every virtual rank once: sum_v sends(v) = (P - 1) copies.
    EXPECT_EQ(sends, (P - 1) * kB) << "rank " << r;

    before = comm.wire();
    comm.barrier();
    comm.barrier();
    EXPECT_EQ(delta(comm.wire(), before).sent, 0u);
    EXPECT_EQ(delta(comm.wire(), before).received, 0u);

    // Bad arguments are named.
    try {
      uint8_t four[4] = {};
      comm.broadcast(four, 4, P);
      ADD_FAILURE() << "root " << P << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("root " + std::to_string(P) + " is out of range"),
                std::string::npos)
          << e.what();
    }
  });
  expect_no_errors(errors);
}

TEST(GlooComm1, OneRankCopiesLocally) {
  tg::testing::TempDir dir;
  const auto errors = run_group("file://" + dir.str(), 1, [](Communicator& comm) {
    float x[3] = {1.5f, -2.0f, 3.0f};
    comm.allreduce(x, 3, DType::f32, ReduceOp::sum);
    EXPECT_EQ(x[1], -2.0f);
    int32_t in = 42, out = 0;
    comm.allgather(&in, &out, sizeof(in));
    EXPECT_EQ(out, 42);
    out = 0;
    comm.gather(&in, &out, sizeof(in), 0);
    EXPECT_EQ(out, 42);
    comm.broadcast(&in, sizeof(in), 0);
    comm.barrier();
    EXPECT_EQ(comm.wire().sent, 0u);
    EXPECT_EQ(comm.wire().received, 0u);
  });
  expect_no_errors(errors);
}

TEST(GlooComm1, BadOptionsAndDtypesAreNamed) {
  tg::testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 1s);
  auto msg_of = [&](const CommOptions& o) {
    try {
      make_communicator(o, *store, "bad");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg_of(options_for(2, 2)).find("rank 2 and world size 2 are invalid"),
            std::string::npos);
  CommOptions cuda = options_for(0, 1);
  cuda.device = Device::cuda(0);
  EXPECT_NE(msg_of(cuda).find("use the nccl backend"), std::string::npos);
  CommOptions unresolved = options_for(0, 1);
  unresolved.backend = Backend::automatic;
  EXPECT_NE(msg_of(unresolved).find("backend 'auto' is the process group's to resolve"),
            std::string::npos);

  auto comm = make_communicator(options_for(0, 1), *store, "one");
  uint8_t b[4] = {};
  try {
    comm->allreduce(b, 4, DType::u8, ReduceOp::sum);
    ADD_FAILURE() << "u8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype u8 is not supported"), std::string::npos);
  }
}

// ---- failures ----------------------------------------------------------------------------------

// A host name that resolves to the wildcard address would make Gloo listen on every interface:
// refused on every rank, naming the fix.
TEST(GlooCommFailure, WildcardAddressIsRefused) {
  tg::testing::TempDir dir;
  const auto errors = run_ranks(2, [&](int r) {
    auto store = open_store("file://" + dir.str(), 5s);
    CommOptions o = options_for(r, 2, 5s);
    o.hostname = "0.0.0.0";
    make_communicator(o, *store, "any");
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("host '0.0.0.0' resolves to the wildcard address 0.0.0.0, which would listen "
                     "on every interface"),
              std::string::npos)
        << e;
}

TEST(GlooCommFailure, RankThatNeverArrivesTimesOut) {
  // Ranks 0 and 1 of 3 start; rank 2 never does.
  tg::testing::TempDir dir;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = open_store("file://" + dir.str(), 1s);
        make_communicator(options_for(r, 3, 1s), *store, "job");
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank(s) 2 did not arrive within 1000 ms"), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("file://" + dir.str()), std::string::npos) << errors[r];
  }
}

TEST(GlooCommFailure, MismatchedWorldSizeIsNamed) {
  tg::testing::TempDir dir;
  std::vector<std::string> errors(2);
  std::thread t0([&] {
    try {
      auto store = open_store("file://" + dir.str(), 2s);
      make_communicator(options_for(0, 2, 2s), *store, "job");
    } catch (const Error& e) {
      errors[0] = e.what();
    }
  });
  std::thread t1([&] {
    try {
      auto store = open_store("file://" + dir.str(), 2s);
      make_communicator(options_for(1, 3, 2s), *store, "job");
    } catch (const Error& e) {
      errors[1] = e.what();
    }
  });
  t0.join();
  t1.join();
  // Rank 0 (size 2) sees rank 1's key saying 3; rank 1 (size 3) also waits for a rank 2.
  EXPECT_NE(errors[0].find("rank 1 was started with world size 3, this rank with 2"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 0 was started with world size 2, this rank with 3"),
            std::string::npos)
      << errors[1];
}

TEST(GlooCommFailure, RankThatStopsTakingPartTimesOut) {
  // Rank 1 stays connected but skips the second allreduce: rank 0 gives up after its timeout.
  tg::testing::TempDir dir;
  std::atomic<bool> rank0_done{false};
  const auto errors = run_group(
      "file://" + dir.str(), 2,
      [&](Communicator& comm) {
        int32_t x = 1;
        comm.allreduce(&x, 1, DType::i32, ReduceOp::sum);
        if (comm.rank() == 1) {
          while (!rank0_done) std::this_thread::sleep_for(10ms);
          return;
        }
        try {
          comm.allreduce(&x, 1, DType::i32, ReduceOp::sum);
        } catch (...) {
          rank0_done = true;
          throw;
        }
        rank0_done = true;
      },
      1s);
  EXPECT_NE(errors[0].find("gloo allreduce failed on rank 0 of 2"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
}

TEST(GlooCommFailure, RankThatExitsMakesTheOthersThrow) {
  // P = 3: rank 2 destroys its communicator after one allreduce; ranks 0 and 1 then throw from
  // the next one (connection closed), and a broken communicator refuses further calls.
  tg::testing::TempDir dir;
  std::vector<std::string> second(3), third(3);
  const auto errors = run_group(
      "file://" + dir.str(), 3,
      [&](Communicator& comm) {
        float x[64] = {};
        comm.allreduce(x, 64, DType::f32, ReduceOp::sum);
        if (comm.rank() == 2) return;  // run_group destroys it
        try {
          comm.allreduce(x, 64, DType::f32, ReduceOp::sum);
        } catch (const Error& e) {
          second[comm.rank()] = e.what();
        }
        try {
          comm.barrier();
        } catch (const Error& e) {
          third[comm.rank()] = e.what();
        }
      },
      5s);
  expect_no_errors(errors);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(second[r].find("gloo allreduce failed on rank " + std::to_string(r) + " of 3"),
              std::string::npos)
        << "rank " << r << ": " << second[r];
    EXPECT_NE(third[r].find("cannot be used again"), std::string::npos)
        << "rank " << r << ": " << third[r];
  }
}

TEST(GlooCommFailure, AbortFromAnotherThreadStopsTheWaitingCollective) {
  // Rank 1 stays connected but never joins the second allreduce; rank 0 waits in it with a 60 s
  // timeout until a third thread aborts rank 0's communicator. The wait must end with the abort's
  // reason, not the timeout's (the message says which, whatever the machine's speed), every later
  // collective is refused, and rank 1, whose connection to rank 0 closed, fails its next one.
  tg::testing::TempDir dir;
  std::atomic<bool> rank0_done{false};
  std::string later, rank1_next;
  const auto errors = run_group(
      "file://" + dir.str(), 2,
      [&](Communicator& comm) {
        std::vector<float> x(1000, 1.0f);
        comm.allreduce(x.data(), 1000, DType::f32, ReduceOp::sum);
        if (comm.rank() == 1) {
          while (!rank0_done) std::this_thread::sleep_for(10ms);
          try {
            comm.allreduce(x.data(), 1000, DType::f32, ReduceOp::sum);
          } catch (const Error& e) {
            rank1_next = e.what();
          }
          return;
        }
        std::thread stopper([&] {
          std::this_thread::sleep_for(200ms);
          EXPECT_TRUE(comm.abort("the test says stop"));
        });
        try {
          comm.allreduce(x.data(), 1000, DType::f32, ReduceOp::sum);
        } catch (...) {
          stopper.join();
          later = error_of([&] { comm.barrier(); });
          rank0_done = true;
          throw;
        }
        stopper.join();
        rank0_done = true;
      },
      60s);
  EXPECT_EQ(errors[0], "gloo allreduce on rank 0 of 2 stopped: the test says stop");
  EXPECT_NE(later.find("cannot be used again (stopped: the test says stop)"), std::string::npos)
      << later;
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(rank1_next.find("gloo allreduce failed on rank 1 of 2"), std::string::npos)
      << rank1_next;
}

TEST(GlooCommFailure, AbortedCommunicatorRefusesTheNextCollective) {
  // Aborted between collectives (nothing in flight): the next one throws at once with the reason
  // on that rank; a second abort keeps the first reason. One rank alone cannot be aborted.
  tg::testing::TempDir dir;
  const auto errors = run_group("file://" + dir.str(), 2, [&](Communicator& comm) {
    int32_t x = 1;
    comm.allreduce(&x, 1, DType::i32, ReduceOp::sum);
    if (comm.rank() == 0) {
      EXPECT_TRUE(comm.abort("first"));
      EXPECT_TRUE(comm.abort("second"));
    }
    comm.allreduce(&x, 1, DType::i32, ReduceOp::sum);
  });
  EXPECT_EQ(errors[0], "gloo allreduce on rank 0 of 2 stopped: first");
  EXPECT_NE(errors[1].find("gloo allreduce failed on rank 1 of 2"), std::string::npos) << errors[1];
  const auto one = run_group("file://" + dir.str(), 1, [&](Communicator& comm) {
    EXPECT_FALSE(comm.abort("alone"));
    int32_t x = 1;
    comm.allreduce(&x, 1, DType::i32, ReduceOp::sum);
    EXPECT_EQ(x, 1);
  });
  expect_no_errors(one);
}

TEST(GlooCommFailure, KilledProcessMakesTheOthersThrow) {
  // Real processes: ranks 1 and 2 are forked children (forked before this process starts any
  // thread), rank 2 kills itself with SIGKILL after the first allreduce. Rank 0 (this process)
  // and rank 1 must throw from the second allreduce; rank 1 reports through its exit status.
  tg::testing::TempDir dir;
  const std::string url = "file://" + dir.str();
  constexpr int kRanks = 3;
  auto rank_main = [&](int rank) -> int {  // 0: threw as expected
    auto store = open_store(url, 5s);
    auto comm = make_communicator(options_for(rank, kRanks, 5s), *store, "job");
    std::vector<float> x(4096, 1.0f);
    comm->allreduce(x.data(), 4096, DType::f32, ReduceOp::sum);
    if (rank == 2) ::raise(SIGKILL);
    try {
      comm->allreduce(x.data(), 4096, DType::f32, ReduceOp::sum);
    } catch (const Error& e) {
      return std::string(e.what()).find("gloo allreduce failed") != std::string::npos ? 0 : 3;
    }
    return 2;
  };
  std::vector<pid_t> children;
  for (int r = 1; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 4;
      try {
        code = rank_main(r);
      } catch (...) {
        code = 5;
      }
      ::_exit(code);  // no gtest or static destructors in the child
    }
    children.push_back(pid);
  }
  std::string error = "no error";
  try {
    auto store = open_store(url, 5s);
    auto comm = make_communicator(options_for(0, kRanks, 5s), *store, "job");
    std::vector<float> x(4096, 1.0f);
    comm->allreduce(x.data(), 4096, DType::f32, ReduceOp::sum);
    EXPECT_EQ(x[0], 3.0f);
    comm->allreduce(x.data(), 4096, DType::f32, ReduceOp::sum);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("gloo allreduce failed on rank 0 of 3"), std::string::npos) << error;
  int status = 0;
  ASSERT_EQ(::waitpid(children[0], &status, 0), children[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "rank 1 exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  ASSERT_EQ(::waitpid(children[1], &status, 0), children[1]);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

}  // namespace
}  // namespace tg::comm
