// cuBLAS, opened on first use (nn/core/dynamic_library.h) rather than linked: a process that
// never touches a CUDA device never loads it. Include only from .cu files and cuda_libs.cpp.
//
// The table holds the functions the library calls, typed from cublas_v2.h. The names are the
// exported symbols: cublas_v2.h maps cublasCreate to cublasCreate_v2 and so on by macro.
#pragma once

#include <cublas_v2.h>

namespace tg::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSaxpy_v2) saxpy;
  decltype(&cublasSscal_v2) sscal;
};

// Loads cuBLAS on the first call (thread-safe; a failed load throws tg::Error naming the library
// and what to do, and the next call tries again).
const CublasApi& cublas_api();

}  // namespace tg::cuda
