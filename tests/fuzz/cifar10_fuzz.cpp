// CIFAR-10 binary batches (datasets/loaders.h: parse_cifar10_records).
#include "datasets/loaders.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> labels, pixels;
  tg::fuzz::expect_errors([&] {
    tg::data::detail::parse_cifar10_records({data, size}, "fuzz_batch.bin", labels, pixels);
    TG_CHECK(pixels.size() == labels.size() * 3072, "fuzz: ", labels.size(), " labels but ",
             pixels.size(), " pixel bytes");
  });
  return 0;
}
