// v13_q_tile_128_at_d64.cu: 06/v12_one_barrier_fewer with one idea: at D = 64 a Q tile is 128
// queries instead of 64. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise
// deterministic (dQ by atomics, as in v3-v12).
//
// Why. v12 reaches 0.85x FlashAttention-2 at every protocol shape but D = 64, non-causal, N 8192
// and 16384 (0.84x, 0.82x; H100, 2026-11-25). At D = 64 each Q tile is half the MMAs it is at
// D = 128, while what a tile costs besides its MMAs stays: two barriers, the L and D loads, the
// round of dQ atomics, the prologue of every warp's loops. FlashAttention-2 picks other tiles at
// D = 64 than at D = 128: run_mha_bwd_hdim64 in Dao-AILab/flash-attention
// (csrc/flash_attn/src/flash_bwd_launch_template.h) uses Flash_bwd_kernel_traits<64, 128, 128, 8,
// 4, 4, 4, ...> where a block may have 144 KiB: 128 queries per Q tile.
//
// What changed (kBrW in ch06_warp_tiles_kernel.cuh): at D = 64, 128 queries per Q tile. The warps
// of S and dP are 4 x 2, each 32 queries x 64 keys (S and dP: 64 registers each, where dK and dV
// take 64 together at D = 64); those of dQ 4 x 2, each 32 queries x 32 columns; dK and dV keep
// v12's 4 x 2 of 32 keys x 32 columns, over twice the queries per tile. Shared memory: 178 KiB
// (Q, dO, P and dS tiles twice the rows): more than an A100's 163 KiB, where v13 reports D 64 as
// unsupported (v12 runs it in 107 KiB). D = 128 runs v12's kernel unchanged.
//
// ptxas (CUDA 13.0, sm_90) at D 64: 254 registers, no spills (v12: 233).
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, PyTorch SDPA in the same call:
// notes/measured/h100-2026-11-25/call8_v13_sdpa.log, call8_v13_bench.log)
//   D 64: 1.05-1.13x v12 (in the same call) at every shape; N 8192 259.7 TFLOP/s (v12 231.0;
//   FlashAttention-2 277.5, 0.94x), N 16384 261.5 (FA2 284.6, 0.92x); causal N 8192 249.6 (FA2
//   244.8, 1.02x). D 128 runs v12's code: 0.99-1.00x v12 in the same call, the call's noise.
//   With v13 every protocol shape (D 64 and 128, N 1024 .. 16384, causal and not) is at 0.90x
//   FA2 or better: 0.90x (D 128 N 16384) to 1.20x (D 128 N 1024 causal).
#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, 13>: this rung
#include "registry.h"

namespace {

struct V13 : WarpTilesRung<13> {
  static constexpr const char* kName = "06/v13_q_tile_128_at_d64";
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {V13::kName,
             kv128_backward<V13>,
             "v12 with Q tiles of 128 queries at D 64 (4 x 2 warps of 32 x 64 for S and dP)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
