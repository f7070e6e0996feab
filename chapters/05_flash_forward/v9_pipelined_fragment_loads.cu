// v9_pipelined_fragment_loads.cu: v8 (v8_one_lane_address.cu) with the fragment loads of both
// matmuls software-pipelined. One idea: load fragment i + 1 before the MMAs of fragment i.
//
// Why: the largest gap to FlashAttention-2 in Nsight Compute was short-scoreboard stalls, MMAs
//   waiting for the ldmatrix that feeds them (notes/05_flash_forward.md, section 8).
//   FlashAttention-2's matmul loop copies the fragments of k-block i + 1 from shared memory before
//   it issues the MMAs of k-block i (`gemm` in csrc/flash_attn/src/utils.h of
//   Dao-AILab/flash-attention). Ours issued each fragment's load just ahead of its own MMAs and
//   left it to ptxas to move the loads earlier.
//
// What changed vs v8
//   * compute_s_m_pipelined (ch05_mma_fwd_mtiles.cuh): two sets of Q and K fragment registers;
//     slice 0 is loaded first, then each step loads slice kk + 1 into the other set and issues the
//     MMAs of slice kk.
//   * rescale_o_add_pv_m_pipelined: the same for the V fragments of P V, one sequence of
//     Bc / 16 x D / 16 fragments; the first is loaded before the rescale of O, and the P fragments
//     of both k16 slices are packed before the first MMA.
//   Both loops are unrolled in full, as v5-v8's, so the two register sets are indexed at compile
//   time; ptxas (CUDA 13.0) fits them without spills at every D.
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, TFLOP/s, v8 and PyTorch SDPA
// in the same call: notes/measured/h100-2026-11-25b/call2_bench.log, call2_sdpa.log)
//   D 256: 0.97-1.06x v8, above it at 11 of 12 shapes (N 8192 causal 276.9 against 271.4).
//   D 128: 0.98-1.03x v8, noise; N 8192 342.7 (v8 333.3, FlashAttention-2 338.1).
//   D 64: 0.94-1.02x v8.
//   Nsight Compute (D 128 N 8192, call2_ncu_fwd_*.txt): 3.70 ms against FA2's 3.66, short-
//   scoreboard stalls 91.2 K per warp (v7: 109.7 K on 2026-11-25 call 1; FA2 49.7 K), tensor pipe
//   54.6% busy (FA2 57.1%), 1.132 G instructions (v7 1.128 G).
//   The S half alone (measured as its own rung in the same call) was 0.97-1.02x v8 at D 128: ptxas
//   had already moved most of those loads ahead.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v9, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

// v8's tiles and lane addresses, with the fragment loads pipelined (this rung).
template <int D>
struct TilesV9 : TilesV6<D> {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineLoads = true;
};

struct RungV9 {
  static constexpr const char* kName = "05/v9_pipelined_fragment_loads";
  template <int D>
  using Tiles = TilesV9<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV9::kName,
             fa::mtiles_forward<fa::RungV9>,
             "v8 with fragment i + 1 loaded before the MMAs of fragment i, in S and in P V",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
