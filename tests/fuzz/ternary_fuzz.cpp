// Peer bytes of the TernGrad method: the shared meta (scalers) and the packed ternary codes in
// each PackFormat (terngrad/ternary_kernels.h), decoded through the compressor with scaler
// sharing on and off; and the radix-packed integer sums of the exact ternary collectives
// (terngrad/sum_radix.h), which a peer's allreduce contribution fills: any levels, garbage words.
#include "terngrad/sum_radix.h"
#include "tests/fuzz/peer_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::Reader r(data, size);
  const uint8_t flags = r.byte();
  if (flags & 0x80) {  // radix sums: levels 2 .. 2^32, offset 0 .. min(levels, 2^31) - 1
    const uint64_t levels = 2 + r.u32() % 0xFFFFFFFFull;
    const uint64_t offsets = levels < (uint64_t{1} << 31) ? levels : uint64_t{1} << 31;
    const int32_t offset = static_cast<int32_t>(r.u32() % offsets);
    const uint8_t trim = r.byte();  // n = words * f - trim % f: a partial last word too
    const std::vector<uint8_t> raw = r.rest();
    std::vector<uint64_t> words(raw.size() / 8);
    if (!words.empty()) std::memcpy(words.data(), raw.data(), words.size() * 8);
    tg::fuzz::expect_errors([&] {
      const int64_t f = tg::tern::digits_per_word(levels);
      const int64_t n = words.empty() ? 0 : static_cast<int64_t>(words.size()) * f - trim % f;
      std::vector<int32_t> acc(static_cast<size_t>(n));
      tg::tern::unpack_sums_accumulate_cpu(words.data(), n, levels, offset, acc.data());
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
