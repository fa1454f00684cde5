// JSON for the CLI (see json.h). Parsing is nlohmann-json's (its SAX interface): the lexer,
// RFC 8259's grammar, \u escapes with surrogate pairs, UTF-8 checks and number conversion. The
// SAX handler here builds the Value tree in document order (duplicate keys kept; operator[] takes
// the first) and keeps what tests/nn/core/json_test.cpp pins: a nesting limit (Value's destructor
// recurses), numbers out of a double's range rejected, "-0" kept negative, and tg::Error naming
// the byte offset of the problem. nlohmann rejects ill-formed UTF-8 inside strings and takes a NUL
// byte for the end of the input; one pass before it swaps such bytes for ones it reads the way
// this parser always has (bytes >= 0x80 pass through unchanged, a NUL is an error where it stands).
// The writer is hand-written: nlohmann's dump() throws on (or replaces) bytes that are not UTF-8,
// which quote() passes through, and writes doubles as "1e-08" and "1.0", not as number() does.
#include "nn/core/json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>

#include "nn/core/error.h"
#include "nn/core/hash.h"

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
          out += "\\u00" + to_hex(&c, 1);
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

using Json = nlohmann::json;

// Deep enough for any document the CLI writes; bounds the recursion of Value's destructor and
// copies on hostile input (nlohmann's parser itself is iterative).
constexpr size_t kMaxDepth = 256;

// Put in place of a NUL byte outside strings: the lexer takes a NUL for the end of the input, and
// this byte, like RFC 8259 a NUL, for no token at all.
constexpr char kNulStandIn = '\x01';

[[noreturn]] void fail_at(size_t offset, const std::string& what) {
  TG_THROW("JSON: ", what, " at byte ", offset);
}

// Length of the well-formed UTF-8 sequence at s[i], or 0: Unicode's table of well-formed byte
// sequences (the one nlohmann's lexer checks), as the lead byte's range, the length, and the
// second byte's range (narrower where it would allow overlong forms, surrogates, > U+10FFFF);
// any further bytes are 80..BF.
size_t utf8_length(std::string_view s, size_t i) {
  struct Form {
    unsigned char lead_lo, lead_hi, length, lo, hi;
  };
  static constexpr Form kForms[] = {{0xC2, 0xDF, 2, 0x80, 0xBF}, {0xE0, 0xE0, 3, 0xA0, 0xBF},
                                    {0xE1, 0xEC, 3, 0x80, 0xBF}, {0xED, 0xED, 3, 0x80, 0x9F},
                                    {0xEE, 0xEF, 3, 0x80, 0xBF}, {0xF0, 0xF0, 4, 0x90, 0xBF},
                                    {0xF1, 0xF3, 4, 0x80, 0xBF}, {0xF4, 0xF4, 4, 0x80, 0x8F}};
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  for (const Form& f : kForms) {
    if (byte(0) < f.lead_lo || byte(0) > f.lead_hi) continue;
    if (i + f.length > s.size() || byte(1) < f.lo || byte(1) > f.hi) return 0;
    for (size_t k = 2; k < f.length; ++k) {
      if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
    }
    return f.length;
  }
  return 0;
}

// A const char* into the text that tells how far nlohmann's lexer has read: the SAX events carry
// no position, and the nesting limit and the number checks report one.
struct TrackedChar {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* p;
  const char** read_to;

  char operator*() const { return *p; }
  TrackedChar& operator++() {
    *read_to = ++p;
    return *this;
  }
  bool operator==(const TrackedChar& o) const { return p == o.p; }
};

// nlohmann's SAX handler (the member names are its interface): builds the Value tree.
class Builder {
 public:
  explicit Builder(std::string_view text) { prepare(text); }
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  Value run() && {
    read_to_ = text_.data();
    Json::sax_parse(TrackedChar{text_.data(), &read_to_},
                    TrackedChar{text_.data() + text_.size(), &read_to_}, this);
    return std::move(root_);
  }

