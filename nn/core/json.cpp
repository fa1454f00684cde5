// JSON writer and parser for the CLI (see json.h). The writer emits compact one-line objects; the
// parser is a strict RFC 8259 recursive-descent parser with a nesting limit, reporting the byte
// offset of the first problem. Strings are UTF-8: bytes >= 0x80 pass through both ways
// unchanged; \uXXXX escapes (with surrogate pairs) are decoded into UTF-8.
#include "nn/core/json.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "nn/core/error.h"

namespace tg::json {

Value::Value() = default;
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;
Value::~Value() = default;

// ---------------------------------------------------------------------------------------------
// Writer

std::string quote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(ch);  // printable ASCII and UTF-8 bytes pass through
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  // Shortest representation that parses back to the same double; always valid JSON
  // ("1e-8", "0.5", "-3", never "inf" or a leading '+').
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  TG_CHECK(res.ec == std::errc(), "json::number: to_chars failed");
  return trim_exponent(std::string(buf, res.ptr));
}

std::string trim_exponent(std::string s) {
  const size_t e = s.find_first_of("eE");
  if (e == std::string::npos) return s;
  size_t digits = e + 1;
  if (digits < s.size() && (s[digits] == '-' || s[digits] == '+')) ++digits;
  size_t first = digits;
  while (first + 1 < s.size() && s[first] == '0') ++first;
  return s.erase(digits, first - digits);
}

namespace {
template <typename Int>
std::string integer_text(Int v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}
}  // namespace

Object& Object::add_raw(std::string_view key, std::string_view json) {
  if (!body_.empty()) body_.push_back(',');
  body_ += quote(key);
  body_.push_back(':');
  body_ += json;
  return *this;
}

Object& Object::add(std::string_view key, std::string_view value) {
  return add_raw(key, quote(value));
}
Object& Object::add(std::string_view key, double value) {
  return add_raw(key, number(value));
}
Object& Object::add(std::string_view key, int64_t value) {
  return add_raw(key, integer_text(value));
}
Object& Object::add(std::string_view key, uint64_t value) {
  return add_raw(key, integer_text(value));
}
Object& Object::add(std::string_view key, bool value) {
  return add_raw(key, value ? "true" : "false");
}

std::string Object::str() const {
  return "{" + body_ + "}";
}

// ---------------------------------------------------------------------------------------------
// Value accessors

namespace {
const char* type_name(Value::Type t) {
  switch (t) {
    case Value::Type::null:
      return "null";
    case Value::Type::boolean:
      return "boolean";
    case Value::Type::number:
      return "number";
    case Value::Type::string:
      return "string";
    case Value::Type::array:
      return "array";
    case Value::Type::object:
      return "object";
  }
  return "?";
}
}  // namespace

bool Value::has(std::string_view key) const {
  if (type != Type::object) return false;
  for (const auto& [k, v] : obj) {
    if (k == key) return true;
  }
  return false;
}

const Value& Value::operator[](std::string_view key) const {
  TG_CHECK(type == Type::object, "JSON: cannot look up key \"", key, "\" in a ", type_name(type),
           ", expected an object");
  for (const auto& [k, v] : obj) {
    if (k == key) return v;  // first occurrence wins for duplicate keys
  }
  TG_THROW("JSON: object has no key \"", key, "\"");
}

double Value::as_number() const {
  TG_CHECK(type == Type::number, "JSON: expected a number, got a ", type_name(type));
  return num;
}

const std::string& Value::as_string() const {
  TG_CHECK(type == Type::string, "JSON: expected a string, got a ", type_name(type));
  return str;
}

// ---------------------------------------------------------------------------------------------
// Parser

namespace {

// Deep enough for any document the CLI writes; bounds the recursion on hostile input.
constexpr int kMaxDepth = 256;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    TG_THROW("JSON: ", what, " at byte ", offset);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_ws() {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  void expect_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) {
      fail("invalid literal, expected '" + std::string(lit) + "'");
    }
    pos_ += lit.size();
  }

  Value parse_value(int depth) {
    if (at_end()) fail("unexpected end of input, expected a value");
    Value v;
    switch (peek()) {
      case '{':
        return parse_object(depth);
      case '[':
        return parse_array(depth);
      case '"':
        v.type = Value::Type::string;
        v.str = parse_string();
        return v;
      case 't':
        expect_literal("true");
        v.type = Value::Type::boolean;
        v.b = true;
        return v;
      case 'f':
        expect_literal("false");
        v.type = Value::Type::boolean;
        v.b = false;
        return v;
      case 'n':
        expect_literal("null");
        return v;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        fail(std::string("unexpected character '") + peek() + "', expected a value");
    }
  }

  Value parse_object(int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    Value v;
    v.type = Value::Type::object;
    ++pos_;  // '{'
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_ws();
      if (peek() != '"') fail("expected a string key in object");
      std::string key = parse_string();
      skip_ws();
      if (peek() != ':') fail("expected ':' after object key");
      ++pos_;
      skip_ws();
      Value item = parse_value(depth + 1);
      v.obj.emplace_back(std::move(key), std::move(item));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      fail(at_end() ? "unexpected end of input in object" : "expected ',' or '}' in object");
    }
  }

  Value parse_array(int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    Value v;
    v.type = Value::Type::array;
    ++pos_;  // '['
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_ws();
      v.arr.push_back(parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      fail(at_end() ? "unexpected end of input in array" : "expected ',' or ']' in array");
    }
  }

  Value parse_number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("expected a digit in number");
    }
    if (peek() == '.') {
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit after '.' in number");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit in number exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    Value v;
    v.type = Value::Type::number;
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    const auto res = std::from_chars(first, last, v.num);
    if (res.ec == std::errc::result_out_of_range) {
      fail_at(start, "number out of the range of a double");
    }
    if (res.ec != std::errc() || res.ptr != last) fail_at(start, "invalid number");
    return v;
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape, expected 4 hex digits");
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_];
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        fail("invalid hex digit in \\u escape");
      }
      cp = cp * 16 + d;
      ++pos_;
    }
    return cp;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string parse_string() {
    const size_t open = pos_;
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) fail_at(open, "unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("unescaped control character in string");
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      const size_t esc = pos_;
      ++pos_;
      if (at_end()) fail_at(open, "unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(esc, "unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") {
              fail_at(esc, "high surrogate not followed by a \\u low surrogate");
            }
            pos_ += 2;
            const uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) {
              fail_at(esc, "high surrogate not followed by a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail_at(esc, std::string("invalid escape '\\") + e + "' in string");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(std::string_view text) {
  return Parser(text).parse_document();
}

}  // namespace tg::json
