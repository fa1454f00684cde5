// IDX files, raw and gzipped (datasets/loaders.h: parse_idx): the bytes are read both as an
// MNIST image file (magic 2051, N x 28 x 28) and as a label file (magic 2049, N).
#include "datasets/loaders.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tg::data::detail::parse_idx;
  const std::vector<uint8_t> bytes(data, data + size);
  tg::fuzz::expect_errors([&] {
    parse_idx(bytes, "fuzz-images-idx3-ubyte", 2051, 3, [](const std::vector<int64_t>& d) {
      TG_CHECK(d[1] == 28 && d[2] == 28, "images are not 28 x 28");
    });
  });
  tg::fuzz::expect_errors([&] { parse_idx(bytes, "fuzz-labels-idx1-ubyte", 2049, 1, {}); });
  return 0;
}
