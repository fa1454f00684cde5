// JPEG image folders in the ImageNet layout: path/train/<class>/*.jpg and path/val/<class>/*.jpg
// (the test split reads val). Classes are the sub-directories, sorted by name; label = class
// index + label_offset. Files ending in .jpg/.jpeg (any case) are examples, sorted by path within
// a class; anything else is ignored. Only the file list is kept in memory: load() decodes with
// libjpeg-turbo (grayscale and CMYK converted to RGB) and preprocesses on the fly.
//
// Preprocessing (the reference code's); S = image_size (default 224), images as 3 x S x S floats:
//   "alexnet"   resize to 256 x 256 (bilinear, aspect ignored), then train: random S x S crop +
//               random horizontal flip; eval: central S x S crop. Pixels 0..255 minus the RGB
//               means (123.68, 116.78, 103.94).
//   "inception" (TF-slim inception_preprocessing) train: random distorted bounding box (below),
//               resized to S x S (bilinear), random flip, colour jitter in slim's ordering 0 on
//               [0, 1] pixels: brightness +-32/255, saturation x[0.5, 1.5), hue +-0.2, contrast
//               x[0.5, 1.5), then clip to [0, 1]; eval: central 87.5% crop (tf.image.central_crop
//               rounding) resized to S x S. Both end with 2 * (x - 0.5) in [-1, 1].
//
// Bilinear sampling uses half-pixel centres (src = (dst + 0.5) * in / out - 0.5, clamped to the
// crop), as TF2/OpenCV/PIL do, without anti-aliasing (TF's resize_images has none either). We
// resample the crop straight from the decoded image instead of materializing the 256 x 256 (or
// box-cropped) intermediate: the same numbers, less work. slim picks one of four resize methods
// at random for the distorted crop; we always use bilinear.
//
// Distorted bounding box: an approximation of tf.image.sample_distorted_bounding_box with the
// whole image as the object box, min_object_covered 0.1, aspect_ratio_range [3/4, 4/3],
// area_range [0.05, 1], max_attempts 100. With the whole image as the object, "covers >= 10% of
// the object" means "crop area >= 10% of the image". Each attempt draws an area fraction
// ~ U[0.05, 1) (TF draws the height uniformly instead) and an aspect ratio w/h ~ U[3/4, 4/3),
// sets h = round(sqrt(area / aspect)), w = round(h * aspect), and is accepted when the box fits
// and covers >= 10% of the image; its offset is then uniform. If all attempts fail the whole image
// is used (as TF's use_image_if_no_bounding_boxes fallback).
//
// Random numbers of an example come from AugRng(aug_seed, key) in this order: alexnet: crop y,
// crop x, flip; inception: 2 per box attempt, box y, box x, flip, brightness, saturation, hue,
// contrast.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <new>

// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "datasets/loaders.h"
#include "nn/core/error.h"

namespace tg::data::detail {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDefaultSize = 224;
constexpr int64_t kAlexResize = 256;
constexpr float kAlexMean[3] = {123.68f, 116.78f, 103.94f};
constexpr double kCentralFraction = 0.875;
constexpr double kMinObjectCovered = 0.1;
constexpr float kAreaLower = 0.05f, kAreaUpper = 1.0f;
constexpr float kAspectLower = 3.0f / 4.0f, kAspectUpper = 4.0f / 3.0f;
constexpr int kMaxBoxAttempts = 100;
constexpr float kBrightnessDelta = 32.0f / 255.0f;
constexpr float kSaturationLower = 0.5f, kSaturationUpper = 1.5f;
constexpr float kHueDelta = 0.2f;
constexpr float kContrastLower = 0.5f, kContrastUpper = 1.5f;

// ---- JPEG decoding ---------------------------------------------------------------------------

using Image = RgbImage;  // H x W x 3, RGB

// libjpeg reports fatal errors through error_exit, which must not return: we longjmp back to
// decode_raw. A truncated file is only a warning to libjpeg (it pads with grey); we make it fatal
// so a half-downloaded image is reported rather than trained on. Other warnings are ignored.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error_exit(j_common_ptr cinfo) {
  auto* em = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, em->message);
  std::longjmp(em->jump, 1);
}

void on_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error_exit(cinfo);
}

