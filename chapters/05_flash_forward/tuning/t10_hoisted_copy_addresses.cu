// t10_hoisted_copy_addresses.cu: tuning step 10, t09 (the main path's v4_swizzled_pipelined.cu)
// with the cp.async copies of each K/V tile planned once per thread, before the loop over key
// tiles. One idea: every instruction between a step's barrier and its first ldmatrix delays that
// step's matmuls.
//
// Why: t09's Nsight Compute source page (D 128 N 8192, notes/measured/h100-2026-11-25b/
//   ncu_fwd_ours_sass_final_forms.csv.gz) shows, between the barrier at the top of the key loop
//   and the first ldmatrix, about 100 instructions per warp and step that only work out where
//   tile j + 1 goes: tiles::load_tile_async computes each 16-byte chunk's row, column, 64-bit
//   source, bounds test and destination from scratch (IMAD.WIDE, ISETP.EX, LEA.HI.X, SEL ... for
//   each of its 8 chunks). They are a seventh of the loop's instructions, issued while the other
//   warp of the scheduler is usually at the same barrier. Chapter 08 met the same loader in its
//   decoding kernel, and so does any copy loop: the plan of a thread's copies does not change
//   from one tile to the next, only the tile does.
//
// What changed vs t09
//   * KVCopyPlan (ch05_mma_fwd_mtiles.cuh): each thread keeps its first chunk's 32-bit shared
//     destination and its K and V sources; pass i is a compile-time offset from them, tile j is
//     j * Bc * D elements further, buffer b one tile further. A tile is 2 x Bc * D / 8 / 128
//     cp.async per thread and a few adds (8 at D 128: 4 of K, 4 of V).
//   * Only a tile that ends past seq_k (the last one, when seq_k % Bc != 0) tests its rows, one
//     comparison per pass; rows past the end are zero-filled (cp.async with src-size 0). Making
//     that tile take load_tile_async instead cost D 64 and 128 12-28 bytes of spills (ptxas,
//     CUDA 13.0): the second loader's temporaries, inlined in the loop.
//   * D 96 (12 chunks a row do not tile 128 threads) and D 256 (4 rows a pass: the swizzle differs
//     between passes) keep load_tile_async (KVCopyPlan::kPlanned).
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D; notes/measured/
// h100-2026-11-25c/: one round with t09 and PyTorch SDPA, whose logs were not kept;
// rounds_d128_v11.md three alternating rounds)
//   D 128: 1.00-1.06x t09 in one round; medians of three rounds 0.995-1.041x (N 1024 full 310.6
//   against 305.9, N 8192 354.2 against 345.6). D 64: 0.99-1.05x. D 96 and 256 run t09's code.
//   Nsight Compute at D 128 N 1024 (B 16, H 16; ncu_fwd_n1024_*_v10.txt): 154.8 M warp
//   instructions (t07 168.4 M, measured earlier that day; FlashAttention-2 166.6 M), 786 K cycles
//   (t07 814 K, FA2 733 K). Small, as chapter 08 found: the instructions went, the time mostly
//   stayed. The same profile says where the rest of the gap is: the loop's ldmatrix count is 1.2x
//   FA2's (12.6 M against 10.5 M: Q is re-read every 32 keys, FA2 every 64), and the epilogue
//   (after the last MMA) holds 6.0% of the warp samples against FA2's 3.1%. t11 and t12 take
//   those two.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of t04-t11, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT10
#include "registry.h"

namespace fa {
namespace {

struct StepT10 {
  static constexpr const char* kName = "05/t10_hoisted_copy_addresses";
  template <int D>
  using Tiles = TilesT10<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::StepT10::kName,
             fa::mtiles_forward<fa::StepT10>,
             "t09 (= v4) with each thread's K/V cp.async sources and destinations worked out once",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
