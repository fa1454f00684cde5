// `terngrad ... --help` within 100 columns: CLI11's formatter with every description, footer and
// subcommand line word-wrapped to kHelpColumns (CLI11 2.1 prints them as one line each, however
// long). Set on the top-level app before the subcommands are added, so they inherit it.
#pragma once

#include <cstddef>
#include <string>

#include <CLI/CLI.hpp>

namespace tg::cli {

inline constexpr size_t kHelpColumns = 100;

// `text` word-wrapped to `width` columns, lines joined by '\n' (its own newlines kept; a word
// longer than the width stands alone on its line).
std::string wrap_text(const std::string& text, size_t width);

class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* opt) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;
  std::string make_footer(const CLI::App* app) const override;
};

}  // namespace tg::cli
