// v12_stmatrix_epilogue.cu: v11 (v11_bc64_at_d128.cu) with an epilogue that does no address
// arithmetic per element. One idea: two n8 tiles of mma accumulators are an A fragment, so they
// can leave through the lane addresses Q came in by.
//
// Why: v11's Nsight Compute source page at D 128 N 1024 (notes/measured/h100-2026-11-25c/
//   call2_ncu_fwd_N1024_ours_sass.csv.gz) has 1043 instructions per warp after the last MMA and
//   6.4% of the warp samples there; FlashAttention-2's epilogue is 572 instructions and 3.1%. At
//   N 1024 a block runs 16 key tiles, so a fixed cost per block shows. v3's store_o_tile (kept by
//   v4-v11) works out each thread's 4-byte shared-memory write from (row, chunk, swizzle) for
//   every n8 tile, then each 16-byte copy's row, bounds test and 64-bit global address, one m16
//   tile at a time, each global store waiting on the shared load before it.
//
// What changed vs v11 (store_o_m in ch05_mma_fwd_mtiles.cuh; the kernel's kStmatrixO branch)
//   * Into shared memory: for each m16 tile and 16 columns, the four accumulator pairs (rows g and
//     g + 8 of n8 tiles 2j and 2j + 1) packed to 16 bits are the four registers of an A fragment,
//     the layout P V already relies on. stmatrix.x4 (PTX, sm_90: the inverse of ldmatrix.x4)
//     writes them at the lane addresses an A fragment is loaded from, q_addr.at(m, j): a base plus
//     a constant. 8 instructions per m16 tile at D 128 instead of 32 stores and their addresses.
//   * Into global memory: the warp's 32 rows are contiguous in O, so its 16-byte chunk c is at
//     O_warp + 8 c whatever the row; lane l copies chunks l + 32 i, a base plus a constant. All
//     shared loads first, then the stores, each tested against the rows left (one comparison).
//   * Both m16 tiles at once (one __syncwarp pair instead of one per tile), then L as before.
//   Builds for GPUs older than sm_90 (no stmatrix) keep v11's epilogue: mma::kHasStmatrix.
//   One detail cost a call: assigning the loaded uint4 through a pointer compiled to four 32-bit
//   global stores (nvcc 13.0), 4x the L2 sectors (call3_ncu_fwd_N1024_memory.txt); __stwb stores
//   16 bytes. The values written are v11's: the same products, rounded the same way (no test
//   compares the two bit for bit).
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D; call4_rounds_D128.md:
// medians of three alternating rounds with PyTorch SDPA)
//   D 128 against v11: 1.043-1.081x non-causal, 1.019-1.074x causal. Against FlashAttention-2:
//   N 1024 348.6 TFLOP/s against 334.6 (1.042x), N 2048 1.056x, 4096 1.067x, 8192 1.081x
//   (381.0), 16384 1.071x; causal 1.085x (N 1024) to 1.126x (4096). The smallest single-round
//   ratio from N 1024 up is 1.038. cuDNN stays ahead: 614.9 at N 1024, 698.7 at N 8192.
//   D 64: 0.91-1.03x v11 in one round (call4_bench.log; the best of v9-v12 is 1.04-1.14x FA2).
//   D 256: 0.98-1.02x v11.
//   Nsight Compute at N 1024 (call4_ncu_fwd_N1024_*.txt): 704 K cycles against FA2's 734 K (v11
//   759 K), tensor pipe 56.3% busy (FA2 54.0%). Epilogue 916 instructions per warp and 4.9% of the
//   samples. The loop's code is v11's, but ptxas schedules the whole kernel: its short-scoreboard
//   samples fell from 8399 to 3933 (the P V matmul's waits on V fragments, mostly), so part of
//   this rung's gain is that schedule, not the epilogue's instructions.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v12, given this rung's tiles
#include "ch05_tiles_v11.cuh"      // v11's tiles
#include "registry.h"

namespace fa {
namespace {

// v11's tiles, with O stored by store_o_m (this rung).
template <int D>
struct TilesV12 : TilesV11<D> {
  static constexpr bool kStmatrixO = true;
};

struct RungV12 {
  static constexpr const char* kName = "05/v12_stmatrix_epilogue";
  template <int D>
  using Tiles = TilesV12<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV12::kName,
             fa::mtiles_forward<fa::RungV12>,
             "v11 with O stored by stmatrix at Q's lane addresses, then copied out as base + "
             "constant (sm_90; v11's epilogue in builds for older GPUs)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
