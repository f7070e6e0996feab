// cublas_check.h: FA_CUBLAS_CHECK, the cuBLAS twin of FA_CUDA_CHECK (check.h): a failed cuBLAS call
// throws fa::Error naming the status, the call, the file and the line.
#pragma once
#include <cublas_v2.h>

#include <string>

#include "check.h"

#define FA_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    cublasStatus_t fa_st_ = (expr);                                                               \
    if (fa_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::fa::throw_error(std::string("cuBLAS error ") + cublasGetStatusString(fa_st_) + " in " #expr, \
                        __FILE__, __LINE__);                                                      \
  } while (0)
