// v9_pipelined_s_loads.cu: v8 (v8_one_lane_address.cu) with the fragment loads of S = Q K^T
// software-pipelined. One idea: load slice kk + 1 before the MMAs of slice kk.
//
// Why: the largest gap to FlashAttention-2 in Nsight Compute is short-scoreboard stalls, MMAs
//   waiting for the ldmatrix that feeds them (notes/05_flash_forward.md, section 8).
//   FlashAttention-2's matmul loop (cute's gemm in Dao-AILab/flash-attention, csrc/flash_attn/src/
//   utils.h, `gemm`) copies the fragments of k-block i + 1 from shared memory before it issues the
//   MMAs of k-block i. Ours issued each slice's loads just ahead of its own MMAs and left it to
//   ptxas to move them earlier, which it did only as far as the registers let it.
//
// What changed vs v8
//   * compute_s_m_pipelined (ch05_mma_fwd_mtiles.cuh): two sets of Q and K fragment registers;
//     slice 0 is loaded first, then each step loads slice kk + 1 into the other set and issues the
//     MMAs of slice kk. The loop is unrolled in full, as v5-v8's.
//
// Speed: see the ladder in the chapter README (measured against v8 in one call).

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v9, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

// v8's tiles and lane addresses, with S's fragment loads pipelined (this rung).
template <int D>
struct TilesV9 : TilesV6<D> {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineS = true;
};

struct RungV9 {
  static constexpr const char* kName = "05/v9_pipelined_s_loads";
  template <int D>
  using Tiles = TilesV9<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV9::kName,
             fa::mtiles_forward<fa::RungV9>,
             "v8 with the Q and K fragments of slice kk + 1 loaded before the MMAs of slice kk",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
