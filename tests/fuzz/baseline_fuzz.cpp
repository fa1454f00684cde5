// Peer bytes of the baseline methods (terngrad/baseline_kernels.h): fp16 values, QSGD buckets
// (norm + level codes), 1-bit SGD (two means + sign bits), decoded through the compressor.
#include "tests/fuzz/peer_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::Reader r(data, size);
  const uint8_t flags = r.byte();
  tg::tern::CompressionOptions o;
  using tg::tern::Method;
  const Method methods[] = {Method::fp16, Method::qsgd, Method::onebit, Method::none};
  o.method = methods[flags % 4];
  o.qsgd_levels = 1 + r.byte() % 16;
  o.qsgd_bucket = 1 + r.byte() % 130;
  tg::fuzz::expect_errors([&] { tg::fuzz::decode_peer_message(r, o); });
  return 0;
}
