// TG_CUBLAS_SONAME and TG_CUBLAS_PATH come from nn/CMakeLists.txt: the SONAME of the cuBLAS this
// build was configured against (libcublas.so.<CUDA major>) and that file's path.
#include "nn/core/cuda_libs.h"

#include "nn/core/dynamic_library.h"

namespace tg::cuda {

namespace {

CublasApi load_cublas() {
  const DynamicLibrary lib(TG_CUBLAS_SONAME, TG_CUBLAS_PATH,
                           "cuBLAS is needed for CUDA devices: install the CUDA runtime libraries "
                           "or put their folder on LD_LIBRARY_PATH, or use the CPU device");
  CublasApi a{};
  a.create = lib.function<decltype(a.create)>("cublasCreate_v2");
  a.set_stream = lib.function<decltype(a.set_stream)>("cublasSetStream_v2");
  a.set_math_mode = lib.function<decltype(a.set_math_mode)>("cublasSetMathMode");
  a.sgemm = lib.function<decltype(a.sgemm)>("cublasSgemm_v2");
  a.saxpy = lib.function<decltype(a.saxpy)>("cublasSaxpy_v2");
  a.sscal = lib.function<decltype(a.sscal)>("cublasSscal_v2");
  return a;
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = load_cublas();
  return api;
}

}  // namespace tg::cuda
