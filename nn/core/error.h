// Errors: every failure in the library is a tg::Error that carries file:line and a message
// naming what is wrong and what was expected. The library never calls exit/abort.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tg {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& msg)
      : std::runtime_error(msg), file_(file), line_(line) {}
  const char* file() const { return file_; }
  int line() const { return line_; }
  // "message (file.cpp:42)": what `main` prints.
  std::string describe() const;

 private:
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace tg

#define TG_THROW(...) throw ::tg::Error(__FILE__, __LINE__, ::tg::detail::concat(__VA_ARGS__))
#define TG_CHECK(cond, ...)     \
  do {                          \
    if (!(cond)) [[unlikely]] { \
      TG_THROW(__VA_ARGS__);    \
    }                           \
  } while (0)
