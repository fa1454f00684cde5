// Shared by the fuzz targets (tests/fuzz/*_fuzz.cpp). Each target defines LLVMFuzzerTestOneInput:
// built with clang and -DTG_FUZZ=ON it is a libFuzzer fuzzer; built with the default compiler it
// is linked with replay_main.cpp into a test that runs every file of its seed corpus
// (tests/fuzz/corpus/<name>/). A tg::Error is the expected answer to bad bytes and is caught
// here; anything else (a crash, a sanitizer report, another exception) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/core/error.h"

namespace tg::fuzz {

// Runs f, swallowing tg::Error only.
template <typename F>
void expect_errors(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

// Reads the input front to back; past the end every read is 0 / empty.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint8_t byte() {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{byte()} << (8 * i);
    return v;
  }
  float f32() {
    const uint32_t b = u32();
    float f;
    static_assert(sizeof(f) == sizeof(b));
    __builtin_memcpy(&f, &b, sizeof(f));
    return f;
  }
  // Up to n bytes.
  std::vector<uint8_t> bytes(size_t n) {
    n = n < left_ ? n : left_;
    std::vector<uint8_t> out(p_, p_ + n);
    p_ += n;
    left_ -= n;
    return out;
  }
  std::vector<uint8_t> rest() { return bytes(left_); }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

// Splits at '\0' bytes: "a\0b\0c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0)
      parts.emplace_back();
    else
      parts.back() += static_cast<char>(data[i]);
  }
  return parts;
}

}  // namespace tg::fuzz
