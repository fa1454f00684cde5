// Error-path assertions: run a callable and check the tg::Error it throws. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "nn/core/error.h"

namespace tg::testing {

// Runs `fn` and expects it to throw a tg::Error whose message contains every one of `fragments`.
// Fails (non-fatally, reported at the caller's line) when nothing is thrown, when another
// exception type is thrown, or once per fragment the message lacks.
// (__builtin_FILE/LINE rather than std::source_location: clang 14, which builds the sanitizer
// and fuzz tree, has no std::source_location with libstdc++ 12.)
template <typename Fn>
void expect_error_with(Fn&& fn, const std::vector<std::string>& fragments,
                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const ::testing::ScopedTrace trace(file, line, "expect_error_with");
  std::string wanted;
  for (const std::string& f : fragments) wanted += (wanted.empty() ? "'" : ", '") + f + "'";
  try {
    fn();
    ADD_FAILURE() << "expected a tg::Error mentioning " << wanted << "; nothing was thrown";
  } catch (const tg::Error& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "error message lacks '" << f << "': " << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a tg::Error mentioning " << wanted
                  << "; got another exception: " << e.what();
  }
}

}  // namespace tg::testing
