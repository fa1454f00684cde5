// CIFAR-10, binary version: each file is a sequence of 3073-byte records, 1 label byte (0..9)
// then 3072 pixel bytes: the R, G and B planes of a 32 x 32 image, each row-major. Train =
// data_batch_1..5.bin, test = test_batch.bin, in data.path or data.path/cifar-10-batches-bin
// (the directory the official tarball unpacks to). The whole split stays in memory as uint8.
//
// Preprocessing follows TF's cifar10_input.py, which the reference code uses:
//   train: cast the uint8 image to float32 (values 0..255), random_crop to S x S (S = 24), random
//          horizontal flip (p = 0.5), random_brightness(max_delta = 63): x += d, d ~ U[-63, 63),
//          random_contrast(0.2, 1.8): per channel (x - mean_c) * f + mean_c with one factor
//          f ~ U[0.2, 1.8) and mean_c the channel's mean over the crop, then
//          per_image_standardization: (x - mean) / max(std, 1 / sqrt(3 S^2)).
//   eval:  central S x S crop (offset (32 - S) / 2, rounded down as TF's crop_or_pad) + the
//          standardization.
// TF adds the brightness delta on the 0..255 scale, i.e. +-63 there (= +-63/255 on [0, 1]
// pixels, as it is often quoted; TF does not clip float images, and the standardization makes
// the two scales give the same output up to the 1/sqrt(n) floor). No clipping anywhere, as TF.
// Random numbers of an example: words 0..4 of AugRng(aug_seed, key) = crop y, crop x, flip,
// brightness, contrast.
#include <algorithm>
#include <cmath>

#include "datasets/loaders.h"
#include "nn/core/checked.h"
#include "nn/core/error.h"

namespace tg::data::detail {
namespace {

constexpr int64_t kSide = 32;
constexpr int64_t kPlane = kSide * kSide;  // 1024
constexpr int64_t kPixels = 3 * kPlane;    // 3072
constexpr int64_t kRecord = 1 + kPixels;   // 3073
constexpr int64_t kClasses = 10;
constexpr int64_t kDefaultCrop = 24;
constexpr float kMaxBrightnessDelta = 63.0f;  // on the 0..255 scale (TF cifar10_input.py)
constexpr float kContrastLower = 0.2f, kContrastUpper = 1.8f;

std::string find_dir(const std::string& path) {
  const std::string probe = "test_batch.bin";
  if (file_exists(join_path(path, probe))) return path;
  const std::string nested = join_path(path, "cifar-10-batches-bin");
  if (file_exists(join_path(nested, probe))) return nested;
  return path;  // the missing-file error below names the expected file in `path`
}

class Cifar10Dataset final : public Dataset {
 public:
  Cifar10Dataset(const DataOptions& options, Split split) {
    TG_CHECK(!options.path.empty(),
             "cifar10: no data.path given (expected the directory with data_batch_1..5.bin and "
             "test_batch.bin, or its parent holding cifar-10-batches-bin)");
    const int64_t crop = options.image_size == 0 ? kDefaultCrop : options.image_size;
    TG_CHECK(crop >= 1 && crop <= kSide, "cifar10: data.image_size ", options.image_size,
             " is out of range (expected 0 for the default ", kDefaultCrop, ", or 1..", kSide, ")");
    const std::string dir = find_dir(options.path);
    std::vector<std::string> files;
    if (split == Split::train) {
      for (int b = 1; b <= 5; ++b)
        files.push_back(join_path(dir, "data_batch_" + std::to_string(b) + ".bin"));
    } else {
      files.push_back(join_path(dir, "test_batch.bin"));
    }
    for (const std::string& file : files) {  // all present before reading 150 MB
      TG_CHECK(file_exists(file), "cifar10: missing file ", file,
               " (expected the CIFAR-10 binary version in data.path: data_batch_1..5.bin, "
               "test_batch.bin)");
    }
    for (const std::string& file : files) append_file(file);
    augment_ = options.augment;
    info_.name = "cifar10";
    info_.path = dir;
    info_.split = split;
    info_.size = static_cast<int64_t>(labels_.size());
    info_.channels = 3;
    info_.height = info_.width = crop;
    info_.num_classes = kClasses;
  }

