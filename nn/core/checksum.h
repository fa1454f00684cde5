// SHA-256 (FIPS 180-4) and MD5 (RFC 1321) digests, for checkpoint checksums, params_sha256 and
// verifying downloaded archives. Incremental: update() any number of times, then hex().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tg {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // Finishes and returns the 64-character lowercase hex digest; the object is then reset.
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

class Md5 {
 public:
  Md5();
  void update(const void* data, size_t n);
  std::string hex();  // 32-character lowercase hex; then reset

 private:
  void block(const uint8_t* p);
  uint32_t h_[4];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
std::string md5_hex(const void* data, size_t n);
// Digest of a whole file; throws naming the file if it cannot be read.
std::string sha256_file(const std::string& path);
std::string md5_file(const std::string& path);

}  // namespace tg
