// One image of an image folder (datasets/loaders.h: decode_jpeg; the image-folder dataset reads
// JPEG only, so this is its whole decoder).
#include "datasets/loaders.h"
#include "tests/fuzz/fuzz.h"

// A mutated header can declare up to the dataset's 8192 x 8192 pixels, which libjpeg then decodes
// in full from a few bytes of data (a premature marker is only a warning): the first run managed
// 15 executions a second. 64 x 64 still spans several MCU rows and columns, and our code does
// the same per row whatever the size, so the cap costs no coverage of ours; the dataset's own
// cap is tested in tests/datasets/image_folder_test.cpp.
constexpr int64_t kFuzzMaxPixels = 64 * 64;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::expect_errors([&] {
    const auto img = tg::data::detail::decode_jpeg({data, size}, "fuzz.jpg", kFuzzMaxPixels);
    TG_CHECK(img.rgb.size() == static_cast<size_t>(img.height * img.width * 3), "fuzz: decoded ",
             img.rgb.size(), " bytes for ", img.height, " x ", img.width);
    TG_CHECK(img.height * img.width <= kFuzzMaxPixels, "fuzz: decoded ", img.height, " x ",
             img.width, " past the cap");
  });
  return 0;
}
