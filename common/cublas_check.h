// cublas_check.h: FA_CUBLAS_CHECK, the cuBLAS twin of FA_CUDA_CHECK (check.h): a failed cuBLAS call
// throws fa::Error naming the status, the call, the file and the line.
#pragma once
#include <cublas_v2.h>

#include <string>

#include "check.h"
#include "dtype.h"

namespace fa {
// The process's one cuBLAS handle (created on first use; callers set its stream), and the cuBLAS
// name of a DType. Used by the ceilings (ceilings.cu) and chapter 05's materialised baseline.
cublasHandle_t cublas_handle();
cudaDataType_t cublas_type(DType t);
}  // namespace fa

#define FA_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                           \
    cublasStatus_t fa_st_ = (expr);                                                              \
    if (fa_st_ != CUBLAS_STATUS_SUCCESS)                                                         \
      ::fa::throw_error(                                                                         \
          std::string("cuBLAS error ") + cublasGetStatusString(fa_st_) + " in " #expr, __FILE__, \
          __LINE__);                                                                             \
  } while (0)
