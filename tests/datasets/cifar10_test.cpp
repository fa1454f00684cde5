// CIFAR-10 binary loader on small files generated in the real format (5 train files of 20
// records, a test file of 10): record decoding, the eval crop + standardization and the TF
// augmentation pipeline against naive double-precision references, determinism by key,
// statistics, speed and every file error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "datasets/dataset.h"
#include "nn/core/philox.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::data {
namespace {

using namespace tg::testing;

constexpr int64_t kRecord = 3073;
constexpr int64_t kRecordsPerTrainFile = 20;
// f32 pipeline vs double reference on standardized values of magnitude <= ~4.
constexpr double kTol = 2e-4;

// Record r of the generated data: label and pixel (c, y, x), deterministic in (file, r).
uint8_t gen_pixel(int64_t rec, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>(philox_word(99, rec, (c * 32 + y) * 32 + x) & 0xff);
}
uint8_t gen_label(int64_t rec) {
  return static_cast<uint8_t>((rec * 7 + 3) % 10);
}

std::vector<uint8_t> gen_file(int64_t first_rec, int64_t records) {
  std::vector<uint8_t> b;
  for (int64_t r = first_rec; r < first_rec + records; ++r) {
    b.push_back(gen_label(r));
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) b.push_back(gen_pixel(r, c, y, x));
  }
  return b;
}

// Train records are numbered 0..99 across data_batch_1..5, test records 1000..1009.
void write_cifar(const std::string& dir) {
  for (int f = 0; f < 5; ++f) {
    write_bytes(dir + "/data_batch_" + std::to_string(f + 1) + ".bin",
                gen_file(f * kRecordsPerTrainFile, kRecordsPerTrainFile));
  }
  write_bytes(dir + "/test_batch.bin", gen_file(1000, 10));
}

DataOptions cifar_at(const std::string& path, int64_t image_size = 0) {
  DataOptions o;
  o.name = "cifar10";
  o.path = path;
  o.image_size = image_size;
  return o;
}

// TF's pipeline in double: crop (oy, ox, s), flip, brightness, contrast, standardization.
std::vector<double> reference(int64_t rec, int64_t s, int64_t oy, int64_t ox, bool flip,
                              double delta, double factor) {
  std::vector<double> v(3 * s * s);
  for (int64_t c = 0; c < 3; ++c) {
    double mean = 0.0;
    for (int64_t y = 0; y < s; ++y)
      for (int64_t x = 0; x < s; ++x) {
        const int64_t sx = ox + (flip ? s - 1 - x : x);
        v[(c * s + y) * s + x] = gen_pixel(rec, c, oy + y, sx) + delta;
        mean += v[(c * s + y) * s + x];
      }
    mean /= static_cast<double>(s * s);
    for (int64_t i = 0; i < s * s; ++i)
      v[c * s * s + i] = (v[c * s * s + i] - mean) * factor + mean;
  }
  double mean = 0.0, var = 0.0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  const double sd = std::max(std::sqrt(var / v.size()), 1.0 / std::sqrt(double(v.size())));
  for (double& x : v) x = (x - mean) / sd;
  return v;
}

// The documented draw order of one example: words 0..4 of stream (data, key) under the seed.
struct Draws {
  int64_t oy, ox;
  bool flip;
  double delta, factor;
};
Draws draws(uint64_t seed, uint64_t key, int64_t s) {
  const uint64_t stream = rng_stream(RngPurpose::data, key);
  auto word = [&](uint64_t i) { return philox_word(seed, stream, i); };
  const uint64_t positions = static_cast<uint64_t>(32 - s + 1);
  Draws d;
  d.oy = static_cast<int64_t>((uint64_t{word(0)} * positions) >> 32);
  d.ox = static_cast<int64_t>((uint64_t{word(1)} * positions) >> 32);
  d.flip = uniform01(word(2)) < 0.5f;
  d.delta = -63.0f + 126.0f * uniform01(word(3));
  d.factor = 0.2f + 1.6f * uniform01(word(4));
  return d;
}

std::vector<float> load(const Dataset& ds, const std::vector<int64_t>& idx, bool augment,
                        uint64_t seed, uint64_t key_base, std::vector<int32_t>* labels) {
  const DatasetInfo& in = ds.info();
  std::vector<float> x(idx.size() * in.channels * in.height * in.width);
  labels->assign(idx.size(), -1);
  ds.load(idx, augment, seed, key_base, x.data(), labels->data());
  return x;
}

void expect_near_all(const float* got, const std::vector<double>& want, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], kTol) << what << " element " << i;
  }
}

