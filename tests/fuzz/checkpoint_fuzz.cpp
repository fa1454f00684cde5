// Checkpoints (train/checkpoint.h: parse_checkpoint). The input is a checkpoint without its
// trailing SHA-256, which the target appends, so the mutations reach the header and tensor
// parser instead of stopping at the checksum. A checkpoint that loads has its embedded config
// parsed as `terngrad eval` would.
#include "config/config.h"
#include "nn/core/hash.h"
#include "tests/fuzz/fuzz.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  bytes += tg::sha256_hex(bytes.data(), bytes.size());
  tg::fuzz::expect_errors([&] {
    const tg::train::Checkpoint ck = tg::train::parse_checkpoint(bytes, "fuzz.tgckpt");
    for (const auto& [name, t] : ck.tensors)
      TG_CHECK(t.is_contiguous(), "fuzz: tensor '", name, "' is not contiguous");
    tg::config::parse_config(ck.config_toml, "fuzz.tgckpt (config)");
  });
  return 0;
}
