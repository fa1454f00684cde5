// The perf-model cluster file (train/perf_inputs.h: parse_cluster_toml).
#include "tests/fuzz/fuzz.h"
#include "train/perf_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tg::fuzz::expect_errors([&] { tg::train::parse_cluster_toml(text, "fuzz-cluster.toml"); });
  return 0;
}
