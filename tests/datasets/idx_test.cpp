// IDX loader (MNIST, Fashion-MNIST): the real MNIST files (gzipped as shipped, and decompressed),
// the pixel mapping, and every validation error on small generated files.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "datasets/dataset.h"
#include "datasets/loaders.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::data {
namespace {

using namespace tg::testing;

const std::string kMnistDir = TG_SHARED_DATA_DIR "/mnist";
const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";
const char* const kFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

float expected_pixel(int v) {
  return 2.0f * (static_cast<float>(v) / 255.0f - 0.5f);
}

std::vector<uint8_t> gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::vector<uint8_t> out;
  if (f == nullptr) return out;
  uint8_t buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + got);
  gzclose(f);
  return out;
}

void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// A small IDX split in the real format; fields can be broken one at a time.
struct IdxSpec {
  int64_t images = 3, rows = 28, cols = 28, labels = 3;
  uint32_t image_magic = 2051, label_magic = 2049;
  uint8_t bad_label = 0;  // when nonzero, label 1 gets this value
};

std::vector<uint8_t> image_bytes(const IdxSpec& s) {
  std::vector<uint8_t> b;
  put_be32(b, s.image_magic);
  put_be32(b, static_cast<uint32_t>(s.images));
  put_be32(b, static_cast<uint32_t>(s.rows));
  put_be32(b, static_cast<uint32_t>(s.cols));
  for (int64_t i = 0; i < s.images * s.rows * s.cols; ++i) b.push_back(static_cast<uint8_t>(i * 7));
  return b;
}

std::vector<uint8_t> label_bytes(const IdxSpec& s) {
  std::vector<uint8_t> b;
  put_be32(b, s.label_magic);
  put_be32(b, static_cast<uint32_t>(s.labels));
  for (int64_t i = 0; i < s.labels; ++i) b.push_back(static_cast<uint8_t>((i * 3) % 10));
  if (s.bad_label != 0 && s.labels > 1) b[8 + 1] = s.bad_label;
  return b;
}

void write_split(const TempDir& dir, const IdxSpec& s, const std::string& prefix = "train") {
  write_bytes(dir / (prefix + "-images-idx3-ubyte"), image_bytes(s));
  write_bytes(dir / (prefix + "-labels-idx1-ubyte"), label_bytes(s));
}

DataOptions mnist_at(const std::string& path) {
  DataOptions o;
  o.name = "mnist";
  o.path = path;
  return o;
}

std::vector<float> load_all(const Dataset& ds, std::vector<int64_t> idx,
                            std::vector<int32_t>* labels) {
  const DatasetInfo& in = ds.info();
  std::vector<float> x(idx.size() * in.channels * in.height * in.width);
  labels->assign(idx.size(), -1);
  ds.load(idx, false, 0, 0, x.data(), labels->data());
  return x;
}

// ---- the real MNIST files ----------------------------------------------------------------------

TEST(Mnist, RealGzipFilesHaveTheOfficialShapeAndLabels) {
  auto train = open_dataset(mnist_at(kMnistDir), Split::train);
  auto test = open_dataset(mnist_at(kMnistDir), Split::test);
  EXPECT_EQ(train->info().size, 60000);
  EXPECT_EQ(test->info().size, 10000);
  for (const auto* ds : {train.get(), test.get()}) {
    EXPECT_EQ(ds->info().name, "mnist");
    EXPECT_EQ(ds->info().channels, 1);
    EXPECT_EQ(ds->info().height, 28);
    EXPECT_EQ(ds->info().width, 28);
    EXPECT_EQ(ds->info().num_classes, 10);
  }
  EXPECT_EQ(train->info().split, Split::train);
  EXPECT_EQ(test->info().split, Split::test);

  // Well-known facts: the first training digit is a 5, the first test digit a 7.
  std::vector<int32_t> labels;
  std::vector<float> x = load_all(*train, {0, 1, 2}, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{5, 0, 4}));
  load_all(*test, {0}, &labels);
  EXPECT_EQ(labels[0], 7);

  // Pixels are 2 * (x / 255 - 0.5): in [-1, 1], background exactly -1, strokes reach +1.
  x = load_all(*train, {0, 1, 2, 3, 4, 5, 6, 7}, &labels);
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  EXPECT_EQ(*lo, -1.0f);
  EXPECT_EQ(*hi, 1.0f);
  EXPECT_EQ(x[0], -1.0f);  // corner pixel of digit 0
}

