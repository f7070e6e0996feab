// t11_warp_tiles.cu: 06/v4_bc128_tuned with one idea: FlashAttention-2's warp tiles. Each product
// of the backward gets the warp layout that loads the fewest fragments for it, and P and dS go
// through shared memory to get from the layout of one product to the next. bf16 / fp16 in,
// mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3 and v4).
//
// Why. In v4 each warp owns 16 keys of the block's 128 and all D columns of dK and dV, so P^T and
// dS^T stay in the registers where S^T and dP^T were computed, and feed dV and dK directly. The
// price: all eight warps load the same Q and dO fragments, for S^T, dP^T, dV and dK. Counted per
// block and pair of tiles (notes/06_flash_backward.md, section 5c), that is 1408 ldmatrix.x4 where
// FlashAttention-2's layout needs 1152; Nsight Compute measured 1.22x FA2's ldmatrix wavefronts
// for v4 (H100, 2026-11-25, D 128 N 8192), whose dK/dV kernel is 0.77-0.78x FA2's at every N from
// 1024 to 16384. Shared memory is the unit this kernel waits for.
//
// What changed (ch06_warp_tiles_kernel.cuh; the rest is v4's):
//   * S = Q K^T and dP = dO V^T: warp (wm, wn) = (warp / 4, warp % 4) computes 32 queries x 32
//     keys. Per k16 step it loads 2 A (Q) and 2 B (K) fragments for 8 MMAs: 32 loads per product
//     per warp, against v4's 40 (1 A and 4 B for 8 MMAs).
//   * P and dS, 16-bit, into shared memory (64 queries x 128 keys each, padded rows), then a barrier.
//   * dV += P^T dO and dK += dS^T Q: warp (wk, wd) = (warp % 4, warp / 4) owns 32 keys x D / 2
//     columns. A = P^T (ldmatrix .trans of the P tile), 2 per k16 step; B = dO, D / 32 per step:
//     24 loads per product per warp at D 128, against v4's 32. The accumulators are the same size
//     as v4's (32 keys x 64 columns x 2 = 16 keys x 128 columns x 2).
//   * dQ += dS K: v4's 32 x 32 warp tiles, with A = dS read from the P-layout tile (not
//     transposed): warp (wq, wc) = (warp / 4, warp % 4).
//   The stores of P and dS cost 2 x 64 x 128 x 2 B per tile pair, where v4 stored dS^T only.
//   D 64 and 128; D 32 and 96 run v4's kernel (kv128_kernel with every switch on).
//   Two details differ from v4's code because the kernel is new, not because they are ideas of
//   their own: a swizzled read flips its address with one XOR (swz_addr; two instructions a read)
//   instead of v4's four bases per address (LaneAddr), which would take 21 more registers for
//   this kernel's seven ldmatrix addresses beside accumulators that already fill 253; and the dQ
//   atomics of a thread use one pointer plus constant offsets.
//   Shared memory: 171 KiB at D 128, more than an A100's 163 KiB: there t11 reports D 128 as
//   unsupported (06/v4_bc128_tuned runs it in 155 KiB).
//
// ptxas (CUDA 13.0, sm_90): 253 registers at D 128, 231 at D 64, no spills.
//
// Measured (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, PyTorch SDPA in the same
// run: notes/measured/h100-2026-11-25/v11_sdpa.log, v11_bench.log)
//   1.01-1.08x v4 (in the same run) at every shape, 1.04-1.08x at D 128 from N 1024 on;
//   D 128 N 8192: 256.5 TFLOP/s (v4 237.2; FlashAttention-2 297.9, 0.86x); causal 250.5 (FA2
//   260.2, 0.96x). Over N 1024 .. 16384: 0.77x (D 64, N 16384) to 1.04x FA2.
//   Nsight Compute (D 128 N 8192, ncu_bwd_*_v11.txt, ncu_bwd_opcodes_v11.txt): 302.0 M
//   ldmatrix and 1208 M wavefronts, 68.16 M shared stores: exactly FA2's counts (v4: 369.1 M,
//   1476 M, 34.6 M). 12.38 ms against FA2's 10.34; tensor pipe busy 40.9% (v4 37.9%, FA2
//   49.9%). What is left: barrier stalls, 108 K per warp against FA2's 31 K (t12).
//   That run had a first form of the dQ atomics, with a pointer per row; the form here (one
//   pointer, constant offsets) ran at 255.6 as t12's baseline (v12_sdpa.log; PTX unchanged
//   since).
// Speed (H100 80GB HBM3, 2026-11-25): D 128 N 8192 bf16 256.5 TFLOP/s, v4_bc128_tuned 237.2.
#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, Steps>: this step
#include "registry.h"

namespace {

struct T11 : WarpTilesStep<WarpTilesSteps> {
  static constexpr const char* kName = "06/t11_warp_tiles";
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T11::kName,
             kv128_backward<T11>,
             "v4 with FlashAttention-2's warp tiles: 32 x 32 of S and dP, 32 keys x D/2 of dK and "
             "dV, P and dS through shared memory (D 64, 128)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
