// The local (in-process) communicator: every collective and dtype against a hand-computed result
// on P = 1..5 rank threads, bit-identical results on all ranks (f32 summed in rank order), the
// wire figures of comm/wire_model.h, timeouts naming the missing rank, mismatched calls, and a
// broken group failing fast.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "comm/wire_model.h"
#include "nn/core/philox.h"
#include "tests/comm/rank_threads.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

// Runs fn(comm) on one thread per rank; returns each rank's exception message ("" if none).
std::vector<std::string> run_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                                   const std::function<void(Communicator&)>& fn) {
  return comm::run_ranks(static_cast<int>(comms.size()), [&](int r) { fn(*comms[r]); });
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t i) {
  return (static_cast<uint64_t>(philox_word(seed, stream, 2 * i)) << 32) |
         philox_word(seed, stream, 2 * i + 1);
}

// Values of widely varying magnitude, so a float sum depends on its order.
std::vector<float> rank_floats(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = random_bits(77, rank, i);
    const float mant = static_cast<float>(bits & 0xffff) / 65536.0f - 0.5f;
    const int exp = static_cast<int>((bits >> 16) % 40) - 20;
    v[i] = std::ldexp(mant, exp);
  }
  return v;
}

TEST(LocalComm, RejectsBadGroup) {
  EXPECT_THROW(make_local_group(0), Error);
  EXPECT_THROW(make_local_group(2, 0ms), Error);
}

TEST(LocalComm, ReportsIdentity) {
  auto comms = make_local_group(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->backend(), "local");
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), 3);
    EXPECT_TRUE(comms[r]->device().is_cpu());
  }
}

TEST(LocalComm, AllreduceF32SumIsRankOrderOnEveryRank) {
  for (int p = 1; p <= 5; ++p) {
    const int64_t n = 1001;
    std::vector<float> expected = rank_floats(0, n);
    for (int r = 1; r < p; ++r) {
      const std::vector<float> v = rank_floats(r, n);
      for (int64_t i = 0; i < n; ++i) expected[i] += v[i];
    }
    std::vector<std::vector<float>> bufs(p);
    for (int r = 0; r < p; ++r) bufs[r] = rank_floats(r, n);
    auto comms = make_local_group(p);
    expect_no_errors(run_ranks(comms, [&](Communicator& c) {
      c.allreduce(bufs[c.rank()].data(), n, DType::f32, ReduceOp::sum);
    }));
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(std::memcmp(bufs[r].data(), expected.data(), n * sizeof(float)), 0)
          << "P=" << p << " rank " << r;
      const WireBytes w = comms[r]->wire();
      EXPECT_EQ(w.sent, 2 * (p - 1) * n * 4 / p);
      EXPECT_EQ(w.received, w.sent);
    }
  }
}

template <typename T>
void check_integer_allreduce(DType dtype) {
  for (int p = 1; p <= 4; ++p) {
    const int64_t n = 37;
    std::vector<std::vector<T>> bufs(p, std::vector<T>(n));
    std::vector<T> sum(n), mx(n);
    for (int r = 0; r < p; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        // Spans the whole range, so sums wrap.
        bufs[r][i] = static_cast<T>(random_bits(5, r, i) >> (64 - 8 * sizeof(T)));
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      using U = std::make_unsigned_t<T>;
      U s = 0;
      T m = bufs[0][i];
      for (int r = 0; r < p; ++r) {
        s = static_cast<U>(s + static_cast<U>(bufs[r][i]));
        m = std::max(m, bufs[r][i]);
      }
      sum[i] = static_cast<T>(s);
      mx[i] = m;
    }
    auto maxbufs = bufs;
    auto comms = make_local_group(p);
    expect_no_errors(run_ranks(comms, [&](Communicator& c) {
      c.allreduce(bufs[c.rank()].data(), n, dtype, ReduceOp::sum);
      c.allreduce(maxbufs[c.rank()].data(), n, dtype, ReduceOp::max);
    }));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(bufs[r], sum) << dtype_name(dtype) << " P=" << p << " rank " << r;
      EXPECT_EQ(maxbufs[r], mx) << dtype_name(dtype) << " P=" << p << " rank " << r;
      EXPECT_EQ(comms[r]->wire().sent, 2 * (2 * (p - 1) * n * sizeof(T) / p));
    }
  }
}

TEST(LocalComm, AllreduceIntegersWrapAndMax) {
  check_integer_allreduce<int32_t>(DType::i32);
  check_integer_allreduce<int64_t>(DType::i64);
  check_integer_allreduce<uint64_t>(DType::u64);
}

TEST(LocalComm, AllreduceF32Max) {
  const int p = 3, n = 100;
  std::vector<std::vector<float>> bufs(p);
  for (int r = 0; r < p; ++r) bufs[r] = rank_floats(r, n);
  std::vector<float> expected = bufs[0];
  for (int r = 1; r < p; ++r) {
    for (int i = 0; i < n; ++i) expected[i] = std::max(expected[i], bufs[r][i]);
  }
  auto comms = make_local_group(p);
  expect_no_errors(run_ranks(comms, [&](Communicator& c) {
    c.allreduce(bufs[c.rank()].data(), n, DType::f32, ReduceOp::max);
  }));
  for (int r = 0; r < p; ++r) EXPECT_EQ(bufs[r], expected);
}

