#include "cmd/help_format.h"

#include <sstream>

namespace tg::cli {

std::string wrap_text(const std::string& text, size_t width) {
  std::string out;
  std::istringstream paragraphs(text);
  std::string paragraph;
  bool first_paragraph = true;
  while (std::getline(paragraphs, paragraph)) {
    if (!first_paragraph) out += '\n';
    first_paragraph = false;
    std::istringstream words(paragraph);
    std::string word;
    size_t column = 0;
    while (words >> word) {
      if (column > 0 && column + 1 + word.size() > width) {
        out += '\n';
        column = 0;
      } else if (column > 0) {
        out += ' ';
        ++column;
      }
      out += word;
      column += word.size();
    }
  }
  return out;
}

std::string WrappingFormatter::make_option_desc(const CLI::Option* opt) const {
  return wrap_text(CLI::Formatter::make_option_desc(opt), kHelpColumns - get_column_width());
}

std::string WrappingFormatter::make_subcommand(const CLI::App* sub) const {
  std::stringstream out;
  CLI::detail::format_help(out, sub->get_display_name(true),
                           wrap_text(sub->get_description(), kHelpColumns - get_column_width()),
                           get_column_width());
  return out.str();
}

std::string WrappingFormatter::make_description(const CLI::App* app) const {
  const std::string desc = CLI::Formatter::make_description(app);  // ends with its newline
  return desc.empty() ? desc : wrap_text(desc, kHelpColumns) + "\n";
}

std::string WrappingFormatter::make_footer(const CLI::App* app) const {
  const std::string footer = CLI::Formatter::make_footer(app);
  return footer.empty() ? footer : wrap_text(footer, kHelpColumns) + "\n";
}

}  // namespace tg::cli
