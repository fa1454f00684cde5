// TOML config + --set overrides (config/config.h: parse_config). Input: the TOML text, then one
// override per '\0'-separated part ("a = 1\0train.lr=0.1\0model.name=x").
#include "config/config.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = tg::fuzz::split_nul(data, size);
  const std::string text = parts.front();
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  tg::fuzz::expect_errors([&] {
    const tg::config::Config c = tg::config::parse_config(text, "fuzz.toml", overrides);
    // What the CLI does with a parsed config: print it and read the print back.
    tg::config::parse_config(tg::config::to_toml(c), "fuzz-resolved.toml");
  });
  return 0;
}
