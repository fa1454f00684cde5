// The perf-model cluster file (cmd/perf_inputs.h: parse_cluster_toml).
#include "cmd/perf_inputs.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tg::fuzz::expect_errors([&] { tg::cli::parse_cluster_toml(text, "fuzz-cluster.toml"); });
  return 0;
}
