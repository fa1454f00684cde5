#include "nn/core/error.h"

#include <cstring>

namespace tg {

std::string Error::describe() const {
  const char* base = std::strrchr(file_, '/');
  return detail::concat(what(), " (", base ? base + 1 : file_, ":", line_, ")");
}

}  // namespace tg
