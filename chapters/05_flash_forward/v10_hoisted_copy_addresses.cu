// v10_hoisted_copy_addresses.cu: v9 (v9_pipelined_fragment_loads.cu) with the cp.async copies of
// each K/V tile planned once per thread, before the loop over key tiles. One idea: every
// instruction between a step's barrier and its first ldmatrix delays that step's matmuls.
//
// Why: v9's Nsight Compute source page (D 128 N 8192, notes/measured/h100-2026-11-25b/
//   call2_ncu_fwd_ours_sass.csv.gz) shows, between the barrier at the top of the key loop and the
//   first ldmatrix, about 100 instructions per warp and step that only work out where tile j + 1
//   goes: tiles::load_tile_async computes each 16-byte chunk's row, column, 64-bit source, bounds
//   test and destination from scratch (IMAD.WIDE, ISETP.EX, LEA.HI.X, SEL ... for each of its 8
//   chunks). They are a seventh of the loop's instructions, issued while the other warp of the
//   scheduler is usually at the same barrier. Chapter 08 met the same loader in its decoding
//   kernel (08/v4_hoisted_addresses), and so does any copy loop: the plan of a thread's copies
//   does not change from one tile to the next, only the tile does.
//
// What changed vs v9
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
// h100-2026-11-25c/: call 1 one round with v9 and PyTorch SDPA, call 2 three alternating rounds)
//   D 128: 1.00-1.06x v9 in call 1; medians of call 2's three rounds 0.995-1.041x (N 1024 full
//   310.6 against 305.9, N 8192 354.2 against 345.6). D 64: 0.99-1.05x. D 96 and 256 run v9's code.
//   Nsight Compute at D 128 N 1024 (B 16, H 16; call1_ncu_fwd_N1024_*.txt): 154.8 M warp
//   instructions (v7 168.4 M in the ninth session; FlashAttention-2 166.6 M), 786 K cycles
//   (v7 814 K, FA2 733 K). Small, as 08/v4 found: the instructions went, the time mostly stayed.
//   The same profile says where the rest of the gap is: the loop's ldmatrix count is 1.2x FA2's
//   (12.6 M against 10.5 M: Q is re-read every 32 keys, FA2 every 64), and the epilogue (after the
//   last MMA) holds 6.0% of the warp samples against FA2's 3.1%. v11 and v12 take those two.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v10, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

// v9's tiles, with the K/V copies planned once per thread (this rung).
template <int D>
struct TilesV10 : TilesV6<D> {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineLoads = true;
  static constexpr bool kHoistCopies = true;
};

struct RungV10 {
  static constexpr const char* kName = "05/v10_hoisted_copy_addresses";
  template <int D>
  using Tiles = TilesV10<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV10::kName,
             fa::mtiles_forward<fa::RungV10>,
             "v9 with each thread's K/V cp.async sources and destinations worked out once",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
