// Image-folder loader on small JPEGs written here with libjpeg (3 classes, 300 x 280 images):
// layout and labels, the alexnet and inception geometry against analytic ramps, colour handling
// (solid colours, grayscale, Adobe CMYK), augmentation determinism, and the error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "datasets/dataset.h"
#include "datasets/loaders.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::data {
namespace {

using namespace tg::testing;

constexpr int kW = 300, kH = 280;
constexpr int kCat[3] = {200, 100, 50};
constexpr int kDog[3] = {30, 180, 90};
constexpr double kMean[3] = {123.68, 116.78, 103.94};
// JPEG at quality 100 without chroma subsampling: solid colours and smooth ramps come back
// within a couple of levels (YCbCr rounding + DCT quantization); 4 levels of 255 is the bound.
constexpr double kJpegTol = 4.0;

using Fill = std::function<void(int x, int y, uint8_t* px)>;

// Quality 100 without chroma subsampling, or with libjpeg's default 4:2:0 (`subsample`).
void write_jpeg(const std::string& path, int w, int h, int comps, const Fill& fill,
                bool subsample = false) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::vector<uint8_t> buf(static_cast<size_t>(w) * h * comps);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) fill(x, y, buf.data() + (static_cast<size_t>(y) * w + x) * comps);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = w;
  c.image_height = h;
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  for (int i = 0; i < c.num_components && !subsample; ++i) {
    c.comp_info[i].h_samp_factor = 1;
    c.comp_info[i].v_samp_factor = 1;
  }
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = buf.data() + static_cast<size_t>(c.next_scanline) * w * comps;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

// The ramp image: R rises along x, G along y, B constant.
double ramp_r(double x) {
  return x * 255.0 / (kW - 1);
}
double ramp_g(double y) {
  return y * 255.0 / (kH - 1);
}
constexpr int kRampB = 128;

Fill solid(const int rgb[3]) {
  return [rgb](int, int, uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(rgb[c]);
  };
}
void ramp(int x, int y, uint8_t* p) {
  p[0] = static_cast<uint8_t>(std::lround(ramp_r(x)));
  p[1] = static_cast<uint8_t>(std::lround(ramp_g(y)));
  p[2] = kRampB;
}

// train: cat/{a,b} solid, dog/{a,b} solid, emu/a ramp, emu/b grayscale ramp (+ a stray .txt);
// val: cat/v.JPEG, dog/v.jpeg, emu/v.jpg (ramp).
void write_tree(const TempDir& root) {
  write_jpeg(root / "train/cat/a.jpg", kW, kH, 3, solid(kCat));
  write_jpeg(root / "train/cat/b.jpg", kW, kH, 3, solid(kCat));
  write_bytes(root / "train/cat/readme.txt", {'h', 'i'});
  write_jpeg(root / "train/dog/a.jpg", kW, kH, 3, solid(kDog));
  write_jpeg(root / "train/dog/b.jpg", kW, kH, 3, solid(kDog));
  write_jpeg(root / "train/emu/a.jpg", kW, kH, 3, ramp);
  write_jpeg(root / "train/emu/b.jpg", kW, kH, 1,
             [](int x, int, uint8_t* p) { p[0] = static_cast<uint8_t>(std::lround(ramp_r(x))); });
  write_jpeg(root / "val/cat/v.JPEG", kW, kH, 3, solid(kCat));
  write_jpeg(root / "val/dog/v.jpeg", kW, kH, 3, solid(kDog));
  write_jpeg(root / "val/emu/v.jpg", kW, kH, 3, ramp);
}

DataOptions folder(const std::string& path, const std::string& preprocess = "alexnet") {
  DataOptions o;
  o.name = "image-folder";
  o.path = path;
  o.preprocess = parse_enum(kPreprocesses, preprocess, "data.preprocess");
  return o;
}

