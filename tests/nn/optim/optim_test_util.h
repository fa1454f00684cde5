// Helpers shared by the tests of nn/optim: an error-message matcher.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "nn/core/error.h"

namespace tg::testing {

// Expects `f()` to throw a tg::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a tg::Error containing '" << needle << "', nothing was thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not contain '" << needle << "'";
  }
}

}  // namespace tg::testing
