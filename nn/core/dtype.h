// Element types. f32 is the compute type; the integer types carry labels, masks, argmax
// indices and (later) packed ternary codes and wire buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nn/core/error.h"

namespace tg {

enum class DType : uint8_t { f32, i8, u8, i32, i64, u64 };

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i8:
      return 1;
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u64:
      return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u64:
      return "u64";
  }
  return "?";
}

// Parses "f32", "i8", ...; throws naming the string and the known names.
DType parse_dtype(std::string_view s);

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<uint64_t> {
  static constexpr DType value = DType::u64;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace tg