std::vector<float> load(const Dataset& ds, const std::vector<int64_t>& idx, bool augment,
                        uint64_t key_base, std::vector<int32_t>* labels) {
  const DatasetInfo& in = ds.info();
  std::vector<float> x(idx.size() * in.channels * in.height * in.width);
  labels->assign(idx.size(), -1);
  ds.load(idx, augment, 42, key_base, x.data(), labels->data());
  return x;
}

constexpr int64_t kS = 224, kPlane = kS * kS;

// Source coordinate of output pixel i when `extent` source pixels are resized to `resized`
// and the output starts at `offset` (half-pixel centres, clamped).
double src_coord(int64_t i, int64_t offset, double resized, double extent) {
  return std::clamp((offset + i + 0.5) * extent / resized - 0.5, 0.0, extent - 1.0);
}

TEST(ImageFolder, LayoutLabelsAndShapes) {
  TempDir root;
  write_tree(root);
  auto train = open_dataset(folder(root.str()), Split::train);
  auto val = open_dataset(folder(root.str()), Split::test);
  EXPECT_EQ(train->info().size, 6);
  EXPECT_EQ(val->info().size, 3);
  EXPECT_EQ(train->info().channels, 3);
  EXPECT_EQ(train->info().height, kS);
  EXPECT_EQ(train->info().width, kS);
  EXPECT_EQ(train->info().num_classes, 3);
  std::vector<int32_t> labels;
  load(*train, {0, 1, 2, 3, 4, 5}, false, 0, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  load(*val, {0, 1, 2}, false, 0, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 1, 2}));

  DataOptions o = folder(root.str());
  o.label_offset = 1;  // 1001-class nets: label 0 is "background"
  auto shifted = open_dataset(o, Split::train);
  EXPECT_EQ(shifted->info().num_classes, 4);
  load(*shifted, {0, 5}, false, 0, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{1, 3}));
}

TEST(ImageFolder, AlexnetSolidColourIsColourMinusMean) {
  TempDir root;
  write_tree(root);
  auto train = open_dataset(folder(root.str()), Split::train);
  std::vector<int32_t> labels;
  for (bool augment : {false, true}) {  // a crop or flip of a constant image is the constant
    const std::vector<float> x = load(*train, {0, 2}, augment, 9, &labels);
    for (int k = 0; k < 2; ++k) {
      const int* rgb = k == 0 ? kCat : kDog;
      for (int c = 0; c < 3; ++c) {
        for (int64_t i = 0; i < kPlane; ++i) {
          ASSERT_NEAR(x[(k * 3 + c) * kPlane + i], rgb[c] - kMean[c], kJpegTol)
              << "image " << k << " channel " << c << " pixel " << i << " augment " << augment;
        }
      }
    }
  }
}

TEST(ImageFolder, AlexnetEvalIsTheCentralCropOfThe256Resize) {
  TempDir root;
  write_tree(root);
  auto val = open_dataset(folder(root.str()), Split::test);
  std::vector<int32_t> labels;
  const std::vector<float> x = load(*val, {2}, true, 0, &labels);
  // Bilinear interpolation of a linear ramp is exact, so only JPEG error remains.
  for (int64_t i = 0; i < kS; i += 7) {
    for (int64_t j = 0; j < kS; j += 5) {
      const double sx = src_coord(j, 16, 256, kW), sy = src_coord(i, 16, 256, kH);
      ASSERT_NEAR(x[i * kS + j], ramp_r(sx) - kMean[0], kJpegTol) << i << "," << j;
      ASSERT_NEAR(x[kPlane + i * kS + j], ramp_g(sy) - kMean[1], kJpegTol) << i << "," << j;
      ASSERT_NEAR(x[2 * kPlane + i * kS + j], kRampB - kMean[2], kJpegTol) << i << "," << j;
    }
  }
}

