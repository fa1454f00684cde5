#include "config/toml_read.h"

#include "config/toml_limits.h"
#include "nn/core/error.h"

namespace tg::config {

toml::table parse_toml(std::string_view text, const std::string& source) {
  check_toml_limits(text, source);
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    TG_THROW(toml_where(source, e.source()), ": TOML syntax error: ", e.description());
  }
}

std::string toml_where(const std::string& source, const toml::source_region& r) {
  if (r.begin.line == 0) return source;
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

}  // namespace tg::config
