// A shared library opened with dlopen when first needed, for the libraries only a CUDA device
// needs (cuBLAS: nn/core/cuda_libs.h; NCCL: comm/nccl_lib.h). Linking them instead would make
// every process, `terngrad --help` and CPU training included, load and relocate some hundreds of
// MiB, and keep the binary from starting on a machine without them.
//
// Opened libraries stay loaded until the process exits (never dlclose'd: cuBLAS and NCCL keep
// threads and device state that outlive any one user).
#pragma once

#include <string>

namespace tg {

class DynamicLibrary {
 public:
  // Opens `soname` the way the loader resolves DT_NEEDED (LD_LIBRARY_PATH, the program's RUNPATH,
  // ld.so.cache, the system directories); if that fails and `fallback` is a non-empty path, that
  // file (the library this build was configured against). Throws tg::Error naming `soname`,
  // dlerror()'s reason and `advice` (what the user can do) when neither opens.
  DynamicLibrary(const std::string& soname, const std::string& fallback, const std::string& advice);

  // The address of `name`; throws tg::Error naming the library and the symbol if it is missing
  // (a library older than the headers this build used).
  void* symbol(const char* name) const;

  // symbol(name) as a pointer of type F, typically F = decltype(&the_function).
  template <class F>
  F function(const char* name) const {
    return reinterpret_cast<F>(symbol(name));
  }

  const std::string& path() const { return path_; }  // what was opened: soname or fallback

 private:
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace tg
