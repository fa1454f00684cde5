// The rendezvous store's messages: a peer's start-up record (comm/process_group.h:
// parse_rendezvous_hello) and the config difference report it feeds.
#include "comm/process_group.h"
#include "config/config.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tg::fuzz::expect_errors([&] {
    const tg::comm::RendezvousHello h = tg::comm::parse_rendezvous_hello(bytes, 1);
    tg::config::config_diff("[model]\nname = \"lenet\"\n", h.config, "rank 0: ", "rank 1: ");
  });
  return 0;
}