  void load(std::span<const int64_t> indices, bool augment, uint64_t aug_seed, uint64_t key_base,
            float* images, int32_t* labels) const override {
    check_indices(indices, info_.size, info_.name);
    const int64_t s = info_.height, n = 3 * s * s;
    const bool distort = augment && augment_ && info_.split == Split::train;
    for (size_t k = 0; k < indices.size(); ++k) {
      const uint8_t* src = pixels_.data() + indices[k] * kPixels;
      float* dst = images + static_cast<int64_t>(k) * n;
      labels[k] = labels_[indices[k]];
      int64_t oy = (kSide - s) / 2, ox = (kSide - s) / 2;
      bool flip = false;
      float delta = 0.0f, factor = 1.0f;
      if (distort) {
        AugRng rng(aug_seed, key_base + k);
        oy = rng.below(kSide - s + 1);
        ox = rng.below(kSide - s + 1);
        flip = rng.uniform() < 0.5f;
        delta = rng.uniform(-kMaxBrightnessDelta, kMaxBrightnessDelta);
        factor = rng.uniform(kContrastLower, kContrastUpper);
      }
      for (int64_t c = 0; c < 3; ++c) {
        float* out = dst + c * s * s;
        for (int64_t y = 0; y < s; ++y) {
          const uint8_t* row = src + c * kPlane + (oy + y) * kSide + ox;
          float* orow = out + y * s;
          if (flip) {
            for (int64_t x = 0; x < s; ++x) orow[x] = row[s - 1 - x];
          } else {
            for (int64_t x = 0; x < s; ++x) orow[x] = row[x];
          }
        }
        if (distort) {
          // Brightness then contrast: ((x + d) - (m + d)) * f + (m + d) = (x - m) * f + m + d.
          double sum = 0.0;
          for (int64_t i = 0; i < s * s; ++i) sum += out[i];
          const float mean = static_cast<float>(sum / static_cast<double>(s * s)) + delta;
          for (int64_t i = 0; i < s * s; ++i) out[i] = (out[i] + delta - mean) * factor + mean;
        }
      }
      standardize(dst, n);
    }
  }

 private:
  void append_file(const std::string& file) {
    parse_cifar10_records(read_file(file), file, labels_, pixels_);
  }

  std::vector<uint8_t> pixels_;  // N x 3 x 32 x 32
  std::vector<uint8_t> labels_;  // N
  bool augment_ = true;
};

}  // namespace

void parse_cifar10_records(std::span<const uint8_t> bytes, const std::string& file,
                           std::vector<uint8_t>& labels, std::vector<uint8_t>& pixels) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  TG_CHECK(size > 0 && size % kRecord == 0, file, ": size ", size,
           " bytes is not a positive multiple of ", kRecord,
           " (1 label byte + 3072 pixel bytes per record)");
  const int64_t records = size / kRecord;
  const size_t base = labels.size();
  for (int64_t r = 0; r < records; ++r) {  // every label checked before anything is appended
    const uint8_t label = bytes[r * kRecord];
    TG_CHECK(label < kClasses, file, ": record ", r, " (byte offset ", r * kRecord, ") has label ",
             int{label}, " (expected 0..", kClasses - 1, ")");
  }
  const size_t total = checked_add<size_t>(base, static_cast<size_t>(records), file + ": records");
  checked_alloc(file + " (" + std::to_string(total) + " CIFAR-10 records)", total * kRecord, [&] {
    labels.resize(total);
    pixels.resize(checked_mul<size_t>(total, kPixels, file + ": pixel bytes"));
  });
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * kRecord;
    labels[base + r] = rec[0];
    std::copy(rec + 1, rec + kRecord, pixels.begin() + (base + r) * kPixels);
  }
}

std::unique_ptr<Dataset> open_cifar10(const DataOptions& options, Split split) {
  return std::make_unique<Cifar10Dataset>(options, split);
}

}  // namespace tg::data::detail
