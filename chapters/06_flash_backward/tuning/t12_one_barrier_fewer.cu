// t12_one_barrier_fewer.cu: 06/t11_warp_tiles with one idea: two barriers per Q tile instead of
// three. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by
// atomics, as in v3, v4 and t11).
//
// Why. Nsight Compute (H100, 2026-11-25, D 128 N 8192): t11's warps stall at barriers 3.5x as
// long as FlashAttention-2's (108 K against 31 K per warp), most of it at the barrier that ends a
// tile and the one that starts the next, with only the prefetch of the next tile between them.
//
// What changed (kOneBarrierFewer in ch06_warp_tiles_kernel.cuh): t11 ends tile i with a barrier
// (every warp is done with tile i's Q and dO buffer, P, dS, L and D) and starts tile i + 1 by
// issuing the prefetch of tile i + 2, waiting for tile i + 1's copies and a second barrier. t12
// waits for tile i + 1's copies first (then they are the only ones in flight), passes one
// barrier, which says both things at once, and only then issues the prefetch of tile i + 2 into
// the buffer tile i used. The prefetch distance is still one tile.
//
// ptxas (CUDA 13.0, sm_90): 252 registers at D 128, 233 at D 64, no spills.
//
// Measured (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, PyTorch SDPA in the same
// run: notes/measured/h100-2026-11-25/v12_sdpa.log, v12_bench.log)
//   1.02-1.11x t11 (in the same run) at every shape; D 128 N 8192: 273.3 TFLOP/s (t11 255.6;
//   FlashAttention-2 293.4, 0.93x); causal 256.1 (FA2 268.1, 0.96x). Over N 1024 .. 16384:
//   0.82x (D 64, N 16384) to 1.15x FA2 (D 128 N 1024 causal); at least 0.85x at every D 128 shape
//   and at D 64 up to N 4096 (causal: every N).
//   Nsight Compute (D 128 N 8192, ncu_bwd_*_v12.txt): barrier stalls 66 K per warp (t11
//   108 K, FA2 31 K); 11.77 ms against FA2's 10.74; tensor pipe busy 43.8% (FA2 50.0%).
//   Measured again as the baseline of a step that was dropped (x_v13_bench.log): 277.0 at
//   D 128 N 8192 (FA2 290.8, 0.95x).
// Speed (H100 80GB HBM3, 2026-11-25): D 128 N 8192 bf16 273.3 TFLOP/s, t11 255.6.
#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, Steps>: this step
#include "registry.h"

namespace {

// This step's switch on.
struct StepsT12 : WarpTilesSteps {
  static constexpr bool kOneBarrierFewer = true;
};

struct T12 : WarpTilesStep<StepsT12> {
  static constexpr const char* kName = "06/t12_one_barrier_fewer";
};

}  // namespace

FA_REGISTER(AttentionBwdKernel, {T12::kName,
                                 kv128_backward<T12>,
                                 "t11 with two barriers per Q tile instead of three (D 64, 128)",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128},
                                 80,
                                 false});
