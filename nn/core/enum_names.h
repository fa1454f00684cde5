// Categorical options as enums with one name table each: the library that owns an option declares
// the enum and its table (e.g. tern::kMethods in terngrad/compressor.h), text is parsed into the
// enum once, at the edge (the config layer), and the config's allowed values and `terngrad config
// --reference` are read from the same table.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "nn/core/error.h"

namespace tg {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

template <class E, size_t N>
using EnumTable = std::array<EnumName<E>, N>;

// The names in table order.
template <class E, size_t N>
std::vector<std::string_view> enum_names(const EnumTable<E, N>& table) {
  std::vector<std::string_view> out;
  for (const auto& e : table) out.push_back(e.name);
  return out;
}

// "a, b, c", for messages.
template <class E, size_t N>
std::string enum_list(const EnumTable<E, N>& table) {
  std::string out;
  for (const auto& e : table) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

template <class E, size_t N>
std::string_view enum_name(const EnumTable<E, N>& table, E value) {
  for (const auto& e : table) {
    if (e.value == value) return e.name;
  }
  TG_THROW("enum value ", static_cast<long long>(value), " has no name");
}

// Throws "<what>: unknown value '<text>' (known: ...)".
template <class E, size_t N>
E parse_enum(const EnumTable<E, N>& table, std::string_view text, std::string_view what) {
  for (const auto& e : table) {
    if (e.name == text) return e.value;
  }
  TG_THROW(what, ": unknown value '", text, "' (known: ", enum_list(table), ")");
}

}  // namespace tg
