// ch03_gemm.h: what the chapter 03 program needs to know about its tensor-core kernels beyond the
// registry: the block tile and how many blocks fit on one SM (for the wave-quantization
// arithmetic of the "matmul mystery").
#pragma once
#include "dtype.h"

namespace fa::ch03 {

struct TensorCoreGemmInfo {
  const char* name;                   // registry name
  int tile_m, tile_n;                 // every block computes one tile_m x tile_n tile of C
  int assumed_blocks_per_sm;          // used when there is no GPU to ask
  int (*blocks_per_sm)(DType dtype);  // the occupancy calculator on the GPU at hand (needs one)
};

const TensorCoreGemmInfo& v5_gemm_info();  // v5_tensor_core.cu (mma.sync, sm_80 and newer)
#if FA_CH03_HAVE_SM90A
const TensorCoreGemmInfo& v6_gemm_info();  // sm90a/v6_wgmma_tma.cu (built when targeting 9.0)
#endif

}  // namespace fa::ch03
