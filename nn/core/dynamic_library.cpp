#include "nn/core/dynamic_library.h"

#include <dlfcn.h>

#include "nn/core/error.h"

namespace tg {

namespace {

std::string last_dlerror() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

DynamicLibrary::DynamicLibrary(const std::string& soname, const std::string& fallback,
                               const std::string& advice) {
  // RTLD_LOCAL: the library's symbols serve only our lookups (its own dependencies, such as
  // cuBLASLt for cuBLAS, come through its DT_NEEDED); RTLD_NOW: a broken install fails here.
  handle_ = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  path_ = soname;
  if (handle_ != nullptr) return;
  const std::string reason = last_dlerror();
  if (!fallback.empty() && fallback != soname) {
    handle_ = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL);
    path_ = fallback;
    if (handle_ != nullptr) return;
  }
  TG_THROW("cannot load ", soname, ": ", reason, " (", advice, ")");
}

void* DynamicLibrary::symbol(const char* name) const {
  dlerror();  // clear any earlier error
  void* p = dlsym(handle_, name);
  TG_CHECK(p != nullptr, path_, " has no symbol ", name, " (", last_dlerror(),
           "): it is older than the CUDA toolkit this build used");
  return p;
}

}  // namespace tg
