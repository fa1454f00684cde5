// The digests of nn/core/hash.h over OpenSSL's EVP interface (one EVP_MD_CTX per Digest, reused
// after each hex()), the hex encoder, and whole-file digests read in 1 MiB pieces.
#include "nn/core/hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "nn/core/error.h"

namespace tg {

std::string to_hex(const void* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(bytes);
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

struct Digest::Impl {
  const EVP_MD* md = nullptr;
  EVP_MD_CTX* ctx = nullptr;
  ~Impl() { EVP_MD_CTX_free(ctx); }
  void init() {
    TG_CHECK(EVP_DigestInit_ex(ctx, md, nullptr) == 1, "OpenSSL: cannot start a ",
             EVP_MD_get0_name(md), " digest");
  }
};

Digest::Digest(Kind kind) : impl_(std::make_unique<Impl>()) {
  impl_->md = kind == Kind::sha256 ? EVP_sha256() : EVP_md5();
  impl_->ctx = EVP_MD_CTX_new();
  TG_CHECK(impl_->md != nullptr && impl_->ctx != nullptr,
           "OpenSSL: cannot create a digest context (out of memory?)");
  impl_->init();
}

Digest::~Digest() = default;
Digest::Digest(Digest&&) noexcept = default;
Digest& Digest::operator=(Digest&&) noexcept = default;

void Digest::update(const void* data, size_t n) {
  if (n == 0) return;
  TG_CHECK(EVP_DigestUpdate(impl_->ctx, data, n) == 1, "OpenSSL: digest update failed");
}

std::string Digest::hex() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  TG_CHECK(EVP_DigestFinal_ex(impl_->ctx, out, &len) == 1, "OpenSSL: digest final failed");
  impl_->init();
  return to_hex(out, len);
}

namespace {

template <typename Hasher>
std::string file_digest(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  TG_CHECK(f, "cannot open '", path, "' for checksumming: ", std::strerror(errno));
  Hasher h;
  std::vector<unsigned char> chunk(1 << 20);
  size_t got;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), f.get())) > 0)
    h.update(chunk.data(), got);
  TG_CHECK(!std::ferror(f.get()), "read error while checksumming '", path, "'");
  return h.hex();
}

}  // namespace

Mac256 hmac_sha256(const void* key, size_t key_len, const void* data, size_t n) {
  Mac256 out{};
  unsigned int len = 0;
  TG_CHECK(HMAC(EVP_sha256(), key, static_cast<int>(key_len),
                static_cast<const unsigned char*>(data), n, out.data(), &len) != nullptr &&
               len == out.size(),
           "OpenSSL: HMAC-SHA256 failed");
  return out;
}

struct HmacSha256::Impl {
  EVP_MD_CTX* inner = nullptr;  // SHA-256 after absorbing key ^ ipad
  EVP_MD_CTX* outer = nullptr;  // ... key ^ opad
  ~Impl() {
    EVP_MD_CTX_free(inner);
    EVP_MD_CTX_free(outer);
  }
};

HmacSha256::HmacSha256(const void* key, size_t key_len) : impl_(std::make_unique<Impl>()) {
  constexpr size_t kBlock = 64;  // SHA-256's block
  unsigned char k[kBlock] = {};
  if (key_len > kBlock) {  // RFC 2104: a long key is hashed first
    unsigned int len = 0;
    TG_CHECK(EVP_Digest(key, key_len, k, &len, EVP_sha256(), nullptr) == 1,
             "OpenSSL: SHA-256 failed");
  } else if (key_len > 0) {
    std::memcpy(k, key, key_len);
  }
  unsigned char pad[kBlock];
  impl_->inner = EVP_MD_CTX_new();
  impl_->outer = EVP_MD_CTX_new();
  TG_CHECK(impl_->inner != nullptr && impl_->outer != nullptr,
           "OpenSSL: cannot create a digest context (out of memory?)");
  for (auto [ctx, x] : {std::pair{impl_->inner, 0x36}, std::pair{impl_->outer, 0x5c}}) {
    for (size_t i = 0; i < kBlock; ++i) pad[i] = static_cast<unsigned char>(k[i] ^ x);
    TG_CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
                 EVP_DigestUpdate(ctx, pad, kBlock) == 1,
             "OpenSSL: SHA-256 failed");
  }
  OPENSSL_cleanse(k, sizeof k);
  OPENSSL_cleanse(pad, sizeof pad);
}

HmacSha256::~HmacSha256() = default;
HmacSha256::HmacSha256(HmacSha256&&) noexcept = default;
HmacSha256& HmacSha256::operator=(HmacSha256&&) noexcept = default;

Mac256 HmacSha256::mac(const void* data, size_t n) const {
  // One scratch context per thread, reused: no allocation per MAC.
  thread_local std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> tmp(EVP_MD_CTX_new(),
                                                                      &EVP_MD_CTX_free);
  TG_CHECK(tmp != nullptr, "OpenSSL: cannot create a digest context (out of memory?)");
  Mac256 inner_hash{}, out{};
  unsigned int len = 0;
  TG_CHECK(EVP_MD_CTX_copy_ex(tmp.get(), impl_->inner) == 1 &&
               EVP_DigestUpdate(tmp.get(), data, n) == 1 &&
               EVP_DigestFinal_ex(tmp.get(), inner_hash.data(), &len) == 1 &&
               EVP_MD_CTX_copy_ex(tmp.get(), impl_->outer) == 1 &&
               EVP_DigestUpdate(tmp.get(), inner_hash.data(), inner_hash.size()) == 1 &&
               EVP_DigestFinal_ex(tmp.get(), out.data(), &len) == 1,
           "OpenSSL: HMAC-SHA256 failed");
  return out;
}

bool equal_constant_time(const void* a, const void* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

std::string md5_hex(const void* data, size_t n) {
  Md5 h;
  h.update(data, n);
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  return file_digest<Sha256>(path);
}
std::string md5_file(const std::string& path) {
  return file_digest<Md5>(path);
}

}  // namespace tg
