// Digests and their hex: SHA-256 (checkpoint checksums, params_sha256), MD5 (verifying
// downloaded archives against their published sums), FNV-1a (cheap 64-bit fingerprints of
// in-process data: call contexts, message headers), HMAC-SHA256 (the job secret's rendezvous
// entries and message headers, comm/secret.h), and the one lowercase hex encoder.
// SHA-256 and MD5 are OpenSSL's (libcrypto's EVP interface: its SHA-NI / AVX2 code runs at
// 1-2 GB/s, where a portable implementation manages a few hundred MB/s); FNV-1a is four lines.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tg {

// Lowercase hex of n bytes: "00ff..." (2n characters).
std::string to_hex(const void* bytes, size_t n);

// FNV-1a, 64 bits, over the bytes of `bytes`, continuing from h (default: the FNV offset
// basis), so a fingerprint of several pieces is fnv1a64(b, fnv1a64(a)).
inline constexpr uint64_t kFnvOffset = 14695981039346656037ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;
inline uint64_t fnv1a64(std::string_view bytes, uint64_t h = kFnvOffset) {
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * kFnvPrime;
  return h;
}

// An incremental digest: update() any number of times, then hex(), which finishes, returns the
// lowercase hex digest and resets the object. Throws tg::Error if OpenSSL fails (out of memory).
class Digest {
 public:
  enum class Kind { sha256, md5 };
  explicit Digest(Kind kind);
  ~Digest();
  Digest(Digest&&) noexcept;
  Digest& operator=(Digest&&) noexcept;
  void update(const void* data, size_t n);
  std::string hex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Sha256 : public Digest {
 public:
  Sha256() : Digest(Kind::sha256) {}
};
class Md5 : public Digest {
 public:
  Md5() : Digest(Kind::md5) {}
};

// HMAC-SHA256 (RFC 2104) of data under key (OpenSSL's one-shot HMAC).
using Mac256 = std::array<uint8_t, 32>;
Mac256 hmac_sha256(const void* key, size_t key_len, const void* data, size_t n);
// HMAC-SHA256 under one key, for many short messages (the transport's headers): the key's inner
// and outer SHA-256 states are computed once, so each mac() is two compressions and two context
// copies, without the one-shot's key schedule and algorithm lookup. mac() may run on several
// threads at once. Equal to hmac_sha256 for every key and message.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t key_len);
  ~HmacSha256();
  HmacSha256(HmacSha256&&) noexcept;
  HmacSha256& operator=(HmacSha256&&) noexcept;
  Mac256 mac(const void* data, size_t n) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// Whether a[0 .. n) == b[0 .. n), in time that does not depend on where they differ (for MACs).
bool equal_constant_time(const void* a, const void* b, size_t n);

std::string sha256_hex(const void* data, size_t n);
std::string md5_hex(const void* data, size_t n);
// Digest of a whole file; throws naming the file if it cannot be read.
std::string sha256_file(const std::string& path);
std::string md5_file(const std::string& path);

}  // namespace tg
