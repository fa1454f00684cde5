// Checked arithmetic for sizes, offsets and counts that come from outside the program: files
// (checkpoints, IDX, CIFAR-10, JPEG headers), flags, configs and peers. The one helper every
// parser uses, so a hostile number becomes a tg::Error naming what was being computed instead of
// a wrapped bounds check, a signed overflow (undefined behaviour) or a huge allocation.
//
//   checked_add / checked_mul   a + b, a * b in T, or throw "<what>: a * b overflows <T>"
//   checked_cast<To>(v, what)   an integer narrowed or re-signed, or throw if it does not fit
//   checked_integer<T>(x, what) a double (a JSON number) that must be an integer of T: integral,
//                               finite and in range (casting one that is not is undefined)
//   checked_numel(shape, what)  the product of non-negative dimensions
//   checked_alloc(what, bytes, f) runs f (which allocates about `bytes`), turning bad_alloc and
//                               length_error into "cannot allocate N bytes for <what>"
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

#include "nn/core/error.h"
#include "nn/core/shape.h"

namespace tg {

namespace detail {
template <std::integral T>
const char* int_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1) return "int8";
    if constexpr (sizeof(T) == 2) return "int16";
    if constexpr (sizeof(T) == 4) return "int32";
    return "int64";
  } else {
    if constexpr (sizeof(T) == 1) return "uint8";
    if constexpr (sizeof(T) == 2) return "uint16";
    if constexpr (sizeof(T) == 4) return "uint32";
    return "uint64";
  }
}
// Streams as a number, not a character, for 8-bit types.
template <std::integral T>
auto printable(T v) {
  if constexpr (std::is_signed_v<T>)
    return static_cast<long long>(v);
  else
    return static_cast<unsigned long long>(v);
}
}  // namespace detail

template <std::integral T>
T checked_add(T a, T b, std::string_view what) {
  T r;
  TG_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", detail::printable(a), " + ",
           detail::printable(b), " overflows ", detail::int_type_name<T>());
  return r;
}

template <std::integral T>
T checked_mul(T a, T b, std::string_view what) {
  T r;
  TG_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", detail::printable(a), " * ",
           detail::printable(b), " overflows ", detail::int_type_name<T>());
  return r;
}

template <std::integral To, std::integral From>
To checked_cast(From v, std::string_view what) {
  TG_CHECK(std::in_range<To>(v), what, ": ", detail::printable(v), " does not fit in ",
           detail::int_type_name<To>());
  return static_cast<To>(v);
}

template <std::integral T>
T checked_integer(double x, std::string_view what) {
  // 2^63 and 2^64 are exact doubles; every double below them converts without overflow.
  constexpr double hi = std::is_signed_v<T> && sizeof(T) == 8 ? 0x1p63
                        : sizeof(T) == 8                      ? 0x1p64
                                         : double(std::numeric_limits<T>::max()) + 1;
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  TG_CHECK(std::isfinite(x) && x == std::floor(x), what, ": ", x, " is not an integer");
  TG_CHECK(x >= lo && x < hi, what, ": ", x, " is out of range for ", detail::int_type_name<T>());
  return static_cast<T>(x);
}

// The number of elements of `s`; throws if a dimension is negative or the product overflows.
inline int64_t checked_numel(const Shape& s, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : s) {
    TG_CHECK(d >= 0, what, ": negative dimension in shape ", shape_str(s));
    TG_CHECK(!__builtin_mul_overflow(n, d, &n), what, ": shape ", shape_str(s),
             " has more elements than int64 can count");
  }
  return n;
}

template <typename F>
decltype(auto) checked_alloc(std::string_view what, uint64_t bytes, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {
    TG_THROW("cannot allocate ", bytes, " bytes for ", what, " (out of memory)");
  } catch (const std::length_error&) {
    TG_THROW("cannot allocate ", bytes, " bytes for ", what, " (larger than a vector can hold)");
  }
}

}  // namespace tg