TEST(ImageFolder, AlexnetTrainCropsAndFlipsByKey) {
  TempDir root;
  write_tree(root);
  auto train = open_dataset(folder(root.str()), Split::train);
  std::vector<int32_t> labels;
  int flipped = 0, kept = 0;
  for (uint64_t key = 0; key < 40; ++key) {
    const std::vector<float> x = load(*train, {4}, true, key, &labels);
    EXPECT_EQ(load(*train, {4}, true, key, &labels), x) << "key " << key;
    const float left = x[100 * kS + 0], right = x[100 * kS + kS - 1];
    (left > right ? flipped : kept) += 1;
    // Unflipped, column 0 of the R plane samples resized column ox in [0, 32]: recover ox and
    // check the whole row against it.
    const bool flip = left > right;
    const double r0 = (flip ? right : left) + kMean[0];
    double best_err = 1e9;
    for (int64_t ox = 0; ox <= 32; ++ox) {
      double err = 0.0;
      for (int64_t j = 0; j < kS; j += 11) {
        const int64_t col = flip ? kS - 1 - j : j;
        err = std::max(
            err, std::fabs(x[100 * kS + col] - (ramp_r(src_coord(j, ox, 256, kW)) - kMean[0])));
      }
      best_err = std::min(best_err, err);
    }
    EXPECT_LT(best_err, kJpegTol) << "key " << key << ": row is no crop of the resized ramp";
    EXPECT_LE(r0, ramp_r(src_coord(0, 32, 256, kW)) + kJpegTol);
  }
  // Binomial(40, 0.5): both outcomes appear except with probability 2^-39.
  EXPECT_GT(flipped, 0);
  EXPECT_GT(kept, 0);
}

TEST(ImageFolder, InceptionEvalIsTheCentral875CropInMinusOneToOne) {
  TempDir root;
  write_tree(root);
  auto val = open_dataset(folder(root.str(), "inception"), Split::test);
  std::vector<int32_t> labels;
  const std::vector<float> x = load(*val, {0, 2}, false, 0, &labels);
  for (int c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < kPlane; i += 13) {
      ASSERT_NEAR(x[c * kPlane + i], 2.0 * (kCat[c] / 255.0 - 0.5), 2 * kJpegTol / 255);
    }
  }
  // tf.image.central_crop(0.875) of 300 x 280: start int(18.75) = 18 (x), int(17.5) = 17 (y).
  const float* r = x.data() + 3 * kPlane;
  for (int64_t i = 0; i < kS; i += 7) {
    for (int64_t j = 0; j < kS; j += 5) {
      const double sx = 18 + src_coord(j, 0, kS, kW - 36), sy = 17 + src_coord(i, 0, kS, kH - 34);
      ASSERT_NEAR(r[i * kS + j], 2.0 * (ramp_r(sx) / 255 - 0.5), 2 * kJpegTol / 255);
      ASSERT_NEAR(r[kPlane + i * kS + j], 2.0 * (ramp_g(sy) / 255 - 0.5), 2 * kJpegTol / 255);
    }
  }
}

TEST(ImageFolder, InceptionTrainJittersDeterministicallyWithinRange) {
  TempDir root;
  write_tree(root);
  auto train = open_dataset(folder(root.str(), "inception"), Split::train);
  std::vector<int32_t> labels;
  int changed = 0;
  for (uint64_t key = 0; key < 20; ++key) {
    const std::vector<float> x = load(*train, {0, 4}, true, key, &labels);
    EXPECT_EQ(load(*train, {0, 4}, true, key, &labels), x);
    for (float v : x) ASSERT_TRUE(v >= -1.0f && v <= 1.0f) << v;
    // Solid colour stays solid: geometry does nothing, colour jitter acts on every pixel alike.
    for (int c = 0; c < 3; ++c) {
      const auto [lo, hi] =
          std::minmax_element(x.begin() + c * kPlane, x.begin() + (c + 1) * kPlane);
      EXPECT_LT(*hi - *lo, 2 * 2 * kJpegTol / 255) << "key " << key << " channel " << c;
    }
    changed += std::fabs(x[0] - 2.0 * (kCat[0] / 255.0 - 0.5)) > 0.05;
  }
  EXPECT_GE(changed, 10);  // brightness alone moves R by more than 0.05 in ~80% of draws
}

