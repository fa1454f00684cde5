// Helpers for communicator tests: ranks as threads of the test process, the options of a gloo or
// nccl rank, layouts and small buckets for the reducer's tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/buckets.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "nn/core/error.h"

namespace tg::comm {

// Runs fn(rank) on one thread per rank; returns each rank's exception message ("" if none,
// "(empty message)" for an exception without one).
inline std::vector<std::string> run_ranks(int p, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// The message of the tg::Error fn throws, "" if it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Options of a gloo communicator for rank `rank` of `size` over loopback (127.0.0.1).
inline CommOptions gloo_loopback(int rank, int size, std::chrono::milliseconds timeout) {
  CommOptions o;
  o.backend = Backend::gloo;
  o.rank = rank;
  o.size = size;
  o.hostname = "127.0.0.1";
  o.timeout = timeout;
  return o;
}

// Options of an nccl communicator for rank `rank` of `size` on `device`.
inline CommOptions nccl_options(int rank, int size, Device device) {
  CommOptions o;
  o.backend = Backend::nccl;
  o.rank = rank;
  o.size = size;
  o.device = device;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// The test plan of Communicator::exchange: rank `from` sends rank `to` plan_bytes(from, to) bytes
// plan_byte(from, to, i), or no message at all where plan_talks is false (a third of the pairs,
// asymmetric); some messages are empty. Every rank runs one exchange of the plan and checks what
// arrived and the wire bytes; throws std::runtime_error naming the wrong byte.
inline bool plan_talks(int from, int to) {
  return (2 * from + to) % 3 != 0;
}
inline size_t plan_bytes(int from, int to) {
  return static_cast<size_t>((from * 7 + to * 3) % 5) * 997;  // 0 for some pairs
}
inline uint8_t plan_byte(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 41 + to * 13 + i * 7 + i / 251);
}
inline void run_exchange_plan(Communicator& c) {
  const int r = c.rank(), p = c.size();
  std::vector<std::vector<uint8_t>> out(p), in(p);
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  WireBytes want;
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    if (plan_talks(r, q)) {
      out[q].resize(plan_bytes(r, q));
      for (size_t i = 0; i < out[q].size(); ++i) out[q][i] = plan_byte(r, q, i);
      sends.push_back({q, out[q].data(), out[q].size()});
      want.sent += out[q].size();
    }
    if (plan_talks(q, r)) {
      in[q].assign(plan_bytes(q, r), 0xee);
      recvs.push_back({q, in[q].data(), in[q].size()});
      want.received += in[q].size();
    }
  }
  const WireBytes before = c.wire();
  c.exchange(sends, recvs);
  for (int q = 0; q < p; ++q)
    for (size_t i = 0; i < in[q].size(); ++i)
      if (in[q][i] != plan_byte(q, r, i))
        throw std::runtime_error("exchange: rank " + std::to_string(r) + " got a wrong byte " +
                                 std::to_string(i) + " from rank " + std::to_string(q));
  if (c.wire().sent - before.sent != want.sent ||
      c.wire().received - before.received != want.received)
    throw std::runtime_error("exchange: rank " + std::to_string(r) + " counted the wrong bytes");
}

// A layout of slots of these sizes, back to back, named t0, t1, ...
inline std::vector<GradSlot> layout_of(const std::vector<int64_t>& sizes) {
  std::vector<GradSlot> layout;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string name = "t";  // (not "t" + to_string: GCC 12 -Wrestrict false positive)
    name += std::to_string(i);
    layout.push_back({name, offset, sizes[i]});
    offset += sizes[i];
  }
  return layout;
}

// The reducer's options for buckets of 1500 B, the first closed at 250 B: several buckets of a
// few small slots.
inline ReducerOptions small_buckets(bool overlap) {
  ReducerOptions o;
  o.bucket_mb = 1500.0 / (1 << 20);
  o.first_bucket_bytes = 250;
  o.overlap = overlap;
  return o;
}

}  // namespace tg::comm
