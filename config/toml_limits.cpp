#include "config/toml_limits.h"

#include <vector>

#include "nn/core/error.h"

namespace tg::config {

void check_toml_limits(std::string_view text, const std::string& source) {
  TG_CHECK(text.size() <= kMaxTomlBytes, source, ": ", text.size(), " bytes of TOML (at most ",
           kMaxTomlBytes, " are read; a config is a few KiB)");
  std::vector<char> open;  // '[' (array or table header) or '{' (inline table)
  bool in_key = true;      // reading a key: its dots nest one level each
  int dots = 0;
  size_t line = 1;
  const size_t n = text.size();
  auto starts = [&](size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      if (open.empty()) in_key = true, dots = 0;
      continue;
    }
    if (c == '#') {  // comment to the end of the line
      while (i + 1 < n && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const std::string_view delim =
          starts(i, c == '"' ? "\"\"\"" : "'''") ? text.substr(i, 3) : text.substr(i, 1);
      const bool escapes = c == '"';
      size_t j = i + delim.size();
      while (j < n && !starts(j, delim)) {
        if (text[j] == '\n') ++line;
        j += escapes && text[j] == '\\' ? 2 : 1;
      }
      // A closing """ may be followed by up to two more quotes that belong to the string.
      i = std::min(n, j + delim.size()) - 1;
      continue;
    }
    switch (c) {
      case '=':
        in_key = false;
        dots = 0;
        break;
      case '.':
        if (in_key) ++dots;
        break;
      case '[':
      case '{':
        open.push_back(c);
        if (c == '{') in_key = true, dots = 0;
        break;
      case ']':
      case '}':
        if (!open.empty()) open.pop_back();
        break;
      case ',':
        if (!open.empty() && open.back() == '{') in_key = true, dots = 0;
        break;
      default:
        break;
    }
    TG_CHECK(static_cast<int>(open.size()) + dots <= kMaxTomlDepth, source, ":", line,
             ": TOML nested more than ", kMaxTomlDepth,
             " levels deep (tables, arrays, inline tables and dotted keys together; a config "
             "needs at most a few)");
  }
}

}  // namespace tg::config
