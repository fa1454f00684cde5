// IDX files (LeCun's format for MNIST; Fashion-MNIST uses the same): a big-endian int32 header
// (magic = 0x0000_08_NN where 08 = unsigned byte and NN = number of dimensions, then one int32
// per dimension) followed by the unsigned bytes. Image files are idx3 (magic 2051, N x R x C),
// label files idx1 (magic 2049, N). Files may be raw or gzipped (detected by the gzip magic
// 1f 8b, whatever the file name), and are found as `base` or `base.gz` in the data directory.
//
// The whole split stays in memory as uint8 (60000 x 784 = 47 MB for MNIST train); load()
// converts to f32 2 * (x / 255 - 0.5) through a 256-entry table (the reference code's LeNet inputs
// in
// [-1, 1], no augmentation).
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "datasets/loaders.h"
#include "nn/core/checked.h"
#include "nn/core/error.h"

namespace tg::data::detail {
namespace {

constexpr uint32_t kImageMagic = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr uint32_t kLabelMagic = 2049;  // 0x00000801: unsigned byte, 1 dimension
constexpr int64_t kSide = 28;           // MNIST and Fashion-MNIST images are 28 x 28
constexpr int64_t kClasses = 10;

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// `dir/base` or `dir/base.gz`, whichever exists.
std::string find_idx_file(const std::string& dataset, const std::string& dir,
                          const std::string& base) {
  const std::string plain = join_path(dir, base), gz = plain + ".gz";
  if (file_exists(plain)) return plain;
  if (file_exists(gz)) return gz;
  TG_THROW(dataset, ": missing file: neither ", plain, " nor ", gz,
           " exists (expected the IDX files of the ", dataset, " distribution in data.path)");
}

// Checks the magic and dimensions of a header of `ndim` dimensions (`have` bytes of it present);
// returns the dimensions and sets *total to the file's exact size (header + data).
std::vector<int64_t> parse_header(const std::string& file, const uint8_t* bytes, size_t have,
                                  uint32_t magic, int ndim, uint64_t* total) {
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  TG_CHECK(have >= 4, file, ": truncated: expected at least ", header,
           " header bytes after decompression, got ", have);
  const uint32_t got_magic = be32(bytes);
  TG_CHECK(got_magic == magic, file, ": bad magic ", got_magic, " (expected ", magic,
           magic == kImageMagic ? ", an IDX3 unsigned-byte image file"
                                : ", an IDX1 unsigned-byte label file",
           ")");
  TG_CHECK(have >= header, file, ": truncated: expected at least ", header,
           " header bytes after decompression, got ", have);
  std::vector<int64_t> dims(ndim);
  uint64_t expected = header;
  uint64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    dims[d] = static_cast<int64_t>(be32(bytes + 4 + 4 * d));
    TG_CHECK(dims[d] > 0 && dims[d] < (int64_t{1} << 31), file, ": dimension ", d, " is ",
             static_cast<int32_t>(dims[d]), " (expected a positive size)");
    count = checked_mul<uint64_t>(count, static_cast<uint64_t>(dims[d]),
                                  file + ": element count of the header's dimensions");
  }
  expected = checked_add<uint64_t>(expected, count, file + ": header + data bytes");
  TG_CHECK(expected <= uint64_t{1} << 62, file, ": header declares ", expected,
           " bytes (expected a plausible IDX file)");
  *total = expected;
  return dims;
}

void check_size(const std::string& file, uint64_t got, uint64_t want) {
  TG_CHECK(got >= want, file, ": truncated: expected ", want, " bytes after decompression, got ",
           got);
  TG_CHECK(got == want, file, ": ", got - want, " bytes of trailing garbage: expected exactly ",
           want, " bytes after decompression, got ", got);
}

// gzip: inflate every member (gunzip accepts concatenated members; so do we) in fixed chunks,
// reading the header as soon as it is out and stopping as soon as the output passes the size
// it declares: a small file of a valid header and gigabytes of zeros fails after one chunk past
// the data, with memory bounded by the data's size.
IdxArray inflate_idx(std::span<const uint8_t> raw, const std::string& file, uint32_t magic,
                     int ndim, const std::function<void(const std::vector<int64_t>&)>& check_dims) {
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  IdxArray out;
  std::vector<uint8_t> head;  // the header bytes, then out.data
  uint64_t total = 0;         // header + data, once the header is known
  uint64_t produced = 0;
  z_stream zs{};
  TG_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, file, ": zlib inflateInit2 failed");
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  zs.next_in = const_cast<uint8_t*>(raw.data());
  // zlib counts input in 32-bit uInt: feed at most 1 GiB at a time.
  constexpr size_t kMaxIn = size_t{1} << 30;
  size_t left = raw.size();
  auto feed = [&] {
    const size_t n = std::min(left, kMaxIn);
    zs.avail_in = static_cast<uInt>(n);
    left -= n;
  };
  feed();
  std::array<uint8_t, 1 << 16> buf;
  int rc = Z_OK;
  while (true) {
    zs.next_out = buf.data();
    zs.avail_out = static_cast<uInt>(buf.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    const size_t got = buf.size() - zs.avail_out;
    size_t used = 0;
    if (total == 0 && got > 0) {  // still reading the header
      used = std::min(got, header - head.size());
      head.insert(head.end(), buf.data(), buf.data() + used);
      if (head.size() == header || (head.size() >= 4 && be32(head.data()) != magic)) {
        out.dims = parse_header(file, head.data(), head.size(), magic, ndim, &total);
        if (check_dims) check_dims(out.dims);
      }
    }
    produced += got;
    TG_CHECK(total == 0 || produced <= total, file, ": more than ", total,
             " bytes after decompression (the header declares exactly ", total,
             "; trailing data or a decompression bomb)");
    if (got > used) {
      const size_t n = got - used;
      checked_alloc(file + " data", out.data.size() + n,
                    [&] { out.data.insert(out.data.end(), buf.data() + used, buf.data() + got); });
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0 && left == 0) break;
      if (zs.avail_in == 0) feed();
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (rc != Z_OK) break;
    if (zs.avail_in == 0 && left > 0) feed();
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      rc = Z_BUF_ERROR;  // input exhausted before the end of the gzip stream
      break;
    }
  }
  const std::string msg = zs.msg ? zs.msg : "";
  const size_t consumed = raw.size() - left - zs.avail_in;
  if (rc == Z_BUF_ERROR) {
    TG_THROW(file, ": truncated gzip stream (ended after ", raw.size(),
             " compressed bytes; expected a complete gzip file)");
  }
  TG_CHECK(rc == Z_STREAM_END, file, ": corrupt gzip data near compressed byte ", consumed, " (",
           msg.empty() ? "zlib error " + std::to_string(rc) : msg, ")");
  if (total == 0) parse_header(file, head.data(), head.size(), magic, ndim, &total);
  check_size(file, produced, total);
  return out;
}

