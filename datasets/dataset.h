// Datasets: labelled images served as host f32 NCHW batches, with the recipe's preprocessing
// and augmentation (the reference code's). Opened by name through open_dataset() (the one name ->
// factory table is in datasets/registry.cpp):
//   mnist, fashion-mnist  IDX files (raw or .gz): train-images-idx3-ubyte[.gz], ... in `path`.
//                         Pixels -> 2 * (x / 255 - 0.5) in [-1, 1], no augmentation.
//   cifar10               CIFAR-10 binary: data_batch_1..5.bin, test_batch.bin in `path` (or in
//                         path/cifar-10-batches-bin). Train: random 24x24 crop, flip, brightness
//                         +-63/255, contrast [0.2, 1.8], per-image standardization; test: central
//                         crop + standardization.
//   image-folder          path/train/<class>/*.jpg and path/val/<class>/*.jpg (classes sorted by
//                         name -> label index + label_offset), decoded with libjpeg-turbo;
//                         preprocess "alexnet" or "inception" (see DataOptions).
//   synthetic             deterministic learnable images generated from the seed (tests, benches).
//
// Validation: a wrong magic, truncated file, label out of range, image-size mismatch or missing
// file throws tg::Error naming the file and what was expected.
//
// Determinism: augmentation randomness for an example comes from Philox keyed by
// (aug_seed, RngPurpose::data, key) where key = key_base + position in the request, so a run
// (and a resumed run) sees the same pixels for the same step regardless of worker count.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "nn/core/enum_names.h"

namespace tg::data {

enum class Split { train, test };

// image-folder's preprocessing recipe (the config's data.preprocess).
enum class Preprocess { alexnet, inception };
inline constexpr EnumTable<Preprocess, 2> kPreprocesses = {
    {{Preprocess::alexnet, "alexnet"}, {Preprocess::inception, "inception"}}};

struct DataOptions {
  std::string name = "mnist";
  std::string path;     // directory with the dataset's files (unused for synthetic)
  bool augment = true;  // train split only; the test split never augments
  // image-folder only
  Preprocess preprocess =
      Preprocess::alexnet;   // alexnet (resize 256x256, crop 224, mean-subtract)
                             // or "inception" (distorted crop, flip, jitter, [-1,1])
  int64_t image_size = 0;    // output H = W; 0 = the dataset's default (28, 24, 224)
  int64_t label_offset = 0;  // added to folder class indices (1 for 1001-class ImageNet nets)
  // An image that cannot be read (truncated, corrupt, not a JPEG, empty, gone) is an error naming
  // it (false), or is replaced by the next readable image of the split, counted (true).
  bool skip_bad_files = false;
  // image-folder: decode each JPEG at the smallest of libjpeg-turbo's DCT scales 1/8, 1/4, 1/2
  // that keeps the crop at or above the output's resolution (full scale when none does): faster
  // on images much larger than the output; the pixels differ from the full decode's.
  bool fast_decode = false;
  // synthetic only
  int64_t synthetic_size = 1024;  // examples per split
  int64_t synthetic_channels = 1;
  int64_t synthetic_classes = 10;
  uint64_t synthetic_seed = 1;
  bool operator==(const DataOptions&) const = default;
};

// The unreadable files a dataset replaced so far (DataOptions::skip_bad_files).
struct BadFiles {
  int64_t replaced = 0;                                    // examples served by another image
  std::vector<std::pair<std::string, std::string>> files;  // each bad file once: path, why
};

struct DatasetInfo {
  std::string name;
  std::string path;
  Split split = Split::train;
  int64_t size = 0;                             // number of examples
  int64_t channels = 0, height = 0, width = 0;  // of the produced images
  int64_t num_classes = 0;                      // labels are in [0, num_classes)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  const DatasetInfo& info() const { return info_; }

  // Fills `images` (indices.size() x C x H x W floats, contiguous) and `labels` for the given
  // example indices (each in [0, size)). `augment` is honoured on the train split only.
  // Thread-safe (const; the only shared state is bad_files()'s record, behind a lock), so
  // batches can be loaded on several threads.
  virtual void load(std::span<const int64_t> indices, bool augment, uint64_t aug_seed,
                    uint64_t key_base, float* images, int32_t* labels) const = 0;
  // What skip_bad_files replaced so far (datasets that read one file per example).
  virtual BadFiles bad_files() const { return {}; }

 protected:
  DatasetInfo info_;
};

// Where a dataset's files are. With data.path set, there. Without it, the first of:
//   data/<name>      relative to the working directory, where `terngrad data fetch <name>` puts it
//   the system location of an installed package (fashion-mnist: Debian's dataset-fashion-mnist,
//                    /usr/share/datasets/fashion-mnist)
// A directory counts when it holds the dataset's first training file. `source` says which rule
// found it ("data.path", "data/<name>", "installed package ..."), for the run's log.
struct DataLocation {
  std::string path;
  std::string source;
};
// Throws when nothing is found, naming every place looked at and the command that fetches the
// dataset (or, for image-folder, that data.path is required). Datasets without files
// (synthetic) resolve to an empty path.
DataLocation locate_dataset(const DataOptions& options);
// The same, returning nothing instead of throwing when the files are not found (an unknown
// name still throws).
std::optional<DataLocation> find_dataset(const DataOptions& options);

// Throws on an unknown name (listing the known ones), a dataset that locate_dataset() cannot
// find, or invalid files.
std::unique_ptr<Dataset> open_dataset(const DataOptions& options, Split split);
std::vector<std::string> dataset_names();

}  // namespace tg::data
