// Minimal JSON for the CLI's machine-readable output (metrics.jsonl, summary.json, eval) and for
// reading it back (resume, tests). Writer: an ordered object builder with proper escaping and
// shortest round-trip doubles (non-finite numbers are written as null). Parser: RFC 8259 values
// into a small variant tree; throws tg::Error with the byte offset on malformed input.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tg::json {

// Builds one JSON object, keys in insertion order.
class Object {
 public:
  Object& add(std::string_view key, std::string_view value);
  Object& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  Object& add(std::string_view key, const std::string& value) {
    return add(key, std::string_view(value));
  }
  Object& add(std::string_view key, double value);
  Object& add(std::string_view key, int64_t value);
  Object& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  Object& add(std::string_view key, uint64_t value);
  Object& add(std::string_view key, bool value);
  Object& add_raw(std::string_view key, std::string_view json);  // value already JSON
  std::string str() const;                                       // "{...}" on one line

 private:
  std::string body_;
};

std::string quote(std::string_view s);  // JSON string literal with escapes
std::string number(double v);           // shortest round-trip; "null" if not finite
// "1e-08" -> "1e-8", "2.5e+20" -> "2.5e+20": drops leading zeros of an exponent (to_chars pads
// it to two digits); text without an exponent is returned unchanged.
std::string trim_exponent(std::string s);

struct Value {
  enum class Type { null, boolean, number, string, array, object } type = Type::null;
  bool b = false;
  double num = 0.0;
  std::string str;
  std::vector<Value> arr;
  std::vector<std::pair<std::string, Value>> obj;  // in document order

  // Declared here and defaulted in json.cpp, where Value is complete: clang 14 with C++20's
  // constexpr vector refuses to instantiate them inline for a vector of pair<string, Value>.
  Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();

  bool has(std::string_view key) const;
  const Value& operator[](std::string_view key) const;  // throws if missing / not an object
  double as_number() const;                             // throws unless number
  const std::string& as_string() const;
};

Value parse(std::string_view text);  // whole text must be one value (+ whitespace)

}  // namespace tg::json
