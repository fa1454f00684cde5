// Internal to datasets/: the per-kind openers that registry.cpp lists, and the few helpers the
// loaders share (whole-file reads, index checks, the per-example augmentation RNG, TF's
// per-image standardization). Not part of the public API; include datasets/dataset.h instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "nn/core/philox.h"

namespace tg::data::detail {

// One opener per dataset kind (idx.cpp, cifar10.cpp, image_folder.cpp, synthetic.cpp).
std::unique_ptr<Dataset> open_mnist(const DataOptions& options, Split split);
std::unique_ptr<Dataset> open_fashion_mnist(const DataOptions& options, Split split);
std::unique_ptr<Dataset> open_cifar10(const DataOptions& options, Split split);
std::unique_ptr<Dataset> open_image_folder(const DataOptions& options, Split split);
std::unique_ptr<Dataset> open_synthetic(const DataOptions& options, Split split);

// An IDX file (idx.cpp), raw or gzipped, from its bytes: the dimensions and the data after the
// header. `magic` is the expected magic (2051 images, 2049 labels) and `ndim` the dimensions;
// check_dims (may be empty) sees the dimensions as soon as the header is read, before the data
// is inflated. A gzipped file is inflated in chunks and refused as soon as its output passes
// the size its header declares. Throws naming `file` and what is wrong.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& file, uint32_t magic, int ndim,
                   const std::function<void(const std::vector<int64_t>&)>& check_dims);

// CIFAR-10 binary records (cifar10.cpp) from one file's bytes, appended to labels (N) and
// pixels (N x 3 x 32 x 32). Throws naming `file` on a size that is not a positive multiple of
// 3073 or a label outside 0..9.
void parse_cifar10_records(std::span<const uint8_t> bytes, const std::string& file,
                           std::vector<uint8_t>& labels, std::vector<uint8_t>& pixels);

// One JPEG (image_folder.cpp) decoded to RGB (grayscale and CMYK converted): height x width x 3
// bytes. Throws naming `file` on anything libjpeg refuses, a truncated file, or a header that
// declares more than max_pixels (the dataset always uses kMaxImagePixels; the fuzz target passes
// a small cap so mutated headers do not spend its time decoding huge blank images).
struct RgbImage {
  std::vector<uint8_t> rgb;
  int64_t height = 0, width = 0;
};
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;  // 8192 x 8192
RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& file,
                     int64_t max_pixels = kMaxImagePixels);

// The whole file as bytes. Throws naming the file when it is missing or unreadable.
std::vector<uint8_t> read_file(const std::string& path);
// The same into `bytes` (its memory reused).
void read_file(const std::string& path, std::vector<uint8_t>& bytes);
bool file_exists(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// Throws unless every index is in [0, size); `what` names the dataset in the message.
void check_indices(std::span<const int64_t> indices, int64_t size, const std::string& what);

// TF per_image_standardization on n values in place: (x - mean) / max(std, 1/sqrt(n)), with
// the population std; sums in double.
void standardize(float* x, int64_t n);

// The augmentation random numbers of one example: words 0, 1, 2, ... of the Philox stream
// rng_stream(RngPurpose::data, key) under `seed` (key = key_base + position in the request), so
// an example's pixels depend only on (aug_seed, key), never on batch layout or thread.
class AugRng {
 public:
  AugRng(uint64_t seed, uint64_t key) : seed_(seed), stream_(rng_stream(RngPurpose::data, key)) {}
  uint32_t next_u32() {
    if ((i_ & 3) == 0) block_ = philox_block(seed_, stream_, i_ >> 2);
    return block_.v[i_++ & 3];
  }
  // Uniform in [0, 1), 24 random bits.
  float uniform() { return uniform01(next_u32()); }
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n) for 0 < n <= 2^32 (multiply-shift; bias < n / 2^32).
  int64_t below(int64_t n) {
    return static_cast<int64_t>((static_cast<uint64_t>(next_u32()) * static_cast<uint64_t>(n)) >>
                                32);
  }

 private:
  uint64_t seed_, stream_;
  uint64_t i_ = 0;
  Philox4 block_{};
};

}  // namespace tg::data::detail