TEST(LocalComm, AllreduceRejectsUnsupportedDtype) {
  auto comms = make_local_group(1);
  uint8_t b[4] = {};
  EXPECT_THROW(comms[0]->allreduce(b, 4, DType::u8, ReduceOp::sum), Error);
}

TEST(LocalComm, AllgatherGatherBroadcast) {
  for (int p = 1; p <= 5; ++p) {
    const size_t bytes = 13;
    auto payload = [&](int r) {
      std::vector<uint8_t> v(bytes);
      for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(r * 31 + i);
      return v;
    };
    std::vector<uint8_t> all;
    for (int r = 0; r < p; ++r) {
      const auto v = payload(r);
      all.insert(all.end(), v.begin(), v.end());
    }
    const int root = p - 1;
    std::vector<std::vector<uint8_t>> gathered(p, std::vector<uint8_t>(p * bytes)),
        at_root(p, std::vector<uint8_t>(p * bytes)), bcast(p);
    auto comms = make_local_group(p);
    expect_no_errors(run_ranks(comms, [&](Communicator& c) {
      const int r = c.rank();
      const auto mine = payload(r);
      c.allgather(mine.data(), gathered[r].data(), bytes);
      c.gather(mine.data(), r == root ? at_root[r].data() : nullptr, bytes, root);
      bcast[r] = r == 0 ? payload(0) : std::vector<uint8_t>(bytes, 0xee);
      c.broadcast(bcast[r].data(), bytes, 0);
      c.barrier();
      // In place: rank r's block already sits at out + r * bytes.
      std::vector<uint8_t> inplace(p * bytes, 0);
      std::memcpy(inplace.data() + r * bytes, mine.data(), bytes);
      c.allgather(inplace.data() + r * bytes, inplace.data(), bytes);
      if (inplace != all) throw std::runtime_error("in-place allgather differs");
    }));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(gathered[r], all) << "P=" << p << " rank " << r;
      EXPECT_EQ(bcast[r], payload(0)) << "P=" << p << " rank " << r;
      // allgather twice, gather to root, broadcast from 0, barrier (free).
      WireBytes expected;
      wire_model::add(expected, wire_model::allgather(bytes, p));
      wire_model::add(expected, wire_model::gather(bytes, p, r, root));
      wire_model::add(expected, wire_model::broadcast(bytes, p, r, 0));
      wire_model::add(expected, wire_model::allgather(bytes, p));
      EXPECT_EQ(comms[r]->wire().sent, expected.sent) << "P=" << p << " rank " << r;
      EXPECT_EQ(comms[r]->wire().received, expected.received) << "P=" << p << " rank " << r;
    }
    EXPECT_EQ(at_root[root], all) << "P=" << p;
  }
}

// alltoall: rank r's block q lands at rank q's out[r * bytes ..]; P - 1 blocks each way.
TEST(LocalComm, AlltoallDeliversEachBlockToItsRank) {
  for (int p = 1; p <= 5; ++p) {
    const size_t bytes = 11;
    auto byte = [](int from, int to, size_t i) {
      return static_cast<uint8_t>(from * 50 + to * 7 + i);
    };
    std::vector<std::vector<uint8_t>> outs(p, std::vector<uint8_t>(p * bytes, 0xee));
    auto comms = make_local_group(p);
    expect_no_errors(run_ranks(comms, [&](Communicator& c) {
      const int r = c.rank();
      std::vector<uint8_t> in(p * bytes);
      for (int q = 0; q < p; ++q)
        for (size_t i = 0; i < bytes; ++i) in[q * bytes + i] = byte(r, q, i);
      c.alltoall(in.data(), outs[r].data(), bytes);
    }));
    for (int q = 0; q < p; ++q) {
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < bytes; ++i)
          ASSERT_EQ(outs[q][r * bytes + i], byte(r, q, i)) << "P=" << p << " at rank " << q;
      EXPECT_EQ(comms[q]->wire().sent, (p - 1) * bytes);
      EXPECT_EQ(comms[q]->wire().received, (p - 1) * bytes);
    }
  }
}

// exchange: every rank's messages of the test plan (rank_threads.h) arrive whole, the wire counts
// exactly the listed bytes, and a group of one takes only empty lists.
TEST(LocalComm, ExchangeDeliversThePlanAndCountsItsBytes) {
  for (int p = 1; p <= 5; ++p) {
    auto comms = make_local_group(p);
    for (int round = 0; round < 3; ++round)  // back to back: the lists of one call stay apart
      expect_no_errors(run_ranks(comms, [&](Communicator& c) { run_exchange_plan(c); }));
  }
  auto self = make_self_communicator(Device::cpu());
  self->exchange({}, {});
  uint8_t b = 0;
  const SendSpec to_self{0, &b, 1};
  EXPECT_THROW(self->exchange({&to_self, 1}, {}), Error);
}