TEST(Cifar10, OpensTheOfficialLayoutAndTheNestedDirectory) {
  TempDir dir;
  write_cifar(dir.str());
  auto train = open_dataset(cifar_at(dir.str()), Split::train);
  auto test = open_dataset(cifar_at(dir.str()), Split::test);
  EXPECT_EQ(train->info().size, 100);
  EXPECT_EQ(test->info().size, 10);
  EXPECT_EQ(train->info().channels, 3);
  EXPECT_EQ(train->info().height, 24);
  EXPECT_EQ(train->info().width, 24);
  EXPECT_EQ(train->info().num_classes, 10);

  TempDir parent;
  write_cifar(parent / "cifar-10-batches-bin");
  auto nested = open_dataset(cifar_at(parent.str()), Split::test);
  EXPECT_EQ(nested->info().size, 10);
  EXPECT_EQ(nested->info().path, parent / "cifar-10-batches-bin");
}

TEST(Cifar10, LabelsAndPlanesDecodeInFileOrder) {
  TempDir dir;
  write_cifar(dir.str());
  // Full 32x32 output: no crop, so the plane order and row-major layout are checked directly.
  auto train = open_dataset(cifar_at(dir.str(), 32), Split::train);
  std::vector<int32_t> labels;
  const std::vector<int64_t> idx = {0, 19, 20, 57, 99};
  const std::vector<float> x = load(*train, idx, false, 0, 0, &labels);
  for (size_t k = 0; k < idx.size(); ++k) {
    EXPECT_EQ(labels[k], gen_label(idx[k]));
    expect_near_all(x.data() + k * 3072, reference(idx[k], 32, 0, 0, false, 0.0, 1.0),
                    "train record " + std::to_string(idx[k]));
  }
  auto test = open_dataset(cifar_at(dir.str(), 32), Split::test);
  const std::vector<float> xt = load(*test, {9}, false, 0, 0, &labels);
  EXPECT_EQ(labels[0], gen_label(1009));
  expect_near_all(xt.data(), reference(1009, 32, 0, 0, false, 0.0, 1.0), "test record 9");
}

TEST(Cifar10, EvalIsTheCentralCropStandardized) {
  TempDir dir;
  write_cifar(dir.str());
  auto test = open_dataset(cifar_at(dir.str()), Split::test);
  std::vector<int32_t> labels;
  // The test split never augments, whatever `augment` says.
  const std::vector<float> x = load(*test, {0, 4}, true, 7, 0, &labels);
  expect_near_all(x.data(), reference(1000, 24, 4, 4, false, 0.0, 1.0), "test 0");
  expect_near_all(x.data() + 1728, reference(1004, 24, 4, 4, false, 0.0, 1.0), "test 4");
  // Train without augmentation: the same central crop.
  auto train = open_dataset(cifar_at(dir.str()), Split::train);
  const std::vector<float> xt = load(*train, {5}, false, 7, 0, &labels);
  expect_near_all(xt.data(), reference(5, 24, 4, 4, false, 0.0, 1.0), "train 5 eval");
  // data.augment = false turns augmentation off for the train split as well.
  DataOptions off = cifar_at(dir.str());
  off.augment = false;
  auto train_off = open_dataset(off, Split::train);
  EXPECT_EQ(load(*train_off, {5}, true, 7, 0, &labels), xt);
}

TEST(Cifar10, AugmentationMatchesTheTfPipelineForEachKey) {
  TempDir dir;
  write_cifar(dir.str());
  auto train = open_dataset(cifar_at(dir.str()), Split::train);
  std::vector<int64_t> idx(100);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<int32_t> labels;
  const uint64_t seed = 1234, key_base = 5000;
  const std::vector<float> x = load(*train, idx, true, seed, key_base, &labels);
  for (int64_t k = 0; k < 100; ++k) {
    const Draws d = draws(seed, key_base + k, 24);
    expect_near_all(x.data() + k * 1728, reference(k, 24, d.oy, d.ox, d.flip, d.delta, d.factor),
                    "augmented example " + std::to_string(k));
  }
}

TEST(Cifar10, AugmentationIsDeterministicByKey) {
  TempDir dir;
  write_cifar(dir.str());
  auto train = open_dataset(cifar_at(dir.str()), Split::train);
  std::vector<int32_t> l;
  const std::vector<float> a = load(*train, {3, 8}, true, 1, 10, &l);
  EXPECT_EQ(load(*train, {3, 8}, true, 1, 10, &l), a);
  // Example 8 at key 11 is the same whether loaded second in a batch or alone.
  const std::vector<float> alone = load(*train, {8}, true, 1, 11, &l);
  EXPECT_EQ(alone, std::vector<float>(a.begin() + 1728, a.end()));
  EXPECT_NE(load(*train, {3, 8}, true, 1, 12, &l), a);  // other keys
  EXPECT_NE(load(*train, {3, 8}, true, 2, 10, &l), a);  // other seed
}

