// DynamicLibrary (nn/core/dynamic_library.h), the loader behind CUDA on demand: a library that
// opens gives its functions; one that does not, or a missing symbol, is a one-line tg::Error
// naming the library, the loader's reason and the advice, never a crash.
#include "nn/core/dynamic_library.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "nn/core/error.h"

namespace tg {
namespace {

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DynamicLibrary, OpensBySonameAndResolvesFunctions) {
  const DynamicLibrary lib("libm.so.6", "", "unused");
  EXPECT_EQ(lib.path(), "libm.so.6");
  const auto cos_fn = lib.function<double (*)(double)>("cos");
  EXPECT_EQ(cos_fn(0.5), std::cos(0.5));
}

TEST(DynamicLibrary, FallsBackToThePathTheBuildUsed) {
  const DynamicLibrary lib("libtg-no-such-library.so.7", "libm.so.6", "unused");
  EXPECT_EQ(lib.path(), "libm.so.6");
}

TEST(DynamicLibrary, MissingLibraryNamesItTheReasonAndTheAdvice) {
  const std::string msg = error_of([] {
    DynamicLibrary("libtg-no-such-library.so.7", "/nonexistent/libtg-no-such-library.so.7",
                   "install it, or use the CPU device");
  });
  EXPECT_NE(msg.find("cannot load libtg-no-such-library.so.7: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open shared object file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(install it, or use the CPU device)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(DynamicLibrary, MissingSymbolNamesTheLibraryAndTheSymbol) {
  const DynamicLibrary lib("libm.so.6", "", "unused");
  const std::string msg = error_of([&] { lib.symbol("tg_no_such_symbol"); });
  EXPECT_NE(msg.find("libm.so.6 has no symbol tg_no_such_symbol"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tg
