// Reading a TOML file the way every terngrad file is read (the run's config, perf-model's cluster
// files): the limits checked before toml++ sees the text (toml_limits.h), toml++'s syntax errors
// and every later message placed as "source:line:column".
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>

namespace tg::config {

// The parsed text; throws tg::Error "source:line:column: TOML syntax error: ..." or the limits'
// error.
toml::table parse_toml(std::string_view text, const std::string& source);

// "source:line:column" of a node or key (toml++'s source region); `source` alone when toml++
// does not know where it came from (a default, a value built in code).
std::string toml_where(const std::string& source, const toml::source_region& r);

}  // namespace tg::config
