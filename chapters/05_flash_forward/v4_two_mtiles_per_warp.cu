// v4_two_mtiles_per_warp.cu: v3 (v3_fused_scale_warp_skip.cu) with one change: each warp owns
// 32 query rows (two m16 tiles) instead of 16, so every K or V fragment it loads from shared
// memory feeds two tensor-core MMAs instead of one. The 128-row Q tile is now 4 warps, not 8.
// Everything else (the softmax with the scale in the exponent's FMA, the per-warp causal skip,
// the padded shared-memory tiles, cp.async double buffering, P reused from registers) is v3's.
//
// Why: what Nsight Compute saw (H100, bf16, D 128, N 8192, B 2, H 16; 2026-11-23; notes/05)
//   v3 issued 134 M ldmatrix for 4.73 ms of kernel; FlashAttention-2's forward on the same problem
//   issued 84 M for 3.59 ms, with its tensor pipe busy 57% of the cycles against v3's 43%, and
//   1.82 instructions per cycle against 1.25 (both at 8 warps per SM). In v3 a warp's 16 rows are
//   one m16 tile: per k16 slice of S it loads one K fragment (ldmatrix.x4) per 2 MMAs, and per
//   16 keys of P V one V fragment per 2 MMAs. FA2 gives a warp 32 rows (its 128-row tile is 4 warps
//   of 2 m16 tiles each): the same fragment then serves both m16 tiles, 4 MMAs per ldmatrix.x4.
//
// What changed vs v3
//   * kRowsPerWarp 16 -> 32 (kM = 2 m16 tiles per warp), kWarps 8 -> 4 (128 threads), so Br stays
//     128 and the shared-memory layout is v3's. Every per-row array gains an m index: S is
//     s[kM][Bc/8][4], O is o_acc[kM][D/8][4], m, l, the last keys are [kM][2].
//   * S = Q K^T loads each K fragment once per k16 slice and issues it to both m16 tiles; O += P V
//     loads each V fragment once per 16 keys and issues it to both. Half the ldmatrix of K and V
//     per MMA.
//   * Registers: O is 32 x D fp32 per warp = D registers per thread (128 at D = 128), S 64. Q can
//     no longer stay in registers at D = 96 or 128 (another 48 or 64): there, as v3 does at
//     D = 256, each k16 slice of Q is read from shared memory when S is computed (one ldmatrix.x4
//     per m16 tile per slice, 2 per 4 K fragments). At D = 32 and 64 Q stays in registers.
//   * Blocks per SM: 128 threads with up to 255 registers: two blocks per SM at every D (v3 ran one
//     256-thread block at D = 96, 128). The same 8 warps per SM, but as two independent blocks:
//     while one waits at its barrier for a K/V tile, the other computes.
//   * D = 256 is v3 unchanged (kM = 1): the O accumulator alone is 128 registers for 16 rows, so
//     32 rows would not fit.
//
// Map (per block: one Q tile of 128 rows of one (batch, head); per warp: rows 32w .. 32w + 31, the
// thread owns rows g, g + 8 of m16 tile 0 (rows 32w + g, + 8) and of m16 tile 1 (+ 16)):
//   prologue   cp.async Q tile and K/V tile 0; wait; Q fragments into registers (D <= 64)
//   loop j     wait; __syncthreads; cp.async K/V tile j + 1 into the other buffer
//              skip if no row of this warp sees tile j (v3's idea 2)
//     (1) S = Q K_j^T: for each k16 slice, each K fragment -> 2 MMAs per m16 tile
//     (2) mask (only tiles at the ragged end or on the diagonal)
//     (3) online softmax of each m16 tile's two rows per thread (v3's, per m16 tile)
//     (4) O = alpha O + P V_j: each V fragment -> 2 MMAs per m16 tile
//   epilogue   O / l staged through the warp's own 32 rows of sQ (two 16-row halves), L
//
// Speed (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D; fa_bench with PyTorch SDPA in
// the same call: notes/measured/h100-2026-11-23d/call2_sdpa.log, call2_bench.log)
//   D 64, N 8192: 317.7 TFLOP/s (v3 275.2; FlashAttention-2 301.0, 1.06x); causal 309.3 (v3
//   269.2; FA2 295.1). At D 64 v4 is at 1.00x to 1.06x FA2 over N 1024 .. 16384, causal and not.
//   Nsight Compute (call2_ncu_ours_fwd_v4_d64.txt): ldmatrix 134 M -> 67 M, tensor pipe busy 44%
//   -> 53%, 4.65 -> 4.06 ms.
//   D 128, N 8192: 270.3 (v3 267.7; FA2 349.0): no gain. ptxas: 255 registers and 64 bytes of
//   spills; ncu: 12.6 M local-memory loads, tensor pipe 43% (call2_ncu_ours_fwd_v4_d128.txt), and
//   with the k16 loop rolled, 2.9x v3's short-scoreboard stalls (call4_ncu_fwd_v4_*.txt). v5 is
//   the rung that fixes it.
//
// The code: this file holds v4's tiles (TilesV4); the kernel and launcher, shared with v5 and v6,
// are ch05_mtiles_kernel.cuh's, and the matmuls ch05_mma_fwd_mtiles.cuh's.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v7, given this rung's tiles
#include "registry.h"

namespace fa {
namespace {

// v4's tiles: v3's Br and Bc, with the rows of a warp doubled where the registers allow it.
template <int D>
struct TilesV4 {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp (the idea of this rung)
  static constexpr int kWarps = Tiles<D>::kBr / (16 * kM);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 16 * kM;
  static constexpr int kBr = Tiles<D>::kBr;  // 128 (D <= 128) or 64: v3's, so is the smem layout
  static constexpr int kBc = Tiles<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kQInRegs = kM * D <= 128;  // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // With Q in shared memory nothing is indexed by the k16 slice, so the loop of S = Q K^T need not
  // be unrolled in full: fully unrolled, ptxas hoisted the K and Q loads of many slices ahead and
  // spilled at D = 128.
  static constexpr int kUnrollK = kQInRegs ? D / 16 : 1;
  static constexpr bool kExactAlpha = false, kSkipRescale = false;  // v6's, off
  static constexpr bool kSwizzle = false;                           // v7's, off
  static constexpr bool kOneLaneAddr = false;                       // v8's, off
  static constexpr bool kPipelineLoads = false;                     // v9's, off
  static constexpr bool kHoistCopies = false;                       // v10's, off
  static constexpr bool kStmatrixO = false;                         // v12's, off
  static_assert(kWarps == 4, "128 threads: two blocks per SM at up to 255 registers");
};

struct RungV4 {
  static constexpr const char* kName = "05/v4_two_mtiles_per_warp";
  template <int D>
  using Tiles = TilesV4<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV4::kName,
             fa::mtiles_forward<fa::RungV4>,
             "v3 with 32 query rows (two m16 tiles) per warp: each K/V fragment feeds 4 MMAs",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
