// Scratch files for tests: a fresh temp directory removed on destruction, and whole-file
// read/write helpers for bytes and text. Header-only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg::testing {

// A fresh empty directory under the system temp dir, unique via mkdtemp (parallel ctest runs never
// share one), named after the running gtest test when there is one; removed with everything in it
// by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string name = "tg_";
    if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
      // Parameterized names carry '/'; long ones are cut to keep well under NAME_MAX.
      std::string test = std::string(info->test_suite_name()) + "_" + info->name();
      if (test.size() > 96) test.resize(96);
      for (char& c : test) {
        const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!keep) c = '_';
      }
      name += test + "_";
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / (name + "XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("TempDir: mkdtemp failed for " + tmpl);
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // The path of `name` (a file or a relative path) inside the directory.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `bytes` to `path` (replacing it), creating the parent directories; fails the test if the
// write does not succeed.
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline void write_text(const std::string& path, const std::string& text) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// The whole file; empty if it cannot be read.
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace tg::testing
