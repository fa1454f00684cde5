// A deterministic synthetic image folder in the ImageNet layout (root/train/<class>/*.jpg,
// root/val/<class>/*.jpg), for tests and benchmarks of the image-folder loader where ImageNet
// cannot be had: `terngrad data synth-folder` and bench_data --image-folder write it.
//
// Image i of class c is a smooth colour field (a per-class hue, gradients, a few soft blobs) with
// Philox noise, width and height drawn around the requested size (+-25%, as ImageNet's vary), so
// decoding and resampling cost what real photographs of that size cost. The same options give
// the same bytes on every machine (libjpeg-turbo's baseline encoder, 4:2:0 as cameras write).
#pragma once

#include <cstdint>
#include <string>

namespace tg::data {

struct SyntheticFolderOptions {
  int classes = 10;
  int train_per_class = 50;
  int val_per_class = 10;
  int width = 500, height = 375;  // the mean size (ImageNet's typical 500 x 375)
  int quality = 90;
  uint64_t seed = 1;
};

// Writes the folder under `root` (created; existing files of the same names are replaced).
// Returns the bytes written. Throws naming the file when one cannot be written, and on options
// out of range (classes 1..10000, counts 0..1000000, sizes 8..8192, quality 1..100).
uint64_t write_synthetic_folder(const std::string& root, const SyntheticFolderOptions& options);

}  // namespace tg::data