class IdxDataset final : public Dataset {
 public:
  IdxDataset(const std::string& name, const std::string& dir, Split split) {
    const std::string prefix = split == Split::train ? "train" : "t10k";
    const std::string image_file = find_idx_file(name, dir, prefix + "-images-idx3-ubyte");
    const std::string label_file = find_idx_file(name, dir, prefix + "-labels-idx1-ubyte");

    IdxArray images = parse_idx(
        read_file(image_file), image_file, kImageMagic, 3, [&](const std::vector<int64_t>& idims) {
          TG_CHECK(idims[1] == kSide && idims[2] == kSide, image_file, ": images are ", idims[1],
                   "x", idims[2], " (expected ", kSide, "x", kSide, " for ", name, ")");
        });
    const std::vector<int64_t>& idims = images.dims;
    IdxArray labels = parse_idx(read_file(label_file), label_file, kLabelMagic, 1, {});
    const std::vector<int64_t>& ldims = labels.dims;
    TG_CHECK(ldims[0] == idims[0], label_file, ": ", ldims[0], " labels but ", image_file, " has ",
             idims[0], " images (expected one label per image)");
    for (int64_t i = 0; i < ldims[0]; ++i) {
      const uint8_t y = labels.data[i];
      TG_CHECK(y < kClasses, label_file, ": label ", int{y}, " at index ", i,
               " is out of range (expected 0..", kClasses - 1, ")");
    }
    pixels_ = std::move(images.data);
    labels_ = std::move(labels.data);
    for (int v = 0; v < 256; ++v) to_float_[v] = 2.0f * (static_cast<float>(v) / 255.0f - 0.5f);

    info_.name = name;
    info_.path = dir;
    info_.split = split;
    info_.size = idims[0];
    info_.channels = 1;
    info_.height = info_.width = kSide;
    info_.num_classes = kClasses;
  }

  void load(std::span<const int64_t> indices, bool augment, uint64_t aug_seed, uint64_t key_base,
            float* images, int32_t* labels) const override {
    // No augmentation for IDX datasets (as in the reference code): `augment` and the keys are
    // unused.
    check_indices(indices, info_.size, info_.name);
    constexpr int64_t kPixels = kSide * kSide;
    for (size_t k = 0; k < indices.size(); ++k) {
      const uint8_t* src = pixels_.data() + indices[k] * kPixels;
      float* dst = images + static_cast<int64_t>(k) * kPixels;
      for (int64_t p = 0; p < kPixels; ++p) dst[p] = to_float_[src[p]];
      labels[k] = labels_[indices[k]];
    }
  }

 private:
  std::vector<uint8_t> pixels_;  // N x 28 x 28
  std::vector<uint8_t> labels_;  // N
  float to_float_[256];
};

void check_image_size(const std::string& name, const DataOptions& options) {
  TG_CHECK(options.image_size == 0 || options.image_size == kSide, name, " images are ", kSide, "x",
           kSide, ": data.image_size must be 0 or ", kSide, ", got ", options.image_size);
}

}  // namespace

IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& file, uint32_t magic, int ndim,
                   const std::function<void(const std::vector<int64_t>&)>& check_dims) {
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b)
    return inflate_idx(bytes, file, magic, ndim, check_dims);
  IdxArray out;
  uint64_t total = 0;
  out.dims = parse_header(file, bytes.data(), bytes.size(), magic, ndim, &total);
  if (check_dims) check_dims(out.dims);
  check_size(file, bytes.size(), total);
  // Drop the header in place rather than copying 47 MB.
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<int64_t>(4 + 4 * ndim));
  out.data = std::move(bytes);
  return out;
}

std::unique_ptr<Dataset> open_mnist(const DataOptions& options, Split split) {
  TG_CHECK(!options.path.empty(),
           "mnist: no data.path given (expected the directory with train-images-idx3-ubyte[.gz] "
           "etc., e.g. data.path = \"../shared/data/mnist\")");
  check_image_size("mnist", options);
  return std::make_unique<IdxDataset>("mnist", options.path, split);
}

std::unique_ptr<Dataset> open_fashion_mnist(const DataOptions& options, Split split) {
  TG_CHECK(!options.path.empty(),
           "fashion-mnist: no data.path given (expected the directory with "
           "train-images-idx3-ubyte[.gz] etc.)");
  check_image_size("fashion-mnist", options);
  return std::make_unique<IdxDataset>("fashion-mnist", options.path, split);
}

}  // namespace tg::data::detail