TEST(ImageFolder, GrayscaleAndAdobeCmykBecomeRgb) {
  TempDir root;
  write_tree(root);
  // Adobe-inverted CMYK as Photoshop writes it: R = C * K / 255 with K = 255 stores the colour.
  write_jpeg(root / "train/cat/c.jpg", 64, 64, 4, [](int, int, uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(kCat[c]);
    p[3] = 255;
  });
  auto train = open_dataset(folder(root.str()), Split::train);
  ASSERT_EQ(train->info().size, 7);
  std::vector<int32_t> labels;
  const std::vector<float> gray = load(*train, {6}, false, 0, &labels);  // emu/b.jpg
  for (int64_t i = 0; i < kPlane; i += 3) {
    // Equal channels before the mean subtraction (1e-3: f32 rounding of x - mean).
    ASSERT_NEAR(gray[i] + kMean[0], gray[kPlane + i] + kMean[1], 1e-3);
    ASSERT_NEAR(gray[i] + kMean[0], gray[2 * kPlane + i] + kMean[2], 1e-3);
  }
  const std::vector<float> cmyk = load(*train, {2}, false, 0, &labels);  // cat/c.jpg
  EXPECT_EQ(labels[0], 0);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(cmyk[c * kPlane + 500], kCat[c] - kMean[c], kJpegTol);
}

TEST(ImageFolder, CorruptJpegIsAnErrorNamingTheFile) {
  TempDir root;
  write_tree(root);
  write_bytes(root / "train/cat/zz.jpg", {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  std::vector<uint8_t> half = read_bytes(root / "train/dog/a.jpg");
  half.resize(half.size() / 2);
  write_bytes(root / "train/dog/zz.jpg", half);
  auto train = open_dataset(folder(root.str()), Split::train);
  ASSERT_EQ(train->info().size, 8);  // listing does not decode
  std::vector<int32_t> labels;
  expect_error_with([&] { load(*train, {2}, false, 0, &labels); },
                    {root / "train/cat/zz.jpg", "JPEG"});
  expect_error_with([&] { load(*train, {5}, false, 0, &labels); },
                    {root / "train/dog/zz.jpg", "Premature end"});
  // Intact files around them still load.
  load(*train, {0, 4}, false, 0, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 1}));
}

// The loader decodes only the rows a crop reaches, so it never reads the end of the data for a
// small crop near the top; a truncated file is still refused, whatever the crop, with or
// without fast_decode.
TEST(ImageFolder, TruncationPastTheCropIsStillAnError) {
  TempDir root;
  constexpr int W = 900, H = 1200;  // alexnet's 24-pixel crop of the 256 x 256 resize: rows < 9%
  write_jpeg(root / "train/a/tall.jpg", W, H, 3, ramp, true);
  write_jpeg(root / "val/a/tall.jpg", W, H, 3, ramp, true);
  std::vector<uint8_t> bytes = read_bytes(root / "train/a/tall.jpg");
  for (size_t cut : {size_t{2}, bytes.size() / 5}) {  // just the end marker; the last fifth
    SCOPED_TRACE(cut);
    write_bytes(root / "train/a/tall.jpg", std::vector<uint8_t>(bytes.begin(), bytes.end() - cut));
    for (bool fast : {false, true}) {
      DataOptions o = folder(root.str());
      o.image_size = 24;
      o.fast_decode = fast;
      auto train = open_dataset(o, Split::train);
      std::vector<int32_t> labels;
      // Keys whose crop starts in the top rows (crop y = 0 .. 232 of 256; key 0's is drawn first).
      for (uint64_t key = 0; key < 4; ++key)
        expect_error_with([&] { load(*train, {0}, true, key, &labels); },
                          {root / "train/a/tall.jpg", "Premature end"});
    }
  }
}

