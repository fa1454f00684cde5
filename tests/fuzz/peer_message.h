// One worker's message as a peer sends it, decoded by a compressor (terngrad/compressor.h):
// the options and layout come from the first bytes, then the shared meta (the allreduce-max a
// peer contributes to), then the message bytes (zero-padded to the length the layout gives: the
// communicator moves exactly that many). Decoding = accumulate + finalize, as every rank runs.
#pragma once

#include <cstring>
#include <memory>

#include "terngrad/compressor.h"
#include "tests/fuzz/fuzz.h"

namespace tg::fuzz {

inline void decode_peer_message(Reader& r, const tern::CompressionOptions& o) {
  std::vector<tern::GradSlot> layout;
  const int slots = 1 + r.byte() % 4;
  int64_t offset = 0;
  for (int s = 0; s < slots; ++s) {
    const int64_t n = 1 + r.byte() % 70;
    layout.push_back({"slot" + std::to_string(s), offset, n});
    offset += n;
  }
  const int64_t step = r.byte();
  const int workers = 1 + r.byte() % 4;
  std::unique_ptr<tern::Compressor> c = tern::make_compressor(o, layout);
  std::vector<float> meta(static_cast<size_t>(c->num_meta()));
  for (float& m : meta) m = r.f32();
  const size_t bytes = c->payload_bytes(step);
  Tensor msg = Tensor::zeros({static_cast<int64_t>(bytes)}, DType::u8);
  const std::vector<uint8_t> got = r.bytes(bytes);
  if (!got.empty()) std::memcpy(msg.raw_data(), got.data(), got.size());
  tern::Accumulator acc = c->make_accumulator(Device::cpu());
  for (int w = 0; w < workers; ++w) c->accumulate(msg, meta.data(), step, acc);
  Tensor out = Tensor::empty({c->total()}, DType::f32);
  c->finalize(acc, meta.data(), step, workers, out);
}

}  // namespace tg::fuzz
