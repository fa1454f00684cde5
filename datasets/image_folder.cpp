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
// Only what the crop needs is decoded: its geometry is drawn from the header's size first, then
// libjpeg-turbo skips the rows above and crops the columns beside it (with a margin, so the
// pixels are the full decode's); data.fast_decode also decodes at a reduced DCT scale when the
// image is at least twice the needed resolution (different pixels, so opt-in).
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
// Pixels decoded beyond what the taps reach (ImageFolderDataset::plan says why).
constexpr int64_t kCropMargin = 16;
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
// A partial, possibly reduced decode: only the rows [y0, y1) and columns [x0, x1) of the image
// at scale/8 of its full size (data.fast_decode: libjpeg-turbo's DCT-domain scaling, each 8 x 8
// block's inverse DCT computed at scale x scale). The planner sees the header's size first.
struct Plan {
  int scale = 8;
  int64_t y0 = 0, y1 = -1, x0 = 0, x1 = -1;  // -1: to the end
};
// What was decoded: `out` holds rows from y0 and columns from x0 (libjpeg moves x0 down to its
// block boundary) of the scaled image.
struct Decoded {
  int scale = 8;
  int64_t y0 = 0, x0 = 0;
};
using Planner = Plan (*)(void* context, int64_t height, int64_t width);