TEST(ImageFolder, HeaderOverThePixelCapIsRefusedBeforeDecoding) {
  TempDir root;
  write_jpeg(root / "a.jpg", 64, 48, 3, ramp);
  std::vector<uint8_t> jpeg = read_bytes(root / "a.jpg");
  const auto img = detail::decode_jpeg(jpeg, "a.jpg");
  EXPECT_EQ(img.height, 48);
  EXPECT_EQ(img.width, 64);
  expect_error_with([&] { detail::decode_jpeg(jpeg, "a.jpg", 64 * 48 - 1); },
                    {"a.jpg", "64 x 48 pixels", "limit of 3071"});
  // The baseline frame header (FF C0, length, precision) holds height then width, big-endian:
  // 8193 x 8192 is one row over the dataset's own cap.
  constexpr uint8_t kSof0[2] = {0xFF, 0xC0};
  const auto sof = std::search(jpeg.begin(), jpeg.end(), kSof0, kSof0 + 2);
  ASSERT_NE(sof, jpeg.end());
  const uint8_t dims[4] = {8193 >> 8, 8193 & 0xFF, 8192 >> 8, 8192 & 0xFF};
  std::copy(dims, dims + 4, sof + 5);
  expect_error_with([&] { detail::decode_jpeg(jpeg, "big.jpg"); },
                    {"big.jpg", "8192 x 8193 pixels", "limit of 67108864"});
}

// The loader's bilinear sampling is bit for bit the direct formula on the fully decoded bytes:
// per output pixel, lerp across each of the two source rows, then between them (float
// arithmetic in that order), at half-pixel centres. The loader decodes only the rows and
// columns the crop reaches (plus a margin), so this also checks that its partial decode gives
// the full decode's pixels, with 4:2:0 chroma (whose upsampling reads context) as well. Noise
// images, so every tap matters; one smaller than the output (rows repeat: source rows shared
// and clamped) and larger ones (downscaled), odd sizes; alexnet's random crops and flips too.
float direct_bilinear(const detail::RgbImage& img, int64_t by, int64_t bx, int64_t bh, int64_t bw,
                      int64_t resized, int64_t oy, int64_t ox, int64_t i, int64_t j, int c) {
  auto tap = [&](int64_t k, int64_t offset, int64_t extent, int64_t start, int64_t* lo, int64_t* hi,
                 float* f) {
    // scale = extent / resized first, as the loader does (src_coord's order rounds differently).
    const double scale = static_cast<double>(extent) / static_cast<double>(resized);
    const double src = std::clamp((static_cast<double>(offset + k) + 0.5) * scale - 0.5, 0.0,
                                  static_cast<double>(extent - 1));
    const int64_t l = static_cast<int64_t>(std::floor(src));
    *lo = start + l;
    *hi = start + std::min(l + 1, extent - 1);
    *f = static_cast<float>(src - l);
  };
  int64_t y0, y1, x0, x1;
  float fy, fx;
  tap(i, oy, bh, by, &y0, &y1, &fy);
  tap(j, ox, bw, bx, &x0, &x1, &fx);
  auto px = [&](int64_t y, int64_t x) {
    return static_cast<int>(img.rgb[(y * img.width + x) * 3 + c]);
  };
  const float top =
      static_cast<float>(px(y0, x0)) + fx * static_cast<float>(px(y0, x1) - px(y0, x0));
  const float bot =
      static_cast<float>(px(y1, x0)) + fx * static_cast<float>(px(y1, x1) - px(y1, x0));
  return top + fy * (bot - top);
}

