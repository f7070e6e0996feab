// Library kernels registered as reference rows. cuBLAS is registered as a GEMM of its own, so the
// chapter 03 ladder prints it beside our kernels and the tests check the harness against it too.
// (This file is an OBJECT library, fa_refs, so its registration line is never dropped by the linker.)
#include "ceilings.h"
#include "registry.h"

namespace fa {

FA_REGISTER(GemmKernel, {"ref/cublas",
                         cublas_gemm,
                         "cuBLAS cublasGemmEx (fp32 without TF32; 16-bit inputs on tensor cores)",
                         {DType::F32, DType::F16, DType::BF16},
                         70});

}  // namespace fa
