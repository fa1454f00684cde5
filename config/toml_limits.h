// Limits on TOML text, checked before toml++ sees it. toml++ recurses once per nested table
// header component, dotted-key component, array and inline table, so text nested thousands of
// levels deep overflows the stack; nothing in a terngrad config or cluster file nests more than
// three levels or is more than a few KiB long.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tg::config {

inline constexpr size_t kMaxTomlBytes = size_t{1} << 20;
inline constexpr int kMaxTomlDepth = 64;

// Throws tg::Error naming `source` (and the line, for nesting) when `text` is longer than
// kMaxTomlBytes or nests (open arrays and inline tables plus the dots of the key being read)
// deeper than kMaxTomlDepth. A lexical scan: strings and comments are skipped, nothing else of
// TOML's grammar is checked (toml++ does that).
void check_toml_limits(std::string_view text, const std::string& source);

}  // namespace tg::config
