#include "datasets/synthetic_folder.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "nn/core/error.h"
#include "nn/core/philox.h"

namespace tg::data {
namespace {

namespace fs = std::filesystem;

struct Compressor {
  jpeg_compress_struct c;  // first: libjpeg's callbacks get its address
  jpeg_error_mgr err;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

extern "C" void on_compress_error(j_common_ptr info) {
  auto* self = reinterpret_cast<Compressor*>(info);
  (*info->err->format_message)(info, self->message);
  std::longjmp(self->jump, 1);
}

// Encodes an H x W x 3 RGB image as a baseline JPEG (4:2:0) in memory.
std::vector<uint8_t> encode(const std::vector<uint8_t>& rgb, int w, int h, int quality) {
  Compressor z;
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  z.c.err = jpeg_std_error(&z.err);
  z.err.error_exit = on_compress_error;
  if (setjmp(z.jump) != 0) {
    jpeg_destroy_compress(&z.c);
    std::free(mem);
    TG_THROW("synthetic folder: JPEG encoder failed: ", z.message);
  }
  jpeg_create_compress(&z.c);
  jpeg_mem_dest(&z.c, &mem, &size);
  z.c.image_width = static_cast<JDIMENSION>(w);
  z.c.image_height = static_cast<JDIMENSION>(h);
  z.c.input_components = 3;
  z.c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&z.c);
  jpeg_set_quality(&z.c, quality, TRUE);
  jpeg_start_compress(&z.c, TRUE);
  while (z.c.next_scanline < z.c.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(rgb.data()) + static_cast<size_t>(z.c.next_scanline) * w * 3;
    jpeg_write_scanlines(&z.c, &row, 1);
  }
  jpeg_finish_compress(&z.c);
  std::vector<uint8_t> out(mem, mem + size);
  jpeg_destroy_compress(&z.c);
  std::free(mem);
  return out;
}

// Image `index` of class `cls` of a split: a class hue over two gradients and three soft blobs,
// with +-16 levels of noise.
std::vector<uint8_t> draw(const SyntheticFolderOptions& o, int cls, uint64_t stream, int& w,
                          int& h) {
  auto u = [&](uint64_t i) { return uniform01(philox_word(o.seed, stream, i)); };
  w = std::max(8, static_cast<int>(std::lround(o.width * (0.75 + 0.5 * u(0)))));
  h = std::max(8, static_cast<int>(std::lround(o.height * (0.75 + 0.5 * u(1)))));
  const double hue = 6.0 * (cls + 0.25 * u(2)) / o.classes;
  const double k = hue - 2.0 * std::floor(hue / 2.0) - 1.0;
  const double x = 1.0 - std::abs(k);
  const double rgb_by_sector[6][3] = {{1, x, 0}, {x, 1, 0}, {0, 1, x},
                                      {0, x, 1}, {x, 0, 1}, {1, 0, x}};
  const double* base = rgb_by_sector[static_cast<int>(hue) % 6];
  double bx[3], by[3], br[3];
  for (int b = 0; b < 3; ++b) {
    bx[b] = u(3 + 3 * b) * w;
    by[b] = u(4 + 3 * b) * h;
    br[b] = (0.1 + 0.2 * u(5 + 3 * b)) * std::min(w, h);
  }
  std::vector<uint8_t> img(static_cast<size_t>(w) * h * 3);
  for (int yy = 0; yy < h; ++yy) {
    for (int xx = 0; xx < w; ++xx) {
      double light = 0.35 + 0.35 * xx / w + 0.2 * yy / h;
      for (int b = 0; b < 3; ++b) {
        const double dx = xx - bx[b], dy = yy - by[b];
        light += 0.3 * std::exp(-(dx * dx + dy * dy) / (2 * br[b] * br[b])) * (b == 1 ? -1 : 1);
      }
      const uint32_t noise = philox_word(o.seed, stream, 16 + static_cast<uint64_t>(yy) * w + xx);
      uint8_t* px = img.data() + (static_cast<size_t>(yy) * w + xx) * 3;
      for (int ch = 0; ch < 3; ++ch) {
        const double n = static_cast<double>((noise >> (8 * ch)) & 0xff) / 8.0 - 16.0;
        const double v = 255.0 * light * (0.25 + 0.75 * base[ch]) + n;
        px[ch] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return img;
}

}  // namespace

uint64_t write_synthetic_folder(const std::string& root, const SyntheticFolderOptions& o) {
  TG_CHECK(o.classes >= 1 && o.classes <= 10000, "synthetic folder: classes = ", o.classes,
           " (expected 1 .. 10000)");
  TG_CHECK(o.train_per_class >= 0 && o.train_per_class <= 1000000 && o.val_per_class >= 0 &&
               o.val_per_class <= 1000000,
           "synthetic folder: images per class ", o.train_per_class, " / ", o.val_per_class,
           " (expected 0 .. 1000000)");
  TG_CHECK(o.width >= 8 && o.width <= 8192 && o.height >= 8 && o.height <= 8192,
           "synthetic folder: size ", o.width, " x ", o.height, " (expected 8 .. 8192 each)");
  TG_CHECK(o.quality >= 1 && o.quality <= 100, "synthetic folder: quality = ", o.quality,
           " (expected 1 .. 100)");
  uint64_t bytes = 0;
  char name[64];
  for (int split = 0; split < 2; ++split) {
    const int count = split == 0 ? o.train_per_class : o.val_per_class;
    for (int c = 0; c < o.classes; ++c) {
      std::snprintf(name, sizeof name, "class%04d", c);
      const fs::path dir = fs::path(root) / (split == 0 ? "train" : "val") / name;
      std::error_code ec;
      fs::create_directories(dir, ec);
      TG_CHECK(!ec, "synthetic folder: cannot create ", dir.string(), ": ", ec.message());
      for (int i = 0; i < count; ++i) {
        const uint64_t stream = (static_cast<uint64_t>(split) << 62) |
                                (static_cast<uint64_t>(c) << 32) | static_cast<uint64_t>(i);
        int w = 0, h = 0;
        const std::vector<uint8_t> rgb = draw(o, c, stream, w, h);  // sets w, h
        const std::vector<uint8_t> jpeg = encode(rgb, w, h, o.quality);
        std::snprintf(name, sizeof name, "img%07d.jpg", i);
        const std::string path = (dir / name).string();
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(jpeg.data()),
                static_cast<std::streamsize>(jpeg.size()));
        f.close();
        TG_CHECK(f.good(), "synthetic folder: cannot write ", path, ": ", std::strerror(errno));
        bytes += jpeg.size();
      }
    }
  }
  return bytes;
}

}  // namespace tg::data