TEST(ImageFolder, SamplingIsBitForBitTheDirectFormula) {
  TempDir root;
  uint32_t state = 12345;
  const Fill noise = [&state](int, int, uint8_t* p) {
    for (int c = 0; c < 3; ++c) {
      state = state * 1664525u + 1013904223u;
      p[c] = static_cast<uint8_t>(state >> 24);
    }
  };
  const char* names[3] = {"large.jpg", "small.jpg", "sub.jpg"};  // the order the loader sorts
  for (const char* split : {"train", "val"}) {
    write_jpeg(root / (std::string(split) + "/a/large.jpg"), 613, 389, 3, noise);
    write_jpeg(root / (std::string(split) + "/a/small.jpg"), 157, 101, 3, noise);
    write_jpeg(root / (std::string(split) + "/a/sub.jpg"), 611, 397, 3, noise, true);
  }
  for (const char* pre : {"alexnet", "inception"}) {
    SCOPED_TRACE(pre);
    const bool alex = std::string(pre) == "alexnet";
    auto val = open_dataset(folder(root.str(), pre), Split::test);
    auto train = open_dataset(folder(root.str(), pre), Split::train);
    for (int64_t k = 0; k < 3; ++k) {
      // (Each file has its own noise: decode the split's.)
      const detail::RgbImage val_img =
          detail::decode_jpeg(read_bytes(root / ("val/a/" + std::string(names[k]))), "x");
      const detail::RgbImage train_img =
          detail::decode_jpeg(read_bytes(root / ("train/a/" + std::string(names[k]))), "x");
      // Eval (central crop), then for alexnet training crops and flips drawn as the loader
      // draws them (datasets/image_folder.cpp: crop y, crop x, flip).
      for (uint64_t key = 0; key < (alex ? 7u : 1u); ++key) {
        const bool eval = key == 0;
        const detail::RgbImage& img = eval ? val_img : train_img;
        int64_t oy = 16, ox = 16;
        bool flip = false;
        if (!eval) {
          detail::AugRng rng(42, key);
          oy = rng.below(256 - kS + 1);
          ox = rng.below(256 - kS + 1);
          flip = rng.uniform() < 0.5f;
        }
        std::vector<int32_t> labels;
        const std::vector<float> x = load(eval ? *val : *train, {k}, !eval, key, &labels);
        int64_t mismatches = 0;
        for (int c = 0; c < 3; ++c) {
          for (int64_t i = 0; i < kS; ++i) {
            for (int64_t j = 0; j < kS; ++j) {
              const int64_t jj = flip ? kS - 1 - j : j;
              float want;
              if (alex) {
                want = direct_bilinear(img, 0, 0, img.height, img.width, 256, oy, ox, i, jj, c) -
                       static_cast<float>(kMean[c]);
              } else {
                const int64_t by = static_cast<int64_t>((img.height - img.height * 0.875) / 2);
                const int64_t bx = static_cast<int64_t>((img.width - img.width * 0.875) / 2);
                want = direct_bilinear(img, by, bx, img.height - 2 * by, img.width - 2 * bx, kS, 0,
                                       0, i, j, c);
                // Two passes in the loader, so never fused into one multiply-add there.
                const volatile float unit = want * (1.0f / 255.0f);
                want = 2.0f * (unit - 0.5f);
              }
              mismatches += x[c * kPlane + i * kS + j] != want;
            }
          }
        }
        EXPECT_EQ(mismatches, 0) << names[k] << ", key " << key;
      }
    }
  }
}