// Statistics over 2000 keys on one left-dark / right-bright image. Flip: Binomial(2000, 0.5),
// sd 0.011; the band +-0.05 is 4.5 sd (false alarm ~1e-5). Every crop offset 0..8 must occur
// (each has probability 1/9; missing one in 2000 draws: 9 * (8/9)^2000 ~ 0). Every output is
// standardized: mean 0 and std 1 up to f32 rounding.
TEST(Cifar10, AugmentationStatistics) {
  TempDir dir;
  std::vector<uint8_t> rec(kRecord, 0);
  rec[0] = 1;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 32; ++y)
      for (int64_t x = 16; x < 32; ++x) rec[1 + (c * 32 + y) * 32 + x] = 200 + y;
  write_bytes(dir / "data_batch_1.bin", rec);
  for (int f = 2; f <= 5; ++f) write_bytes(dir / ("data_batch_" + std::to_string(f) + ".bin"), rec);
  write_bytes(dir / "test_batch.bin", rec);
  auto train = open_dataset(cifar_at(dir.str()), Split::train);
  const int64_t n = 2000;
  std::vector<int64_t> idx(n, 0);
  std::vector<int32_t> labels;
  const std::vector<float> x = load(*train, idx, true, 77, 0, &labels);
  int flips = 0;
  std::vector<int> offsets(9, 0);
  for (int64_t k = 0; k < n; ++k) {
    const float* img = x.data() + k * 1728;
    flips += img[0] > img[23];  // bright right half moved to the left
    double mean = 0.0, sq = 0.0;
    for (int64_t i = 0; i < 1728; ++i) mean += img[i];
    mean /= 1728;
    for (int64_t i = 0; i < 1728; ++i) sq += (img[i] - mean) * (img[i] - mean);
    ASSERT_NEAR(mean, 0.0, 1e-5) << "example " << k;
    ASSERT_NEAR(std::sqrt(sq / 1728), 1.0, 1e-4) << "example " << k;
    // The crop keeps columns ox..ox+23 of which 16..31 are bright: 8 + ox bright columns,
    // flipped or not (brightness and contrast keep dark < mean < bright).
    int bright = 0;
    for (int64_t col = 0; col < 24; ++col) bright += img[col] > 0.0f;
    ASSERT_GE(bright, 8);
    ASSERT_LE(bright, 16);
    ++offsets[bright - 8];
  }
  EXPECT_NEAR(flips / double(n), 0.5, 0.05);
  for (int o = 0; o < 9; ++o) EXPECT_GT(offsets[o], 0) << "crop offset " << o << " never drawn";
}

TEST(Cifar10, BadFilesNameTheFileAndTheExpectation) {
  TempDir dir;
  write_cifar(dir.str());
  std::vector<uint8_t> bytes = read_bytes(dir / "data_batch_3.bin");
  bytes.resize(2 * kRecord + 5);
  write_bytes(dir / "data_batch_3.bin", bytes);
  expect_error_with([&] { open_dataset(cifar_at(dir.str()), Split::train); },
                    {dir / "data_batch_3.bin", "size 6151", "multiple of 3073"});
  bytes = gen_file(0, 4);
  bytes[2 * kRecord] = 10;  // record 2's label
  write_bytes(dir / "data_batch_3.bin", bytes);
  expect_error_with([&] { open_dataset(cifar_at(dir.str()), Split::train); },
                    {dir / "data_batch_3.bin", "record 2", "label 10", "0..9"});
  write_bytes(dir / "test_batch.bin", {});
  expect_error_with([&] { open_dataset(cifar_at(dir.str()), Split::test); },
                    {dir / "test_batch.bin", "size 0"});
  write_cifar(dir.str());
  std::filesystem::remove(dir / "data_batch_5.bin");
  expect_error_with([&] { open_dataset(cifar_at(dir.str()), Split::train); },
                    {"missing file", dir / "data_batch_5.bin"});
  expect_error_with([] { open_dataset(cifar_at(""), Split::train); }, {"data.path"});
  expect_error_with([&] { open_dataset(cifar_at(dir.str(), 33), Split::test); }, {"image_size 33"});
}

}  // namespace
}  // namespace tg::data
