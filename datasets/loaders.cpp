// Helpers shared by the dataset loaders (see loaders.h).
#include "datasets/loaders.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "nn/core/error.h"

namespace tg::data::detail {

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> bytes;
  read_file(path, bytes);
  return bytes;
}

void read_file(const std::string& path, std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TG_CHECK(f != nullptr, path, ": cannot open (", std::strerror(errno), ")");
  bytes.clear();
  // Read in pieces until the end rather than trusting the size seen at open: the file may be
  // growing or shrinking under us.
  size_t got;
  do {
    const size_t have = bytes.size();
    bytes.resize(std::max<size_t>(have * 2, have + (size_t{1} << 16)));
    got = std::fread(bytes.data() + have, 1, bytes.size() - have, f);
    bytes.resize(have + got);
  } while (got > 0);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  TG_CHECK(!failed, path, ": read error after ", bytes.size(), " bytes");
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

void check_indices(std::span<const int64_t> indices, int64_t size, const std::string& what) {
  for (size_t k = 0; k < indices.size(); ++k) {
    TG_CHECK(indices[k] >= 0 && indices[k] < size, what, ": example index ", indices[k],
             " at position ", k, " is out of range (expected 0 <= index < ", size, ")");
  }
}

void standardize(float* x, int64_t n) {
  double sum = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    sum_sq += d * d;
  }
  const double std_dev = std::sqrt(sum_sq / static_cast<double>(n));
  const double scale = 1.0 / std::max(std_dev, 1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((x[i] - mean) * scale);
}

}  // namespace tg::data::detail