  bool null() { return put(Value()); }
  bool boolean(bool b) {
    Value v;
    v.type = Value::Type::boolean;
    v.b = b;
    return put(std::move(v));
  }
  // Only "-0" reaches number_integer with 0 ("0" is unsigned): a negative zero, as from_chars
  // and number() have it.
  bool number_integer(Json::number_integer_t x) {
    return number(x == 0 ? -0.0 : static_cast<double>(x));
  }
  bool number_unsigned(Json::number_unsigned_t x) { return number(static_cast<double>(x)); }
  bool number_float(Json::number_float_t x, const std::string& text) {
    // nlohmann rejects numbers above a double's range (out_of_range 406, in parse_error); a
    // nonzero number below it, which strtod rounds to 0, is rejected here the same way.
    if (x == 0.0 && text.find_first_of("123456789") < text.find_first_of("eE")) {
      fail_at(number_start(text), "number out of the range of a double");
    }
    return number(x);
  }
  bool string(std::string& s) {
    Value v;
    v.type = Value::Type::string;
    v.str = restore(std::move(s));
    return put(std::move(v));
  }
  bool binary(Json::binary_t&) { return false; }  // CBOR and the like; never JSON text

  bool start_object(size_t) { return open(Value::Type::object); }
  bool key(std::string& k) {
    open_.back().obj.emplace_back(restore(std::move(k)), Value());
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(Value::Type::array); }
  bool end_array() { return close(); }

  // `position` counts the bytes the lexer has taken, `last_token` is what it took for the
  // current token (control characters spelled "<U+000A>"), `e` says what is wrong.
  bool parse_error(size_t position, const std::string& last_token, const Json::exception& e) {
    if (e.id == 406) {  // out_of_range.406: a number above a double's range; it is last_token
      fail_at(position - last_token.size(), "number out of the range of a double");
    }
    // "[json.exception.parse_error.101] parse error at line 1, column 6: <what>"
    std::string what = e.what();
    what.erase(0, what.find(": ") + 2);
    const std::string last_read = "; last read: '" + last_token + "'";
    const size_t lexer = what.find(last_read);
    size_t offset;
    if (lexer != std::string::npos) {
      // A malformed token: the byte the lexer could not take (text_.size() at the end), or an
      // unterminated string's opening quote (the string is all of last_token).
      what.erase(lexer, last_read.size());
      offset = what.find("missing closing quote") != std::string::npos
                   ? position - 1 - last_token.size()
                   : position - 1;
    } else {
      offset = token_start(position, last_token);  // a well-formed token out of place
    }
    if (offset == nul_) what = "unexpected NUL byte";
    fail_at(offset, what);
  }

 private:
  // Swaps the bytes nlohmann's lexer would read otherwise than this parser always has (see the
  // file comment), in one pass that tracks strings; copies the text only when there are any.
  void prepare(std::string_view in) {
    text_ = in;
    const auto plain = [](char c) { return c != '\0' && static_cast<unsigned char>(c) < 0x80; };
    if (std::all_of(in.begin(), in.end(), plain)) return;
    const auto swap = [&](size_t i, char with) {
      if (copy_.empty()) copy_.assign(in);
      copy_[i] = with;
    };
    bool in_string = false;
    size_t strings = 0;    // strings closed so far
    size_t questions = 0;  // '?' in the current string once decoded
    for (size_t i = 0; i < in.size(); ++i) {
      const char c = in[i];
      if (!in_string) {
        if (c == '"') {
          in_string = true;
          questions = 0;
        } else if (c == '\0') {
          nul_ = i;
          swap(i, kNulStandIn);
          break;  // the lexer stops here
        }
      } else if (c == '"') {
        in_string = false;
        ++strings;
      } else if (c == '\\') {
        if (in.compare(i + 1, 4, "u003") == 0 && i + 5 < in.size() && (in[i + 5] | 0x20) == 'f') {
          ++questions;  // "\u003f" is a '?' too
        }
        ++i;  // an escaped quote or backslash neither ends the string nor escapes
      } else if (c == '?') {
        ++questions;
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        const size_t n = utf8_length(in, i);
        if (n > 0) {
          i += n - 1;
        } else {
          swap(i, '?');
          patches_.push_back({strings, questions++, c});
        }
      }
    }
    if (!copy_.empty()) text_ = copy_;
  }