TEST(Mnist, RawAndGzipFilesGiveTheSameExamples) {
  TempDir raw;
  for (const char* f : kFiles) write_bytes(raw / f, gunzip(kMnistDir + "/" + f + ".gz"));
  auto gz = open_dataset(mnist_at(kMnistDir), Split::train);
  auto plain = open_dataset(mnist_at(raw.str()), Split::train);
  ASSERT_EQ(plain->info().size, 60000);
  const std::vector<int64_t> idx = {0, 1, 59999, 12345, 30000};
  std::vector<int32_t> l1, l2;
  EXPECT_EQ(load_all(*gz, idx, &l1), load_all(*plain, idx, &l2));
  EXPECT_EQ(l1, l2);

  // Byte-level check of the mapping against the decompressed file.
  const std::vector<uint8_t> bytes = read_bytes(raw / "train-images-idx3-ubyte");
  std::vector<float> x = load_all(*plain, {59999}, &l1);
  for (int p = 0; p < 784; ++p) {
    ASSERT_EQ(x[p], expected_pixel(bytes[16 + 59999 * 784 + p])) << "pixel " << p;
  }
  auto test = open_dataset(mnist_at(raw.str()), Split::test);
  EXPECT_EQ(test->info().size, 10000);
}

TEST(Mnist, NoPathIsAnErrorThatSuggestsOne) {
  expect_error_with([] { open_dataset(mnist_at(""), Split::train); }, {"data.path", "mnist"});
}

TEST(FashionMnist, RealFilesAtTheDefaultPath) {
  if (!std::filesystem::exists(kFashionDir)) GTEST_SKIP() << kFashionDir << " is absent";
  DataOptions o;
  o.name = "fashion-mnist";  // no path: the Debian package location is the default
  auto train = open_dataset(o, Split::train);
  auto test = open_dataset(o, Split::test);
  EXPECT_EQ(train->info().size, 60000);
  EXPECT_EQ(test->info().size, 10000);
  EXPECT_EQ(train->info().path, kFashionDir);
  std::vector<int32_t> labels;
  std::vector<float> x = load_all(*train, {0, 1}, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{9, 0}));  // ankle boot, T-shirt
  for (float v : x) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
}

// ---- generated files: the format and every error -----------------------------------------------

TEST(Idx, SmallGeneratedSplitDecodesByteForByte) {
  TempDir dir;
  IdxSpec spec;
  write_split(dir, spec);
  auto ds = open_dataset(mnist_at(dir.str()), Split::train);
  ASSERT_EQ(ds->info().size, 3);
  std::vector<int32_t> labels;
  std::vector<float> x = load_all(*ds, {2, 0}, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{6, 0}));
  for (int p = 0; p < 784; ++p) {
    ASSERT_EQ(x[p], expected_pixel(static_cast<uint8_t>((2 * 784 + p) * 7)));
    ASSERT_EQ(x[784 + p], expected_pixel(static_cast<uint8_t>(p * 7)));
  }
}

TEST(Idx, GzipIsDetectedByMagicAndDotGzNamesAreFound) {
  TempDir dir;
  IdxSpec spec;
  write_gzip(dir / "train-images-idx3-ubyte.gz", image_bytes(spec));
  // Gzipped content under the plain name is detected by its magic bytes too.
  write_gzip(dir / "train-labels-idx1-ubyte", label_bytes(spec));
  auto ds = open_dataset(mnist_at(dir.str()), Split::train);
  std::vector<int32_t> labels;
  std::vector<float> x = load_all(*ds, {1}, &labels);
  EXPECT_EQ(labels[0], 3);
  EXPECT_EQ(x[5], expected_pixel(static_cast<uint8_t>((784 + 5) * 7)));
}

TEST(Idx, WrongMagicNamesTheFileAndTheExpectedMagic) {
  TempDir dir;
  IdxSpec spec;
  spec.image_magic = 2049;
  write_split(dir, spec);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-images-idx3-ubyte", "magic 2049", "expected 2051"});
  spec = IdxSpec{};
  spec.label_magic = 0x12345678;
  write_split(dir, spec);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-labels-idx1-ubyte", "expected 2049"});
}

TEST(Idx, TruncatedFileNamesExpectedAndActualSizes) {
  TempDir dir;
  IdxSpec spec;
  write_split(dir, spec);
  std::vector<uint8_t> bytes = image_bytes(spec);
  bytes.resize(1000);
  write_bytes(dir / "train-images-idx3-ubyte", bytes);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-images-idx3-ubyte",
                     "truncated: expected 2368 bytes after decompression, got 1000"});

  // The same through gzip: sizes are of the decompressed stream.
  std::filesystem::remove(dir / "train-images-idx3-ubyte");
  write_gzip(dir / "train-images-idx3-ubyte.gz", bytes);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-images-idx3-ubyte.gz", "expected 2368 bytes", "got 1000"});

  // A cut gzip stream (half a download).
  write_gzip(dir / "train-images-idx3-ubyte.gz", image_bytes(spec));
  std::vector<uint8_t> gz = read_bytes(dir / "train-images-idx3-ubyte.gz");
  gz.resize(gz.size() / 2);
  write_bytes(dir / "train-images-idx3-ubyte.gz", gz);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-images-idx3-ubyte.gz", "truncated gzip"});

  // A header cut short.
  write_bytes(dir / "train-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0});
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-images-idx3-ubyte.gz", "truncated", "16 header bytes"});
}

