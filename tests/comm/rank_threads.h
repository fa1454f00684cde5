// Helpers for communicator tests: ranks as threads of the test process.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
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
  o.backend = "gloo";
  o.rank = rank;
  o.size = size;
  o.hostname = "127.0.0.1";
  o.timeout = timeout;
  return o;
}

}  // namespace tg::comm