// No C++ object with a destructor lives in this frame, so the longjmp skips nothing; `out` is
// owned by the caller.
bool decode_raw(const uint8_t* data, size_t size, int64_t max_pixels, Image* out,
                ErrorManager* em) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&em->pub);
  em->pub.error_exit = on_error_exit;
  em->pub.emit_message = on_emit_message;
  if (setjmp(em->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // The header's size is the file's word: refuse a huge one before libjpeg allocates for it
  // (a progressive image buffers 2 bytes per pixel and component).
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > max_pixels) {
    std::snprintf(em->message, sizeof(em->message),
                  "the header declares %u x %u pixels, over the limit of %lld", cinfo.image_width,
                  cinfo.image_height, static_cast<long long>(max_pixels));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int64_t h = cinfo.output_height, w = cinfo.output_width;
  out->height = h;
  out->width = w;
  // Grown row by row rather than sized from the header, so a truncated file that declares a
  // large image fails before its memory is touched.
  out->rgb.clear();
  JSAMPARRAY cmyk_row =
      cmyk ? (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE,
                                        static_cast<JDIMENSION>(w * 4), 1)
           : nullptr;
  // Adobe CMYK JPEGs store inverted values (as PIL/stb assume when the Adobe marker is present).
  const bool inverted = cinfo.saw_Adobe_marker;
  while (cinfo.output_scanline < cinfo.output_height) {
    out->rgb.resize(static_cast<size_t>((cinfo.output_scanline + 1) * w * 3));
    uint8_t* dst = out->rgb.data() + static_cast<int64_t>(cinfo.output_scanline) * w * 3;
    JSAMPROW row = cmyk ? cmyk_row[0] : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) {
      for (int64_t x = 0; x < w; ++x) {
        const uint8_t* p = cmyk_row[0] + 4 * x;
        for (int c = 0; c < 3; ++c) {
          const int ink = inverted ? p[c] : 255 - p[c], key = inverted ? p[3] : 255 - p[3];
          dst[3 * x + c] = static_cast<uint8_t>((ink * key + 127) / 255);
        }
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

void decode_into(std::span<const uint8_t> bytes, const std::string& file, int64_t max_pixels,
                 Image& img) {
  ErrorManager em;
  em.message[0] = '\0';
  bool ok = false;
  try {
    ok = decode_raw(bytes.data(), bytes.size(), max_pixels, &img, &em);
  } catch (const std::bad_alloc&) {
    TG_THROW(file, ": out of memory decoding a ", img.height, " x ", img.width, " JPEG");
  }
  if (!ok) {
    TG_THROW(file, ": cannot decode JPEG (libjpeg: ", em.message,
             "; expected a valid baseline or progressive JPEG)");
  }
  TG_CHECK(img.height > 0 && img.width > 0, file, ": decoded an empty image");
}

// Decodes `file` into `img`, reusing this thread's file buffer and img's pixel memory: a loader
// thread allocates (and the kernel zero-fills) them once, not once per image.
void decode_jpeg_file(const std::string& file, Image& img) {
  thread_local std::vector<uint8_t> bytes;
  read_file(file, bytes);
  decode_into(bytes, file, kMaxImagePixels, img);
}

// ---- geometry and colour -----------------------------------------------------------------------

struct Box {
  int64_t y = 0, x = 0, h = 0, w = 0;  // in source pixels
};

// Output pixel (i, j) of an S x S result samples pixel (oy + i, ox + jj) of the box resized to
// rh x rw, jj = S - 1 - j when flipped; writes 3 x S x S floats on the 0..255 scale.
//
// Separable: each source row an output row needs is interpolated across once (into one of two
// cached rows, as consecutive output rows share source rows), then output rows are blends of two
// such rows, a loop the compiler vectorizes. Every value is computed by the same float operations
// in the same order as the direct formula top + fy * (bot - top), with top and bot the
// horizontal lerps of the two source rows, so the pixels are bit for bit those of that formula.
void resample(const Image& img, const Box& box, int64_t rh, int64_t rw, int64_t oy, int64_t ox,
              int64_t s, bool flip, float* dst) {
  struct Tap {
    int64_t lo, hi;
    float f;
  };
  auto taps = [s](int64_t offset, int64_t resized, int64_t extent, int64_t start) {
    std::vector<Tap> t(s);
    const double scale = static_cast<double>(extent) / static_cast<double>(resized);
    for (int64_t i = 0; i < s; ++i) {
      double src = (static_cast<double>(offset + i) + 0.5) * scale - 0.5;
      src = std::clamp(src, 0.0, static_cast<double>(extent - 1));
      const int64_t lo = static_cast<int64_t>(std::floor(src));
      t[i] = {start + lo, start + std::min(lo + 1, extent - 1), static_cast<float>(src - lo)};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(oy, rh, box.h, box.y), tx = taps(ox, rw, box.w, box.x);
  // Column taps in output order (flip applied), as byte offsets into a row.
  std::vector<int64_t> col_lo(s), col_hi(s);
  std::vector<float> col_f(s);
  for (int64_t j = 0; j < s; ++j) {
    const Tap& t = tx[flip ? s - 1 - j : j];
    col_lo[j] = t.lo * 3;
    col_hi[j] = t.hi * 3;
    col_f[j] = t.f;
  }
  std::vector<float> rows(2 * 3 * s);
  int64_t cached[2] = {-1, -1};
  auto fill = [&](int slot, int64_t y) {
    const uint8_t* r = img.rgb.data() + y * img.width * 3;
    float* out = rows.data() + slot * 3 * s;
    for (int64_t c = 0; c < 3; ++c, out += s) {
      for (int64_t j = 0; j < s; ++j) {
        const int lo = r[col_lo[j] + c], hi = r[col_hi[j] + c];
        out[j] = static_cast<float>(lo) + col_f[j] * static_cast<float>(hi - lo);
      }
    }
    cached[slot] = y;
  };
  // The slot holding source row y, filled if needed without evicting row `keep`.
  auto slot_of = [&](int64_t y, int64_t keep) {
    for (int k = 0; k < 2; ++k)
      if (cached[k] == y) return k;
    const int k = cached[0] == keep ? 1 : 0;
    fill(k, y);
    return k;
  };
  const int64_t plane = s * s;
  for (int64_t i = 0; i < s; ++i) {
    const int a = slot_of(ty[i].lo, ty[i].hi);
    const int b = slot_of(ty[i].hi, ty[i].lo);
    const float fy = ty[i].f;
    for (int64_t c = 0; c < 3; ++c) {
      const float* top = rows.data() + a * 3 * s + c * s;
      const float* bot = rows.data() + b * 3 * s + c * s;
      float* o = dst + c * plane + i * s;
      for (int64_t j = 0; j < s; ++j) o[j] = top[j] + fy * (bot[j] - top[j]);
    }
  }
}

Box distorted_box(AugRng& rng, int64_t height, int64_t width) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  for (int attempt = 0; attempt < kMaxBoxAttempts; ++attempt) {
    const double frac = rng.uniform(kAreaLower, kAreaUpper);
    const double aspect = rng.uniform(kAspectLower, kAspectUpper);
    const int64_t h = std::llround(std::sqrt(frac * area / aspect));
    const int64_t w = std::llround(static_cast<double>(h) * aspect);
    if (h < 1 || w < 1 || h > height || w > width) continue;
    if (static_cast<double>(h * w) < kMinObjectCovered * area) continue;
    Box b;
    b.h = h;
    b.w = w;
    b.y = rng.below(height - h + 1);
    b.x = rng.below(width - w + 1);
    return b;
  }
  return {0, 0, height, width};
}

// TF rgb_to_hsv / hsv_to_rgb on one pixel; saturation scaled and clipped to [0, 1], hue shifted
// and wrapped (adjust_saturation then adjust_hue).
void adjust_hsv(float& r, float& g, float& b, float sat_factor, float hue_delta) {
  const float v = std::max({r, g, b}), mn = std::min({r, g, b}), range = v - mn;
  float s = v > 0.0f ? range / v : 0.0f;
  float h = 0.0f;
  if (range > 0.0f) {
    if (v == r) {
      h = (g - b) / range;
    } else if (v == g) {
      h = 2.0f + (b - r) / range;
    } else {
      h = 4.0f + (r - g) / range;
    }
    h /= 6.0f;
    if (h < 0.0f) h += 1.0f;
  }
  s = std::clamp(s * sat_factor, 0.0f, 1.0f);
  h += hue_delta;
  h -= std::floor(h);
  const float c = v * s, h6 = h * 6.0f;
  const float x = c * (1.0f - std::fabs(std::fmod(h6, 2.0f) - 1.0f)), m = v - c;
  float rr, gg, bb;
  switch (std::min(static_cast<int>(h6), 5)) {
    case 0:
      rr = c, gg = x, bb = 0;
      break;
    case 1:
      rr = x, gg = c, bb = 0;
      break;
    case 2:
      rr = 0, gg = c, bb = x;
      break;
    case 3:
      rr = 0, gg = x, bb = c;
      break;
    case 4:
      rr = x, gg = 0, bb = c;
      break;
    default:
      rr = c, gg = 0, bb = x;
      break;
  }
  r = rr + m;
  g = gg + m;
  b = bb + m;
}

// slim distort_color ordering 0 on [0, 1] pixels (3 x n planes), then clip to [0, 1].
void color_jitter(AugRng& rng, float* x, int64_t n) {
  const float brightness = rng.uniform(-kBrightnessDelta, kBrightnessDelta);
  const float saturation = rng.uniform(kSaturationLower, kSaturationUpper);
  const float hue = rng.uniform(-kHueDelta, kHueDelta);
  const float contrast = rng.uniform(kContrastLower, kContrastUpper);
  float* r = x;
  float* g = x + n;
  float* b = x + 2 * n;
  for (int64_t i = 0; i < n; ++i) {
    r[i] += brightness;
    g[i] += brightness;
    b[i] += brightness;
    adjust_hsv(r[i], g[i], b[i], saturation, hue);
  }
  for (int64_t c = 0; c < 3; ++c) {
    float* p = x + c * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += p[i];
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) p[i] = std::clamp((p[i] - mean) * contrast + mean, 0.0f, 1.0f);
  }
}

// ---- the dataset -------------------------------------------------------------------------------

bool is_jpeg_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg";
}

std::vector<std::string> class_dirs(const std::string& root, const std::string& split_dir) {
  std::error_code ec;
  TG_CHECK(fs::is_directory(split_dir, ec), "image-folder: missing split directory ", split_dir,
           " (expected ", join_path(root, "train"), "/<class>/*.jpg and ", join_path(root, "val"),
           "/<class>/*.jpg)");
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(split_dir)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  TG_CHECK(!names.empty(), "image-folder: split directory ", split_dir,
           " is empty (expected one sub-directory of .jpg images per class)");
  return names;
}

std::string list_some(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + ("'" + names[i] + "'");
  if (names.size() > 5) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(const DataOptions& options, Split split) {
    TG_CHECK(!options.path.empty(),
             "image-folder: no data.path given (expected a directory with train/<class>/*.jpg "
             "and val/<class>/*.jpg)");
    inception_ = options.preprocess == Preprocess::inception;
    const int64_t s = options.image_size == 0 ? kDefaultSize : options.image_size;
    TG_CHECK(s >= 1 && (inception_ || s <= kAlexResize), "image-folder: data.image_size ",
             options.image_size, " is out of range (expected 0 for ", kDefaultSize, ", or 1..",
             inception_ ? std::string("any") : std::to_string(kAlexResize), " for preprocess ",
             enum_name(kPreprocesses, options.preprocess), ")");
    TG_CHECK(options.label_offset >= 0, "image-folder: data.label_offset ", options.label_offset,
             " is negative (expected >= 0)");

    const std::string train_dir = join_path(options.path, "train");
    const std::string val_dir = join_path(options.path, "val");
    const std::vector<std::string> train_classes = class_dirs(options.path, train_dir);
    const std::vector<std::string> val_classes = class_dirs(options.path, val_dir);
    if (train_classes != val_classes) {
      std::vector<std::string> only_train, only_val;
      std::set_difference(train_classes.begin(), train_classes.end(), val_classes.begin(),
                          val_classes.end(), std::back_inserter(only_train));
      std::set_difference(val_classes.begin(), val_classes.end(), train_classes.begin(),
                          train_classes.end(), std::back_inserter(only_val));
      TG_THROW("image-folder: train and val class sets differ: only in ", train_dir, ": [",
               list_some(only_train), "], only in ", val_dir, ": [", list_some(only_val),
               "] (expected the same class directories in both)");
    }
    const std::string dir = split == Split::train ? train_dir : val_dir;
    for (size_t c = 0; c < train_classes.size(); ++c) {
      std::vector<std::string> found;
      for (const fs::directory_entry& e :
           fs::directory_iterator(join_path(dir, train_classes[c]))) {
        if (e.is_regular_file() && is_jpeg_name(e.path())) found.push_back(e.path().string());
      }
      std::sort(found.begin(), found.end());
      for (std::string& f : found) {
        files_.push_back(std::move(f));
        labels_.push_back(static_cast<int32_t>(c + options.label_offset));
      }
    }
    TG_CHECK(!files_.empty(), "image-folder: no .jpg/.jpeg images under ", dir,
             "/<class>/ (expected at least one)");

    augment_ = options.augment;
    skip_bad_ = options.skip_bad_files;
    info_.name = "image-folder";
    info_.path = options.path;
    info_.split = split;
    info_.size = static_cast<int64_t>(files_.size());
    info_.channels = 3;
    info_.height = info_.width = s;
    info_.num_classes = static_cast<int64_t>(train_classes.size()) + options.label_offset;
  }

  void load(std::span<const int64_t> indices, bool augment, uint64_t aug_seed, uint64_t key_base,
            float* images, int32_t* labels) const override {
    check_indices(indices, info_.size, info_.name);
    const int64_t s = info_.height, plane = s * s;
    const bool distort = augment && augment_ && info_.split == Split::train;
    for (size_t k = 0; k < indices.size(); ++k) {
      // Each loader thread keeps its decoded pixels' memory for the next image, unless the last
      // image was unusually large (over 32 MB, 3600 x 3000): that is given back.
      thread_local Image img;
      if (img.rgb.capacity() > (size_t{32} << 20)) img = Image{};
      const int64_t used = decode_or_replace(indices[k], img);
      float* dst = images + static_cast<int64_t>(k) * 3 * plane;
      labels[k] = labels_[used];
      AugRng rng(aug_seed, key_base + k);
      const Box whole{0, 0, img.height, img.width};
      if (!inception_) {
        int64_t oy = (kAlexResize - s) / 2, ox = oy;
        bool flip = false;
        if (distort) {
          oy = rng.below(kAlexResize - s + 1);
          ox = rng.below(kAlexResize - s + 1);
          flip = rng.uniform() < 0.5f;
        }
        resample(img, whole, kAlexResize, kAlexResize, oy, ox, s, flip, dst);
        for (int64_t c = 0; c < 3; ++c) {
          float* p = dst + c * plane;
          for (int64_t i = 0; i < plane; ++i) p[i] -= kAlexMean[c];
        }
        continue;
      }
      if (distort) {
        const Box box = distorted_box(rng, img.height, img.width);
        const bool flip = rng.uniform() < 0.5f;
        resample(img, box, s, s, 0, 0, s, flip, dst);
        for (int64_t i = 0; i < 3 * plane; ++i) dst[i] *= 1.0f / 255.0f;
        color_jitter(rng, dst, plane);
      } else {
        // tf.image.central_crop: start = int((H - H * fraction) / 2), size = H - 2 * start.
        Box box;
        box.y = static_cast<int64_t>((img.height - img.height * kCentralFraction) / 2);
        box.x = static_cast<int64_t>((img.width - img.width * kCentralFraction) / 2);
        box.h = img.height - 2 * box.y;
        box.w = img.width - 2 * box.x;
        resample(img, box, s, s, 0, 0, s, false, dst);
        for (int64_t i = 0; i < 3 * plane; ++i) dst[i] *= 1.0f / 255.0f;
      }
      for (int64_t i = 0; i < 3 * plane; ++i) dst[i] = 2.0f * (dst[i] - 0.5f);
    }
  }

  BadFiles bad_files() const override {
    std::lock_guard<std::mutex> lock(bad_mu_);
    return bad_;
  }

 private:
  // Decodes example `index` into `img` and returns it; with skip_bad_files, an unreadable file
  // is recorded and replaced by the next readable one of the split (index + 1, + 2, ...,
  // wrapping): the same one for the same bad files, whatever the threads or the order.
  int64_t decode_or_replace(int64_t index, Image& img) const {
    try {
      decode_jpeg_file(files_[index], img);
      return index;
    } catch (const Error& e) {
      TG_CHECK(skip_bad_, e.what(),
               " (data.skip_bad_files = true replaces unreadable images and goes on)");
      note_bad(index, e.what(), true);
    }
    for (int64_t step = 1; step < info_.size; ++step) {
      const int64_t j = (index + step) % info_.size;
      try {
        decode_jpeg_file(files_[j], img);
        return j;
      } catch (const Error& e) {
        note_bad(j, e.what(), false);
      }
    }
    TG_THROW("image-folder: no readable image left in ", info_.path, " (", info_.size,
             " files, every one unreadable; data.skip_bad_files = true)");
  }

  void note_bad(int64_t index, const std::string& why, bool replaced) const {
    std::lock_guard<std::mutex> lock(bad_mu_);
    if (replaced) ++bad_.replaced;
    for (const auto& [file, w] : bad_.files)
      if (file == files_[index]) return;
    bad_.files.emplace_back(files_[index], why);
  }

  std::vector<std::string> files_;
  std::vector<int32_t> labels_;
  bool inception_ = false;
  bool augment_ = true;
  bool skip_bad_ = false;
  mutable std::mutex bad_mu_;
  mutable BadFiles bad_;
};

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& file, int64_t max_pixels) {
  Image img;
  decode_into(bytes, file, max_pixels, img);
  return img;
}

std::unique_ptr<Dataset> open_image_folder(const DataOptions& options, Split split) {
  return std::make_unique<ImageFolderDataset>(options, split);
}

}  // namespace tg::data::detail