// Issue 15: a small gzip of a valid header followed by a flood of zeros (a decompression bomb)
// is refused as soon as the output passes what the header declares, instead of being inflated
// whole first. 256 MiB of zeros gzip to ~256 KiB; refusing them costs one 64 KiB chunk past the
// 11 declared bytes (the old loader held all 256 MiB before looking at the header).
TEST(Idx, GzipBombIsRefusedAtTheDeclaredSize) {
  std::vector<uint8_t> header = label_bytes(IdxSpec{});  // 3 labels: 11 bytes
  z_stream zs{};
  ASSERT_EQ(
      deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY),
      Z_OK);
  std::vector<uint8_t> gz(4 << 20);
  zs.next_out = gz.data();
  zs.avail_out = static_cast<uInt>(gz.size());
  zs.next_in = header.data();
  zs.avail_in = static_cast<uInt>(header.size());
  ASSERT_EQ(deflate(&zs, Z_NO_FLUSH), Z_OK);
  const std::vector<uint8_t> zeros(1 << 20, 0);
  for (int i = 0; i < 256; ++i) {
    zs.next_in = const_cast<uint8_t*>(zeros.data());
    zs.avail_in = static_cast<uInt>(zeros.size());
    ASSERT_EQ(deflate(&zs, Z_NO_FLUSH), Z_OK);
  }
  ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  expect_error_with([&] { detail::parse_idx(gz, "bomb-labels-idx1-ubyte.gz", 2049, 1, {}); },
                    {"bomb-labels-idx1-ubyte.gz", "more than 11 bytes after decompression"});
  // A header whose dimensions multiply past 64 bits is refused by the checked product.
  std::vector<uint8_t> huge;
  put_be32(huge, 2051);
  for (int d = 0; d < 3; ++d) put_be32(huge, 0x7fffffff);
  expect_error_with(
      [&] { detail::parse_idx(huge, "huge-images", 2051, 3, {}); },
      {"huge-images", "element count of the header's dimensions", "overflows uint64"});
}

TEST(Idx, TrailingGarbageIsAnError) {
  TempDir dir;
  IdxSpec spec;
  write_split(dir, spec);
  std::vector<uint8_t> bytes = label_bytes(spec);
  bytes.push_back(0);
  bytes.push_back(0);
  write_bytes(dir / "train-labels-idx1-ubyte", bytes);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-labels-idx1-ubyte", "2 bytes of trailing garbage", "exactly 11"});
}

TEST(Idx, LabelOutOfRangeNamesFileIndexAndRange) {
  TempDir dir;
  IdxSpec spec;
  spec.bad_label = 12;
  write_split(dir, spec);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-labels-idx1-ubyte", "label 12 at index 1", "0..9"});
}

TEST(Idx, LabelCountMismatchNamesBothFiles) {
  TempDir dir;
  IdxSpec spec;
  spec.labels = 2;
  write_split(dir, spec);
  expect_error_with(
      [&] { open_dataset(mnist_at(dir.str()), Split::train); },
      {dir / "train-labels-idx1-ubyte", "2 labels", dir / "train-images-idx3-ubyte", "3 images"});
}

TEST(Idx, WrongImageDimensionsAreAnError) {
  TempDir dir;
  IdxSpec spec;
  spec.rows = 32;
  spec.cols = 30;
  write_split(dir, spec);
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-images-idx3-ubyte", "32x30", "expected 28x28"});
}

TEST(Idx, MissingFileNamesBothCandidateNames) {
  TempDir dir;
  IdxSpec spec;
  write_split(dir, spec);  // train only
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::test); },
                    {dir / "t10k-images-idx3-ubyte", dir / "t10k-images-idx3-ubyte.gz"});
  std::filesystem::remove(dir / "train-labels-idx1-ubyte");
  expect_error_with([&] { open_dataset(mnist_at(dir.str()), Split::train); },
                    {dir / "train-labels-idx1-ubyte.gz", "missing"});
}

TEST(Idx, BadImageSizeOptionAndBadIndexAreErrors) {
  TempDir dir;
  write_split(dir, IdxSpec{});
  DataOptions o = mnist_at(dir.str());
  o.image_size = 32;
  expect_error_with([&] { open_dataset(o, Split::train); }, {"image_size", "28"});
  auto ds = open_dataset(mnist_at(dir.str()), Split::train);
  std::vector<float> x(784);
  int32_t y;
  const int64_t bad = 3;
  expect_error_with([&] { ds->load({&bad, 1}, false, 0, 0, x.data(), &y); }, {"index 3", "< 3"});
}

}  // namespace
}  // namespace tg::data
