// 08/v5_block_stream: 08/v4_hoisted_addresses with four warps per block sharing one stream of K
// and V. One idea: the same arithmetic, fed by bigger and fewer bursts of memory traffic.
//
// Why. After v4 cut the instructions of a step by a third (PTX), the grouped shape (B 8, H 32,
// H_kv 8, seq_k 32768, bf16, D 128) sped up by 1% only: 2741 GB/s against v3's 2701 (H100,
// 2026-11-23, notes/measured/h100-2026-11-23e/call1_decode.log). Throwaway variants that cut the
// arithmetic further (skip the O rescale when no row's max moved, mask only the edge steps,
// ex2.approx, split the S accumulation into two chains, 32 keys per step) moved it by -2% to +1%,
// though Nsight Compute counted 35% fewer instructions for the best of them. The arithmetic is
// not the bound. What v3 and v4 do differently from the kernels that stream faster (v2 on the
// multi-head shapes, 3020 GB/s; FlashAttention-2 on this one, 3011) is the shape of the traffic:
// 768 one-warp blocks, each reading K and V as 4 KB bursts (16 keys x 256 B), 1536 streams at once.
//
// What changed. A block is four warps (kThreads = 128). The block copies a tile of kTile = 64
// keys (16 KB of K and 16 KB of V at D 128) into a two-stage ring with v4's copy plan spread over
// 128 threads, one __syncthreads per step (the ring has no per-warp stages any more). Warp w
// computes keys [16 w, 16 w + 16) of every tile with exactly v4's step and keeps its own (m, l, o):
// its keys are every fourth 16-key slice of the split, not a contiguous range. At the end the four
// states of each row are folded with chapter 02's pair merge (ch02::gpu::merge, rescale) through
// shared memory, and the block writes one partial per row, as v4 did (or O and L with one split).
// That the keys are interleaved does not matter: the operator is associative and commutative, so
// any partition of a row's keys, folded in any order, gives the same (m, l, o) up to rounding.
// Shared memory: 2 stages x (K + V) x 64 keys x (D + 8) x 2 B = 69632 B at D 128 (opt-in past
// 48 KiB), 2 blocks (8 warps) per H100 SM, capped by registers (206 x 128 threads per block at D 128).
// The grid: 256 blocks at this shape, 512 streams of 16 KB bursts, about what FlashAttention-2
// runs (256 blocks of 4 warps, 32 KB bursts; notes/measured/h100-2026-11-23d/call1_ncu_fa2_*).
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, fifth session, call 6 at commit 19f12a2;
// bench/compare_decode.py, bf16 D 128, seq_q 1, copy ceiling 2856 GB/s, SDPA in the same run:
// notes/measured/h100-2026-11-23e/call6_decode.log). Grouped shape: 2841 GB/s (99.5% of copy), v4
// 2742, FlashAttention-2 3016. B 1, H 16, seq_k 131072: 2825 (v4 2781); B 8, H 32: 2919 (v4 2878).
// The throwaway versions measured before (calls 2 and 3: one partial per warp, merged by v2's
// merge kernel) gave the same: 2843 and 2836 on the grouped shape, where 3 stages instead of 2
// (two tiles in flight, 2 blocks per SM still) gave 2719, and 8 warps on 128-key tiles (32 KB
// bursts, 1 block per SM) 2849 and 2818: more bytes in flight did not help, bigger bursts past
// 16 KB neither.
#include <cuda_runtime.h>

#include "ch08_block_stream.cuh"  // the kernel (v5's, with the copy hint as a template flag)
#include "ch08_mma_split.cuh"     // mma_split_forward: the checks and the dtype / head-dim dispatch
#include "registry.h"

namespace {

struct Rung : BlockStream</*kL2Hint=*/false> {
  static constexpr const char* kName = "08/v5_block_stream";
};

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/v5_block_stream",
             mma_split_forward<Rung>,
             "v4 with four warps per block sharing one K/V stream: the block copies 64-key tiles "
             "(16 KB bursts at D 128) into a 2-stage ring, each warp computes 16 keys of every "
             "tile, chapter 02's merge folds the four warps in the block; v2's merge the splits",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