bool decode_raw(const uint8_t* data, size_t size, int64_t max_pixels, Planner planner,
                void* context, Image* out, Decoded* got, ErrorManager* em) {
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
  // A planned decode may stop before the end of the data, so libjpeg would not see a truncated
  // file: ask for the end-of-image marker after the scan data instead (inside entropy-coded data
  // 0xFF is always followed by 0x00 or a restart marker, so FF D9 there is the real end).
  if (planner) {
    const uint8_t* scan = cinfo.src->next_input_byte;
    const uint8_t* end = data + size;
    bool eoi = false;
    for (const uint8_t* q = end - 1; q > scan && !eoi; --q) eoi = q[-1] == 0xFF && q[0] == 0xD9;
    if (!eoi) {
      std::snprintf(em->message, sizeof(em->message),
                    "Premature end of JPEG file (no end-of-image marker after the scan data)");
      jpeg_destroy_decompress(&cinfo);
      return false;
    }
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  const Plan plan = planner ? planner(context, cinfo.image_height, cinfo.image_width) : Plan{};
  got->scale = plan.scale;
  cinfo.scale_num = static_cast<unsigned>(plan.scale);
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  const int64_t scaled_h = cinfo.output_height, scaled_w = cinfo.output_width;
  const int64_t y0 = std::clamp<int64_t>(plan.y0, 0, scaled_h - 1);
  const int64_t y1 = plan.y1 < 0 ? scaled_h : std::clamp<int64_t>(plan.y1, y0 + 1, scaled_h);
  const int64_t x0 = std::clamp<int64_t>(plan.x0, 0, scaled_w - 1);
  const int64_t x1 = plan.x1 < 0 ? scaled_w : std::clamp<int64_t>(plan.x1, x0 + 1, scaled_w);
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), cw = static_cast<JDIMENSION>(x1 - x0);
  if (x0 > 0 || x1 < scaled_w) jpeg_crop_scanline(&cinfo, &xoff, &cw);
  got->x0 = xoff;
  got->y0 = y0;
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  const int64_t h = y1 - y0, w = cinfo.output_width;
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
  while (cinfo.output_scanline < y1) {
    const int64_t row_index = cinfo.output_scanline - y0;
    out->rgb.resize(static_cast<size_t>((row_index + 1) * w * 3));
    uint8_t* dst = out->rgb.data() + row_index * w * 3;
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
  // A partial decode stops here: libjpeg would refuse to finish with rows unread.
  if (y1 == scaled_h) jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Decoded decode_into(std::span<const uint8_t> bytes, const std::string& file, int64_t max_pixels,
                    Image& img, Planner planner = nullptr, void* context = nullptr) {
  ErrorManager em;
  em.message[0] = '\0';
  bool ok = false;
  Decoded got;
  try {
    ok = decode_raw(bytes.data(), bytes.size(), max_pixels, planner, context, &img, &got, &em);
  } catch (const std::bad_alloc&) {
    TG_THROW(file, ": out of memory decoding a ", img.height, " x ", img.width, " JPEG");
  }
  if (!ok) {
    TG_THROW(file, ": cannot decode JPEG (libjpeg: ", em.message,
             "; expected a valid baseline or progressive JPEG)");
  }
  TG_CHECK(img.height > 0 && img.width > 0, file, ": decoded an empty image");
  return got;
}

// Decodes `file` into `img`, reusing this thread's file buffer and img's pixel memory: a loader
// thread allocates (and the kernel zero-fills) them once, not once per image.
Decoded decode_jpeg_file(const std::string& file, Image& img, Planner planner, void* context) {
  thread_local std::vector<uint8_t> bytes;
  read_file(file, bytes);
  return decode_into(bytes, file, kMaxImagePixels, img, planner, context);
}

// ---- geometry and colour -----------------------------------------------------------------------

struct Box {
  int64_t y = 0, x = 0, h = 0, w = 0;  // in source pixels
};

// Where output pixel i of one axis samples: between source pixels lo and hi (indices into the
// decoded buffer), weight f on hi.
struct Tap {
  int64_t lo, hi;
  float f;
};

// Output pixel (i, j) of an S x S result samples pixel (oy + i, ox + j) of the box resized to
// rh x rw. The taps of one axis, from a full decode: half-pixel centres, src = (offset + i + 0.5)
// * extent / resized - 0.5, clamped to the box.
std::vector<Tap> exact_taps(int64_t s, int64_t offset, int64_t resized, int64_t extent,
                            int64_t start) {
  std::vector<Tap> t(s);
  const double scale = static_cast<double>(extent) / static_cast<double>(resized);
  for (int64_t i = 0; i < s; ++i) {
    double src = (static_cast<double>(offset + i) + 0.5) * scale - 0.5;
    src = std::clamp(src, 0.0, static_cast<double>(extent - 1));
    const int64_t lo = static_cast<int64_t>(std::floor(src));
    t[i] = {start + lo, start + std::min(lo + 1, extent - 1), static_cast<float>(src - lo)};
  }
  return t;
}

// The same from a decode at ratio = scale / 8 of the full size holding n pixels from `origin`:
// the same continuous position (start + (offset + i + 0.5) * extent / resized) * ratio, at the
// scaled image's pixel centres, clamped to the box there and to the pixels decoded.
std::vector<Tap> scaled_taps(int64_t s, int64_t offset, int64_t resized, int64_t extent,
                             int64_t start, double ratio, int64_t origin, int64_t n) {
  std::vector<Tap> t(s);
  const double first = static_cast<double>(start) * ratio - static_cast<double>(origin);
  const double last =
      static_cast<double>(start + extent) * ratio - 1.0 - static_cast<double>(origin);
  const double lo_edge = std::max(0.0, std::min(first, last)),
               hi_edge = std::max(lo_edge, std::min(last, static_cast<double>(n - 1)));
  for (int64_t i = 0; i < s; ++i) {
    const double pos = (static_cast<double>(start) + (static_cast<double>(offset + i) + 0.5) *
                                                         static_cast<double>(extent) /
                                                         static_cast<double>(resized)) *
                       ratio;
    const double src = std::clamp(pos - 0.5 - static_cast<double>(origin), lo_edge, hi_edge);
    const int64_t lo = static_cast<int64_t>(std::floor(src));
    t[i] = {lo, std::min(lo + 1, n - 1), static_cast<float>(src - static_cast<double>(lo))};
  }
  return t;
}

// Writes 3 x S x S floats on the 0..255 scale: row i blends source rows ty[i], column j samples
// columns tx[j] (tx[S - 1 - j] when flipped).
//
// Separable: each source row an output row needs is interpolated across once (into one of two
// cached rows, as consecutive output rows share source rows), then output rows are blends of two
// such rows, a loop the compiler vectorizes. Every value is computed by the same float operations
// in the same order as the direct formula top + fy * (bot - top), with top and bot the
// horizontal lerps of the two source rows, so the pixels are bit for bit those of that formula.
void resample(const Image& img, const std::vector<Tap>& ty, const std::vector<Tap>& tx, int64_t s,
              bool flip, float* dst) {
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
    fast_decode_ = options.fast_decode;
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
      // The geometry needs only the header's size; it is drawn first so a reduced decode can
      // be planned from it (and drawn again from the start for a replacement image).
      Planning p{this, AugRng(aug_seed, key_base + k), aug_seed, key_base + k, s, distort, {}, {},
                 {}};
      const int64_t used = decode_or_replace(indices[k], img, p);
      float* dst = images + static_cast<int64_t>(k) * 3 * plane;
      labels[k] = labels_[used];
      resample(img, p.ty, p.tx, s, p.sample.flip, dst);
      AugRng& rng = p.rng;  // after the geometry's draws
      if (!inception_) {
        for (int64_t c = 0; c < 3; ++c) {
          float* q = dst + c * plane;
          for (int64_t i = 0; i < plane; ++i) q[i] -= kAlexMean[c];
        }
        continue;
      }
      for (int64_t i = 0; i < 3 * plane; ++i) dst[i] *= 1.0f / 255.0f;
      if (distort) color_jitter(rng, dst, plane);
      for (int64_t i = 0; i < 3 * plane; ++i) dst[i] = 2.0f * (dst[i] - 0.5f);
    }
  }

  BadFiles bad_files() const override {
    std::lock_guard<std::mutex> lock(bad_mu_);
    return bad_;
  }

 private:
  // Where one example's pixels come from: the box of the source image, resized to rh x rw, the
  // S x S output at (oy, ox) of that, flipped or not.
  struct Sample {
    Box box;
    int64_t rh = 0, rw = 0, oy = 0, ox = 0;
    bool flip = false;
  };

  // Random numbers in the order the file's opening comment gives: alexnet crop y, crop x, flip;
  // inception box attempts, box y, box x, flip.
  Sample sample(AugRng& rng, int64_t height, int64_t width, int64_t s, bool distort) const {
    Sample g;
    if (!inception_) {
      g.box = {0, 0, height, width};
      g.rh = g.rw = kAlexResize;
      g.oy = g.ox = (kAlexResize - s) / 2;
      if (distort) {
        g.oy = rng.below(kAlexResize - s + 1);
        g.ox = rng.below(kAlexResize - s + 1);
        g.flip = rng.uniform() < 0.5f;
      }
      return g;
    }
    g.rh = g.rw = s;
    if (distort) {
      g.box = distorted_box(rng, height, width);
      g.flip = rng.uniform() < 0.5f;
    } else {
      // tf.image.central_crop: start = int((H - H * fraction) / 2), size = H - 2 * start.
      g.box.y = static_cast<int64_t>((height - height * kCentralFraction) / 2);
      g.box.x = static_cast<int64_t>((width - width * kCentralFraction) / 2);
      g.box.h = height - 2 * g.box.y;
      g.box.w = width - 2 * g.box.x;
    }
    return g;
  }

  // One example's decode, planned from the header: its geometry, and with fast_decode the
  // smallest DCT scale M / 8 that still gives the box at least the resized resolution (so the
  // resampling still only shrinks), and only the rows and columns its taps reach. plan() fills
  // the geometry and the taps in the scaled image's coordinates; shifted() moves them to the
  // decoded region's origin. A replacement image is planned again from the first draw.
  struct Planning {
    const ImageFolderDataset* self;
    AugRng rng;
    uint64_t seed, key;
    int64_t s;
    bool distort;
    Sample sample;
    std::vector<Tap> ty, tx;
  };
  static Plan plan(void* context, int64_t height, int64_t width) {
    auto* p = static_cast<Planning*>(context);
    p->rng = AugRng(p->seed, p->key);
    p->sample = p->self->sample(p->rng, height, width, p->s, p->distort);
    const Sample& g = p->sample;
    std::vector<Tap>& ty = p->ty;
    std::vector<Tap>& tx = p->tx;
    Plan out;
    if (p->self->fast_decode_) {
      // Only the scales libjpeg-turbo has SIMD inverse DCTs for (1/8 is the DC term alone; 1/4
      // and 1/2 are SIMD): its 3/8, 5/8, 6/8 and 7/8 ones are scalar and slower than the full
      // 8 x 8 SIMD IDCT (measured: bench/README).
      for (int m : {1, 2, 4}) {
        if (g.box.h * m >= 8 * g.rh && g.box.w * m >= 8 * g.rw) {
          out.scale = m;
          break;
        }
      }
    }
    if (out.scale == 8) {
      ty = exact_taps(p->s, g.oy, g.rh, g.box.h, g.box.y);
      tx = exact_taps(p->s, g.ox, g.rw, g.box.w, g.box.x);
    } else {
      const double ratio = out.scale / 8.0;
      // jdiv_round_up(size * M, 8): the scaled image's size in libjpeg.
      const int64_t sh = (height * out.scale + 7) / 8, sw = (width * out.scale + 7) / 8;
      ty = scaled_taps(p->s, g.oy, g.rh, g.box.h, g.box.y, ratio, 0, sh);
      tx = scaled_taps(p->s, g.ox, g.rw, g.box.w, g.box.x, ratio, 0, sw);
    }
    // The rows and columns the taps reach, and kCropMargin more on each side: libjpeg's fancy
    // upsampling of the chroma planes reads a pixel of context beyond a cropped region's edge
    // and a skipped row, so pixels there may differ from the full decode's; those a margin
    // away never do.
    out.y0 = std::max<int64_t>(0, ty.front().lo - kCropMargin);
    out.y1 = ty.back().hi + 1 + kCropMargin;
    out.x0 = std::max<int64_t>(0, tx.front().lo - kCropMargin);
    out.x1 = tx.back().hi + 1 + kCropMargin;
    return out;
  }

  // Decodes example `index` into `img`, leaves its taps in p moved to the decoded region's
  // origin, and returns the example used: with skip_bad_files, an unreadable file is recorded and
  // replaced by the next readable one of the split (index + 1, + 2, ..., wrapping): the same one
  // for the same bad files, whatever the threads or the order.
  int64_t decode_or_replace(int64_t index, Image& img, Planning& p) const {
    for (int64_t step = 0; step < info_.size; ++step) {
      const int64_t j = (index + step) % info_.size;
      try {
        const Decoded got = decode_jpeg_file(files_[j], img, &plan, &p);
        for (Tap& t : p.ty) t.lo -= got.y0, t.hi -= got.y0;
        for (Tap& t : p.tx) t.lo -= got.x0, t.hi -= got.x0;
        return j;
      } catch (const Error& e) {
        TG_CHECK(skip_bad_, e.what(),
                 " (data.skip_bad_files = true replaces unreadable images and goes on)");
        note_bad(j, e.what(), step == 0);
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
  bool fast_decode_ = false;
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
