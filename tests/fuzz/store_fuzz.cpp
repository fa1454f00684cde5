// The rendezvous store's messages: a peer's start-up record (train/distributed.h:
// parse_rendezvous_hello) and the config difference report it feeds.
#include "tests/fuzz/fuzz.h"
#include "train/config.h"
#include "train/distributed.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tg::fuzz::expect_errors([&] {
    const tg::train::RendezvousHello h = tg::train::parse_rendezvous_hello(bytes, 1);
    tg::train::config_diff("[model]\nname = \"lenet\"\n", h.config, "rank 0: ", "rank 1: ");
  });
  return 0;
}