// data.fast_decode: a 1201 x 1103 ramp decoded at a reduced DCT scale (alexnet needs 256 rows:
// 1103 * 2 / 8 >= 256, so scale 2/8) and only the crop's rows and columns. The geometry is the
// full decode's: the same crop of the same ramp, to within the JPEG error plus the reduced
// decode's (an 8 x 8 block's IDCT at 2 x 2 averages the ramp over the block: 1.5 levels).
TEST(ImageFolder, FastDecodeKeepsTheGeometryAtAReducedScale) {
  TempDir root;
  constexpr int W = 1201, H = 1103;
  const Fill big_ramp = [](int x, int y, uint8_t* p) {
    p[0] = static_cast<uint8_t>(std::lround(x * 255.0 / (W - 1)));
    p[1] = static_cast<uint8_t>(std::lround(y * 255.0 / (H - 1)));
    p[2] = kRampB;
  };
  write_jpeg(root / "train/a/r.jpg", W, H, 3, big_ramp);
  write_jpeg(root / "val/a/r.jpg", W, H, 3, big_ramp);
  constexpr double kTol = kJpegTol + 1.5;
  for (const char* pre : {"alexnet", "inception"}) {
    SCOPED_TRACE(pre);
    DataOptions fast = folder(root.str(), pre), exact = folder(root.str(), pre);
    fast.fast_decode = true;
    // On 0..255 from either recipe's output.
    auto level = [&](float v) {
      return std::string(pre) == "alexnet" ? static_cast<double>(v) : (v + 1.0) * 255.0 / 2.0;
    };
    for (Split split : {Split::test, Split::train}) {
      auto f = open_dataset(fast, split), e = open_dataset(exact, split);
      for (uint64_t key = 0; key < (split == Split::train ? 6u : 1u); ++key) {
        std::vector<int32_t> labels;
        const std::vector<float> xf = load(*f, {0}, true, key, &labels);
        const std::vector<float> xe = load(*e, {0}, true, key, &labels);
        // Inception's colour jitter acts alike on both; comparing the two outputs covers it.
        double sum = 0.0, most = 0.0;
        for (size_t i = 0; i < xf.size(); ++i) {
          const double d = std::fabs(level(xf[i]) - level(xe[i]));
          sum += d;
          most = std::max(most, d);
        }
        EXPECT_LT(sum / static_cast<double>(xf.size()), 1.5) << "key " << key;
        EXPECT_LT(most, 2 * kTol) << "key " << key;
      }
      if (split == Split::test && std::string(pre) == "alexnet") {
        // Against the analytic ramp: the central 224 of the 256 x 256 resize.
        std::vector<int32_t> labels;
        const std::vector<float> x = load(*f, {0}, false, 0, &labels);
        for (int64_t i = 0; i < kS; i += 7) {
          for (int64_t j = 0; j < kS; j += 5) {
            const double sx = src_coord(j, 16, 256, W), sy = src_coord(i, 16, 256, H);
            ASSERT_NEAR(x[i * kS + j], sx * 255.0 / (W - 1) - kMean[0], kTol) << i << "," << j;
            ASSERT_NEAR(x[kPlane + i * kS + j], sy * 255.0 / (H - 1) - kMean[1], kTol)
                << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(ImageFolder, LayoutErrors) {
  TempDir root;
  write_tree(root);
  std::filesystem::create_directories(root / "val/fox");
  expect_error_with([&] { open_dataset(folder(root.str()), Split::train); },
                    {"class sets differ", "'fox'", root / "val"});
  std::filesystem::remove_all(root / "val");
  expect_error_with([&] { open_dataset(folder(root.str()), Split::train); },
                    {"missing split directory", root / "val"});
  std::filesystem::create_directories(root / "val");
  expect_error_with([&] { open_dataset(folder(root.str()), Split::test); },
                    {root / "val", "is empty"});
  for (const char* c : {"cat", "dog", "emu"})
    std::filesystem::create_directories(root / ("val/" + std::string(c)));
  expect_error_with([&] { open_dataset(folder(root.str()), Split::test); },
                    {"no .jpg/.jpeg images", root / "val"});
  expect_error_with([&] { folder(root.str(), "vgg"); },
                    {"data.preprocess: unknown value 'vgg'", "alexnet, inception"});
  expect_error_with([&] { open_dataset(folder(""), Split::train); }, {"data.path"});
  DataOptions big = folder(root.str());
  big.image_size = 300;
  expect_error_with([&] { open_dataset(big, Split::train); }, {"image_size 300"});
}

}  // namespace
}  // namespace tg::data
