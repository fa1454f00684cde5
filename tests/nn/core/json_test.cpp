// JSON writer/parser (nn/core/json.h): escaping, shortest round-trip doubles, strict parsing with
// byte offsets in errors.
#include "nn/core/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "nn/core/error.h"
#include "tests/testing/errors.h"

namespace tg::json {
namespace {

// Expects parse(text) to throw a tg::Error whose message names byte `offset` (and `what`).
void expect_parse_error(const std::string& text, size_t offset, const std::string& what = "") {
  SCOPED_TRACE("input: " + text);
  std::vector<std::string> fragments = {"at byte " + std::to_string(offset)};
  if (!what.empty()) fragments.push_back(what);
  tg::testing::expect_error_with([&] { parse(text); }, fragments);
}

TEST(JsonWriter, ObjectKeepsInsertionOrderAndTypes) {
  Object o;
  o.add("name", "lenet")
      .add("step", int64_t{-42})
      .add("n", 7)
      .add("bytes", uint64_t{18446744073709551615u})
      .add("lr", 0.01)
      .add("ok", true)
      .add("bad", false)
      .add_raw("arr", "[1,2]");
  EXPECT_EQ(o.str(), R"({"name":"lenet","step":-42,"n":7,"bytes":18446744073709551615,"lr":0.01,)"
                     R"("ok":true,"bad":false,"arr":[1,2]})");
  EXPECT_EQ(Object().str(), "{}");
}

TEST(JsonWriter, QuoteEscapes) {
  EXPECT_EQ(quote("plain"), "\"plain\"");
  EXPECT_EQ(quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(quote("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(quote(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
  EXPECT_EQ(quote(std::string("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(quote("/"), "\"/\"");  // '/' needs no escape
  // UTF-8 passes through byte for byte.
  EXPECT_EQ(quote("\xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"\xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80\"");
}

TEST(JsonWriter, NumbersShortestRoundTrip) {
  EXPECT_EQ(number(0.1), "0.1");
  EXPECT_EQ(number(1.0), "1");
  EXPECT_EQ(number(-2.5), "-2.5");
  EXPECT_EQ(number(1e-8), "1e-8");
  EXPECT_EQ(number(1e-300), "1e-300");
  EXPECT_EQ(number(2.5e20), "2.5e+20");
  EXPECT_EQ(trim_exponent("5e-04"), "5e-4");
  EXPECT_EQ(trim_exponent("1e+00"), "1e+0");
  EXPECT_EQ(trim_exponent("0.25"), "0.25");
  EXPECT_EQ(number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(number(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(number(std::nan("")), "null");
  const double values[] = {
      1.0 / 3.0, 0.1 + 0.2, 1e300, 5e-324, -123456789.125, std::numeric_limits<double>::max(), 0.0};
  for (double v : values) {
    const Value p = parse(number(v));
    EXPECT_EQ(p.as_number(), v) << number(v);  // exact, bit for bit
  }
  Object o;
  o.add("x", std::nan(""));
  EXPECT_EQ(o.str(), R"({"x":null})");
}

TEST(JsonParser, ScalarsAndStructure) {
  const Value v = parse(R"( {"a": 1, "b": [true, false, null, -0.5e2, "s"], "c": {"d": {}},
                             "e": [], "a": 2} )");
  ASSERT_EQ(v.type, Value::Type::object);
  ASSERT_EQ(v.obj.size(), 5u);
  EXPECT_EQ(v.obj[0].first, "a");
  EXPECT_EQ(v["a"].as_number(), 1.0);  // first of duplicate keys
  const Value& b = v["b"];
  ASSERT_EQ(b.type, Value::Type::array);
  ASSERT_EQ(b.arr.size(), 5u);
  EXPECT_EQ(b.arr[0].type, Value::Type::boolean);
  EXPECT_TRUE(b.arr[0].b);
  EXPECT_FALSE(b.arr[1].b);
  EXPECT_EQ(b.arr[2].type, Value::Type::null);
  EXPECT_EQ(b.arr[3].as_number(), -50.0);
  EXPECT_EQ(b.arr[4].as_string(), "s");
  EXPECT_TRUE(v["c"].has("d"));
  EXPECT_EQ(v["c"]["d"].type, Value::Type::object);
  EXPECT_TRUE(v["e"].arr.empty());
  EXPECT_FALSE(v.has("zz"));
  EXPECT_FALSE(b.has("a"));  // not an object
  EXPECT_EQ(parse("7").as_number(), 7.0);
  EXPECT_EQ(parse(" \"x\" ").as_string(), "x");
}

TEST(JsonParser, AccessorsThrowOnWrongType) {
  const Value v = parse(R"({"a": "s", "n": 1})");
  EXPECT_THROW(v["missing"], tg::Error);
  EXPECT_THROW(v["a"].as_number(), tg::Error);
  EXPECT_THROW(v["n"].as_string(), tg::Error);
  EXPECT_THROW(v["n"]["x"], tg::Error);
}

TEST(JsonParser, StringEscapes) {
  EXPECT_EQ(parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parse(R"("\u0041\u00fc\u20AC")").as_string(), "A\xc3\xbc\xe2\x82\xac");
  EXPECT_EQ(parse(R"("\u0000")").as_string(), std::string(1, '\0'));
  // Surrogate pair U+1F600 -> F0 9F 98 80.
  EXPECT_EQ(parse(R"("\ud83d\ude00")").as_string(), "\xf0\x9f\x98\x80");
  // Raw UTF-8 passes through.
  EXPECT_EQ(parse("\"\xe2\x82\xac\"").as_string(), "\xe2\x82\xac");
}

TEST(JsonRoundTrip, WriterOutputParsesBack) {
  std::string all_bytes;
  for (int c = 1; c < 128; ++c) all_bytes.push_back(static_cast<char>(c));
  all_bytes += "\xc3\xbc\xf0\x9f\x98\x80";
  Object inner;
  inner.add("v", 0.30000000000000004);
  Object o;
  o.add("s", all_bytes).add("i", int64_t{-9007199254740991}).add("d", 2.5e-7).add("t", true);
  o.add_raw("inner", inner.str());
  o.add(all_bytes, "key with every byte");
  const Value v = parse(o.str());
  EXPECT_EQ(v["s"].as_string(), all_bytes);
  EXPECT_EQ(v["i"].as_number(), -9007199254740991.0);
  EXPECT_EQ(v["d"].as_number(), 2.5e-7);
  EXPECT_TRUE(v["t"].b);
  EXPECT_EQ(v["inner"]["v"].as_number(), 0.30000000000000004);
  EXPECT_EQ(v[all_bytes].as_string(), "key with every byte");
}

TEST(JsonParser, ErrorsNameTheByteOffset) {
  // A well-formed token out of place is named by its first byte; a malformed one by the byte at
  // which it went wrong (the end of the input is byte text.size()).
  expect_parse_error("", 0, "unexpected end");
  expect_parse_error("   ", 3, "unexpected end");
  expect_parse_error("{\"a\" 1}", 5, "':'");
  expect_parse_error("{\"a\":1,}", 7, "object key");
  expect_parse_error("[1 2]", 3, "expected ']'");
  expect_parse_error("[1 true]", 3, "expected ']'");
  expect_parse_error("[1 false]", 3, "expected ']'");
  expect_parse_error("[1 null]", 3, "expected ']'");
  expect_parse_error("[1 -12.5e3]", 3, "expected ']'");
  expect_parse_error("[1 \"a\\\"b\"]", 3, "expected ']'");
  expect_parse_error("[1,", 3, "unexpected end");
  expect_parse_error("{\"a\":1", 6, "end of input");
  expect_parse_error("tru", 3, "invalid literal");
  expect_parse_error("nul", 3, "invalid literal");
  expect_parse_error("[tru]", 4, "invalid literal");
  expect_parse_error("1 2", 2, "expected end of input");
  expect_parse_error("01", 1, "expected end of input");  // leading zeros are not JSON
  expect_parse_error("-", 1, "digit");
  expect_parse_error("1.", 2, "digit");
  expect_parse_error("1e+", 3, "digit");
  expect_parse_error("+1", 0, "invalid literal");
  expect_parse_error("1e999", 0, "range");
  expect_parse_error("[1, -1e999]", 4, "range");
  expect_parse_error("1e-400", 0, "range");  // not 0: every nonzero number must fit a double
  expect_parse_error("[1, 1e-400 ]", 4, "range");
  expect_parse_error("\"abc", 0, "missing closing quote");
  expect_parse_error("\"a\nb\"", 2, "control character");
  expect_parse_error(R"("\x")", 2, "after backslash");
  expect_parse_error(R"("\u12G4")", 5, "hex digit");
  expect_parse_error(R"("\u12")", 5, "4 hex digits");
  expect_parse_error(R"("ab\ude00")", 8, "must follow U+D800..U+DBFF");
  expect_parse_error(R"("\ud83dx")", 7, "must be followed by U+DC00..U+DFFF");
  expect_parse_error(R"("\ud83d\u0041")", 12, "must be followed by U+DC00..U+DFFF");
  expect_parse_error("NaN", 0, "invalid literal");
  expect_parse_error("\xef\xbb\xbf{}", 0, "byte order mark");  // RFC 8259 text has none
  expect_parse_error(std::string("1\0", 2), 1, "NUL");
  expect_parse_error(std::string("{}  \0", 5), 4, "NUL");
  expect_parse_error(std::string("[1,\0]", 5), 3, "NUL");
  expect_parse_error(std::string("\"a\0\"", 4), 2, "control character");
}

TEST(JsonParser, NestingLimit) {
  const std::string ok = std::string(256, '[') + std::string(256, ']');
  EXPECT_EQ(parse(ok).arr.size(), 1u);
  expect_parse_error(std::string(257, '[') + std::string(257, ']'), 256, "nesting");
  // Far past the limit: refused at the limit, without building (or recursing into) the rest.
  expect_parse_error(std::string(100000, '['), 256, "nesting");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  expect_parse_error(objects, 256 * 5, "nesting");
  expect_parse_error("[{\"a\": " + std::string(300, '['), 261, "nesting");  // 7 + 256 - 2
}

TEST(JsonParser, BytesPassThroughAsWritten) {
  // quote() passes bytes that are not UTF-8 through; parse() gives them back byte for byte, in
  // keys and values, among real '?' and "\u003f" (json.cpp swaps such bytes for '?' and back).
  const std::string odd = "\xff?\xe2\x82?\xc3\x28\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf\x80";
  Object o;
  o.add(odd, odd + "\xc3\xbc");
  const Value v = parse(o.str());
  ASSERT_EQ(v.obj.size(), 1u);
  EXPECT_EQ(v.obj[0].first, odd);
  EXPECT_EQ(v[odd].as_string(), odd + "\xc3\xbc");
  const Value a = parse("[\"?\\u003f\xff\\u003F?\", \"\xfe\"]");
  EXPECT_EQ(a.arr[0].as_string(), "??\xff??");
  EXPECT_EQ(a.arr[1].as_string(), "\xfe");
  expect_parse_error("[\xff]", 1, "invalid literal");  // outside strings they are still errors
}

TEST(JsonParser, NumbersAsWritten) {
  EXPECT_TRUE(std::signbit(parse("-0").as_number()));  // number(-0.0) is "-0"
  EXPECT_TRUE(std::signbit(parse("-0.0").as_number()));
  EXPECT_FALSE(std::signbit(parse("0").as_number()));
  EXPECT_EQ(parse("18446744073709551615").as_number(), 18446744073709551615.0);
  EXPECT_EQ(parse("18446744073709551616").as_number(), 18446744073709551616.0);
  EXPECT_EQ(parse("-9223372036854775809").as_number(), -9223372036854775809.0);
  EXPECT_EQ(parse("9007199254740993").as_number(), 9007199254740992.0);  // rounds to even
  EXPECT_EQ(parse("1E5").as_number(), 1e5);
  EXPECT_EQ(parse("5e-324").as_number(), 5e-324);  // the least denormal fits
  EXPECT_EQ(parse("0e-999").as_number(), 0.0);     // zero is no underflow
}

}  // namespace
}  // namespace tg::json
