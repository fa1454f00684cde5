// Synthetic images for tests and benchmarks: needs no files, is deterministic in synthetic_seed
// and is easy to learn. Class c has a fixed prototype P_c (C x S x S values ~ U[-1, 1)); example i
// of a split has label i mod K and pixels P_label + kNoiseStd * z, z standard normal (Box-Muller)
// keyed by (split, i). Train and test share the prototypes and differ in their noise, so test
// accuracy measures generalization over the noise. Everything is generated in load(), so the
// size costs no memory; there is no augmentation.
//
// Streams under key synthetic_seed: prototype of class c = rng_stream(data, kTag, 0, c) element
// p; noise of example i = rng_stream(data, kTag, 1 + split, i) elements 2m, 2m+1 -> pixels 2m,
// 2m+1.
#include <cmath>
#include <numbers>

#include "datasets/loaders.h"
#include "nn/core/error.h"

namespace tg::data::detail {
namespace {

constexpr uint64_t kTag = 0x53594E5448ULL;  // "SYNTH"
constexpr int64_t kDefaultSize = 28;
// Noise std of one pixel. Prototype pixels have std 1/sqrt(3) ~ 0.58, so single pixels are
// noisy but two prototypes differ by ~0.8 * sqrt(#pixels) noise stds: a linear model separates
// the classes almost perfectly once it has seen a few examples of each.
constexpr float kNoiseStd = 0.5f;

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(const DataOptions& options, Split split) {
    TG_CHECK(options.synthetic_size > 0, "synthetic: data.synthetic_size ", options.synthetic_size,
             " must be positive");
    TG_CHECK(options.synthetic_channels > 0, "synthetic: data.synthetic_channels ",
             options.synthetic_channels, " must be positive");
    TG_CHECK(options.synthetic_classes > 0, "synthetic: data.synthetic_classes ",
             options.synthetic_classes, " must be positive");
    TG_CHECK(options.image_size >= 0, "synthetic: data.image_size ", options.image_size,
             " is negative (expected 0 for ", kDefaultSize, ", or a positive size)");
    seed_ = options.synthetic_seed;
    info_.name = "synthetic";
    info_.path = "";
    info_.split = split;
    info_.size = options.synthetic_size;
    info_.channels = options.synthetic_channels;
    info_.height = info_.width = options.image_size == 0 ? kDefaultSize : options.image_size;
    info_.num_classes = options.synthetic_classes;
  }

  void load(std::span<const int64_t> indices, bool augment, uint64_t aug_seed, uint64_t key_base,
            float* images, int32_t* labels) const override {
    check_indices(indices, info_.size, info_.name);
    const int64_t n = info_.channels * info_.height * info_.width;
    const uint64_t split_tag = info_.split == Split::train ? 1 : 2;
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t i = indices[k];
      const int64_t label = i % info_.num_classes;
      labels[k] = static_cast<int32_t>(label);
      float* dst = images + static_cast<int64_t>(k) * n;
      const uint64_t proto = rng_stream(RngPurpose::data, kTag, 0, static_cast<uint64_t>(label));
      const uint64_t noise =
          rng_stream(RngPurpose::data, kTag, split_tag, static_cast<uint64_t>(i));
      for (int64_t p = 0; p < n; p += 4) {
        const Philox4 pb = philox_block(seed_, proto, static_cast<uint64_t>(p / 4));
        const Philox4 nb = philox_block(seed_, noise, static_cast<uint64_t>(p / 4));
        float z[4];
        for (int m = 0; m < 2; ++m) {
          // u1 in (0, 1] so the log is finite.
          const float u1 = (static_cast<float>(nb.v[2 * m] >> 8) + 1.0f) * (1.0f / 16777216.0f);
          const float u2 = uniform01(nb.v[2 * m + 1]);
          const float r = std::sqrt(-2.0f * std::log(u1));
          z[2 * m] = r * std::cos(2.0f * std::numbers::pi_v<float> * u2);
          z[2 * m + 1] = r * std::sin(2.0f * std::numbers::pi_v<float> * u2);
        }
        for (int e = 0; e < 4 && p + e < n; ++e) {
          dst[p + e] = 2.0f * uniform01(pb.v[e]) - 1.0f + kNoiseStd * z[e];
        }
      }
    }
  }

 private:
  uint64_t seed_ = 1;
};

}  // namespace

std::unique_ptr<Dataset> open_synthetic(const DataOptions& options, Split split) {
  return std::make_unique<SyntheticDataset>(options, split);
}

}  // namespace tg::data::detail
