// Helpers for communicator tests: ranks as threads of the test process, the options of a gloo or
// nccl rank, layouts and small buckets for the reducer's tests.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
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

// The reducer's options for buckets of 1500 B, the first at most 300 B: several buckets of a
// few small slots.
inline ReducerOptions small_buckets(bool overlap) {
  ReducerOptions o;
  o.bucket_mb = 1500.0 / (1 << 20);
  o.first_bucket_bytes = 300;
  o.overlap = overlap;
  return o;
}

}  // namespace tg::comm
