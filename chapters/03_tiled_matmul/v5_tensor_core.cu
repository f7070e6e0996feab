// 03/v5_tensor_core: bf16 / fp16 inputs on the tensor cores (mma.sync m16n8k16), fp32 accumulate.
// What changed vs v4: the FMA units are replaced by tensor-core MMAs, which is where an H100's
// 16-bit throughput lives (about 15x its fp32 FMA rate). Everything else exists to feed them:
//
//   block tile  128 x 128 of C, BK = 32 of the inner dimension per stage, 256 threads = 8 warps
//   warp tile   the 8 warps form 2 x 4; each warp owns 64 x 32 of C = 4 x 4 MMA tiles of 16 x 8,
//               64 fp32 accumulators per thread
//   global->shared  cp.async, 16 bytes per copy, 3 stages in flight: while the warps multiply
//               stage s, the copies of stages s+1 and s+2 are on their way (no registers used)
//   shared->registers  ldmatrix.x4 for A fragments, ldmatrix.x4.trans for B (B is stored
//               [k][n] as in global memory; .trans hands out the k-pairs the MMA wants)
//   bank conflicts  rows padded by 8 elements (16 bytes): A rows are 80 bytes apart, B rows 272,
//               so the 8 row addresses of one 8x8 ldmatrix fall in 8 different 16-byte bank
//               groups (80 / 16 = 5 and 272 / 16 = 17 are odd)
//   block order  tiles are visited in groups of 8 block rows (as Triton does), so blocks that run
//               together share A and B tiles in L2; the grid is 1-D (no 65535 limit)
//
// Shared memory per stage: 128 x 40 + 32 x 136 elements = 18.5 KiB; 3 stages = 55.5 KiB (opt-in
// above 48 KiB). Ragged edges: a 16-byte chunk is copied with cp.async only when it lies entirely
// inside the matrix and its row stride keeps it aligned (K % 8 == 0 for A, N % 8 == 0 for B);
// other chunks are assembled element by element with zeros outside (K = 1, 65, 255 take this
// path). C is stored from the accumulators with predicates.
// The code is in ch03_mma_gemm.cuh, written for any tile configuration: the tile tuning in
// notes/03_tiled_matmul.md ran it with seven others. v6 calls this kernel for the shapes TMA
// cannot load.
// Measured (H100, 2026-11-21): 256-262 TFLOP/s bf16 at 4096^3, about 34% of cuBLAS. No tile
// configuration of this code did better than 280 (notes): mma.sync itself is the limit on Hopper.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ch03_gemm.h"
#include "ch03_mma_gemm.cuh"
#include "registry.h"

namespace fa::ch03 {
namespace {

// 128 x 128 x 32 block tile, 8 warps as 2 x 4 of 64 x 32, 3 stages, 2 blocks per SM.
using V5Tiles = mma_gemm::Tiles<128, 128, 32, 2, 4, 3, 2>;

void gemm_v5(const void* A, const void* B, float* C, GemmShape s, DType dtype,
             cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/v5_tensor_core takes bf16 and fp16 only");
  if (dtype == DType::BF16)
    mma_gemm::launch<V5Tiles, __nv_bfloat16>(A, B, C, s, stream);
  else
    mma_gemm::launch<V5Tiles, __half>(A, B, C, s, stream);
}

int v5_blocks_per_sm(DType dtype) {
  return dtype == DType::F16 ? mma_gemm::blocks_per_sm<V5Tiles, __half>()
                             : mma_gemm::blocks_per_sm<V5Tiles, __nv_bfloat16>();
}

}  // namespace

const TensorCoreGemmInfo& v5_gemm_info() {
  static const TensorCoreGemmInfo info{"03/v5_tensor_core", V5Tiles::kBM, V5Tiles::kBN,
                                       V5Tiles::kMinBlocksPerSm, v5_blocks_per_sm};
  return info;
}

FA_REGISTER(GemmKernel, {"03/v5_tensor_core",
                         gemm_v5,
                         "mma.sync m16n8k16, ldmatrix, 3-stage cp.async, padded smem, 128x128x32",
                         {DType::BF16, DType::F16},
                         80});

}  // namespace fa::ch03
