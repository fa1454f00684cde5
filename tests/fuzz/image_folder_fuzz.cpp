// One image of an image folder (datasets/loaders.h: decode_jpeg; the image-folder dataset reads
// JPEG only, so this is its whole decoder).
#include "datasets/loaders.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::expect_errors([&] {
    const auto img = tg::data::detail::decode_jpeg({data, size}, "fuzz.jpg");
    TG_CHECK(img.rgb.size() == static_cast<size_t>(img.height * img.width * 3), "fuzz: decoded ",
             img.rgb.size(), " bytes for ", img.height, " x ", img.width);
  });
  return 0;
}
