// `terngrad --help` and every subcommand's fit in 100 columns (cmd/help_format.h), and the
// wrapper itself: words kept whole, paragraphs kept, nothing lost.
#include "cmd/help_format.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/cmd/cli_util.h"

namespace tg::testing {
namespace {

TEST(Help, EveryHelpFitsIn100Columns) {
  const std::vector<std::vector<std::string>> commands = {{"--help"},
                                                          {"train", "--help"},
                                                          {"eval", "--help"},
                                                          {"data", "--help"},
                                                          {"data", "fetch", "--help"},
                                                          {"data", "synth-folder", "--help"},
                                                          {"config", "--help"},
                                                          {"perf-model", "--help"},
                                                          {"convergence-check", "--help"},
                                                          {"measure-bounds", "--help"}};
  for (const auto& args : commands) {
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    ASSERT_FALSE(r.out.empty()) << args[0];
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line))
      EXPECT_LE(line.size(), cli::kHelpColumns) << args[0] << " --help: " << line;
  }
  // The exit statuses are still all there, wrapped.
  const std::string top = run_cli({"--help"}).out;
  EXPECT_NE(top.find("Exit status: 0 success;"), std::string::npos) << top;
  EXPECT_NE(top.find("--max-restarts restarted it."), std::string::npos) << top;
}

TEST(Help, WrapKeepsWordsAndParagraphs) {
  EXPECT_EQ(cli::wrap_text("aa bb cc dd", 5), "aa bb\ncc dd");
  EXPECT_EQ(cli::wrap_text("one\ntwo three", 7), "one\ntwo\nthree");
  EXPECT_EQ(cli::wrap_text("averyveryverylongword x", 5), "averyveryverylongword\nx");
  EXPECT_EQ(cli::wrap_text("", 10), "");
  const std::string text = "the quick brown fox jumps over the lazy dog";
  std::string words;
  for (char c : cli::wrap_text(text, 9)) words += c == '\n' ? ' ' : c;
  EXPECT_EQ(words, text);
}

}  // namespace
}  // namespace tg::testing
