// Peer bytes of the TernGrad method: the shared meta (scalers) and the packed ternary codes in
// each PackFormat (terngrad/ternary_kernels.h), decoded through the compressor with scaler
// sharing on and off; and the packed integer sum fields of the exact ternary collectives
// (terngrad/ternary_fields.h), which a peer's allreduce contribution fills.
#include "terngrad/ternary_fields.h"
#include "tests/fuzz/peer_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::Reader r(data, size);
  const uint8_t flags = r.byte();
  if (flags & 0x80) {  // sum fields: k bits per field, offset = the worker count
    const int k = 1 + r.byte() % 32;
    const int32_t workers = 1 + static_cast<int32_t>(r.u32() % (1u << 30));
    const std::vector<uint8_t> raw = r.rest();
    std::vector<uint64_t> words(raw.size() / 8);
    if (!words.empty()) std::memcpy(words.data(), raw.data(), words.size() * 8);
    tg::fuzz::expect_errors([&] {
      const int64_t n = static_cast<int64_t>(words.size()) * tg::tern::fields_per_word(k);
      std::vector<int32_t> acc(static_cast<size_t>(n));
      tg::tern::unpack_sum_fields_accumulate_cpu(words.data(), n, k, workers, acc.data());
    });
    return 0;
  }
  tg::tern::CompressionOptions o;
  o.method = ::tg::tern::Method::terngrad;
  o.pack = flags & 1 ? tg::tern::PackFormat::base3 : tg::tern::PackFormat::two_bit;
  o.scaler_sharing = flags & 2 ? ::tg::tern::ScalerSharing::none : ::tg::tern::ScalerSharing::max;
  o.quantize_logits = flags & 4;
  o.min_size = flags & 8 ? 8 : 1;
  o.clip = flags & 16 ? 0.0 : 2.5;
  tg::fuzz::expect_errors([&] { tg::fuzz::decode_peer_message(r, o); });
  return 0;
}