TEST(LocalComm, ExchangeRefusesBadListsAndNamesAPeerThatDisagrees) {
  auto comms = make_local_group(3);
  uint8_t buf[8] = {};
  const SendSpec self{0, buf, 1}, out_of_range{3, buf, 1}, null_data{1, nullptr, 4};
  const SendSpec twice[] = {{1, buf, 1}, {1, buf, 1}};
  EXPECT_NE(error_of([&] {
              comms[0]->exchange({&self, 1}, {});
            }).find("peer 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              comms[0]->exchange({&out_of_range, 1}, {});
            }).find("peer 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { comms[0]->exchange(twice, {}); }).find("listed twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              comms[0]->exchange({&null_data, 1}, {});
            }).find("null"),
            std::string::npos);
  // Rank 0 sends 4 bytes to rank 1, which expects 5: rank 1 names rank 0.
  const auto errors = run_ranks(comms, [&](Communicator& c) {
    uint8_t data[8] = {};
    const SendSpec s{1, data, 4};
    const RecvSpec r{0, data, 5};
    if (c.rank() == 0) c.exchange({&s, 1}, {});
    if (c.rank() == 1) c.exchange({}, {&r, 1});
    if (c.rank() == 2) c.exchange({}, {});
  });
  EXPECT_NE(errors[1].find("expects 5 bytes from rank 0, which sends 4"), std::string::npos)
      << errors[1];
}

TEST(LocalComm, WireModelFigures) {
  // Hand-computed: B = 1000 bytes over P = 4.
  EXPECT_EQ(wire_model::allreduce(1000, 4).sent, 1500u);
  EXPECT_EQ(wire_model::allgather(1000, 4).received, 3000u);
  EXPECT_EQ(wire_model::gather(1000, 4, 2, 2).received, 3000u);
  EXPECT_EQ(wire_model::gather(1000, 4, 1, 2).sent, 1000u);
  EXPECT_EQ(wire_model::broadcast(1000, 4, 0, 0).sent, 3000u);
  EXPECT_EQ(wire_model::broadcast(1000, 4, 3, 0).received, 1000u);
  EXPECT_EQ(wire_model::allreduce(1000, 1).sent, 0u);
  EXPECT_EQ(wire_model::broadcast(1000, 1, 0, 0).sent, 0u);
}

// Many short collectives back to back: a fast rank posting its next call while a slow one still
// reads the previous call's descriptors must not confuse either.
TEST(LocalComm, ManyBackToBackCalls) {
  const int p = 4, rounds = 300;
  auto comms = make_local_group(p);
  expect_no_errors(run_ranks(comms, [&](Communicator& c) {
    for (int i = 0; i < rounds; ++i) {
      c.barrier();
      int64_t v = c.rank() + i;
      c.allreduce(&v, 1, DType::i64, ReduceOp::sum);
      if (v != static_cast<int64_t>(p) * i + p * (p - 1) / 2) {
        throw std::runtime_error("wrong sum in round " + std::to_string(i));
      }
      uint32_t x = static_cast<uint32_t>(c.rank() * 1000 + i), out[p];
      c.allgather(&x, out, sizeof(x));
      for (int r = 0; r < p; ++r) {
        if (out[r] != static_cast<uint32_t>(r * 1000 + i)) throw std::runtime_error("allgather");
      }
    }
  }));
}

TEST(LocalComm, MissingRankTimesOutNamingIt) {
  auto comms = make_local_group(3, 200ms);
  comms.pop_back();  // rank 2 never calls (its communicator is gone; the group lives on)
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks(comms, [](Communicator& c) {
    float v = 1;
    c.allreduce(&v, 1, DType::f32, ReduceOp::sum);
  });
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(elapsed, 20s);  // bounded: far from a hang (no timing assert beyond that)
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank(s) 2"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("allreduce"), std::string::npos) << errors[r];
  }
  // The group is broken: the next call throws at once.
  float v = 1;
  try {
    comms[0]->allreduce(&v, 1, DType::f32, ReduceOp::sum);
    ADD_FAILURE() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
  }
}

TEST(LocalComm, MismatchedCallsThrowOnEveryRank) {
  auto comms = make_local_group(3, 5000ms);
  const auto errors = run_ranks(comms, [](Communicator& c) {
    std::vector<float> v(8, 1.0f);
    c.allreduce(v.data(), c.rank() == 1 ? 5 : 4, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("mismatched collective"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 1 called allreduce(n=5"), std::string::npos) << errors[r];
  }
}

TEST(LocalComm, MismatchedKindThrows) {
  auto comms = make_local_group(2, 5000ms);
  const auto errors = run_ranks(comms, [](Communicator& c) {
    uint8_t b[4] = {};
    if (c.rank() == 0) {
      c.broadcast(b, 4, 0);
    } else {
      c.barrier();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("mismatched collective"), std::string::npos) << errors[r];
  }
}

TEST(LocalComm, BadRootThrows) {
  auto comms = make_local_group(1);
  uint8_t b[4] = {};
  EXPECT_THROW(comms[0]->broadcast(b, 4, 1), Error);
  EXPECT_THROW(comms[0]->gather(b, b, 4, -1), Error);
}

}  // namespace
}  // namespace tg::comm
