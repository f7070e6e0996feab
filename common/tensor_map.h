// tensor_map.h: the driver's cuTensorMapEncodeTiled, for the kernels that load through TMA
// (03/v6_wgmma_tma, chapter 07). Host code.
//
// cuTensorMapEncodeTiled lives in the driver library (libcuda), which the project does not link:
// the runtime hands out its address instead, looked up once per process.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "check.h"

namespace fa {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &found));
    FA_REQUIRE(found == cudaDriverEntryPointSuccess && p != nullptr,
               "the driver does not provide cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace fa