  // The string the lexer decoded (keys included), with the bytes prepare() swapped put back.
  std::string restore(std::string s) {
    const size_t index = strings_++;
    if (next_patch_ == patches_.size() || patches_[next_patch_].string != index) return s;
    size_t question = 0;
    for (char& c : s) {
      if (c != '?') continue;
      if (next_patch_ < patches_.size() && patches_[next_patch_].string == index &&
          patches_[next_patch_].question == question) {
        c = patches_[next_patch_++].byte;
      }
      ++question;
    }
    return s;
  }

  size_t read() const { return static_cast<size_t>(read_to_ - text_.data()); }

  // The offset of the number `text` just lexed. The lexer has read one byte past it (a byte
  // that cannot continue a number) unless it ends the input.
  size_t number_start(const std::string& text) const {
    const bool at_end =
        read() == text_.size() && !text_.empty() && text_.back() >= '0' && text_.back() <= '9';
    return (at_end ? read() : read() - 1) - text.size();
  }

  // The offset of the well-formed token that ends just before `position`. Strings and numbers
  // are all of last_token (the lexer starts it afresh for them); the others have a fixed text.
  size_t token_start(size_t position, const std::string& last_token) const {
    if (position > text_.size()) return text_.size();  // the end of the input
    const char c = text_[position - 1];
    if (c == '"' || (c >= '0' && c <= '9')) return position - last_token.size();
    // null, true or false; else one of [ ] { } : ,
    if (c == 'l') return position - 4;
    if (c == 'e') return position - (text_[position - 4] == 't' ? 4 : 5);
    return position - 1;
  }

  bool number(double x) {
    Value v;
    v.type = Value::Type::number;
    v.num = x;
    return put(std::move(v));
  }

  bool put(Value v) {
    if (open_.empty()) {
      root_ = std::move(v);
    } else if (open_.back().type == Value::Type::array) {
      open_.back().arr.push_back(std::move(v));
    } else {
      open_.back().obj.back().second = std::move(v);  // key() added the pair
    }
    return true;
  }

  bool open(Value::Type type) {
    if (open_.size() >= kMaxDepth) {
      fail_at(read() - 1, "nesting deeper than " + std::to_string(kMaxDepth));
    }
    open_.emplace_back().type = type;
    return true;
  }

  bool close() {
    Value v = std::move(open_.back());
    open_.pop_back();
    return put(std::move(v));
  }

  // A byte of a string that nlohmann's lexer rejects as ill-formed UTF-8, swapped for '?':
  // the `question`-th '?' of the `string`-th string (keys included) once decoded is `byte`.
  struct Patch {
    size_t string;
    size_t question;
    char byte;
  };

  std::string_view text_;  // what the lexer reads: the input, or copy_
  std::string copy_;       // the input with bytes swapped by prepare()
  std::vector<Patch> patches_;
  size_t nul_ = std::string_view::npos;  // the first NUL byte outside strings
  const char* read_to_ = nullptr;        // how far the lexer has read
  size_t strings_ = 0;                   // strings decoded so far
  size_t next_patch_ = 0;
  std::vector<Value> open_;  // the arrays and objects being filled, innermost last
  Value root_;
};

}  // namespace

Value parse(std::string_view text) {
  // nlohmann skips a byte order mark; RFC 8259 text has none, and this parser never took one.
  if (!text.empty() && static_cast<unsigned char>(text[0]) == 0xEF) {
    fail_at(0, "unexpected byte 0xEF (a byte order mark?)");
  }
  return Builder(text).run();
}

}  // namespace tg::json
