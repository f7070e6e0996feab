// t05_bc32_for_registers.cu: tuning step 5, t04 (the main path's v3_fa2_warp_layout.cu) with one
// change: at head dims 96 and 128 a K/V tile is 32 keys instead of 64, which halves the S
// accumulator and ends t04's spills.
//
// Why: what Nsight Compute saw (H100 80GB HBM3, bf16, N 8192, B 2, H 16; 2026-11-23;
// notes/measured/ch05_history.md)
//   t04 at D 64 did what it promised: ldmatrix count 134 M -> 67 M, tensor pipe busy 44% -> 53%,
//   1.06x FlashAttention-2's forward at N 8192 (317.7 TFLOP/s against 301.0 measured in the same
//   run; t03: 275.2). At D 128 it did not: 270.3 against FA2's 349.0 (t03 267.7), tensor pipe 43%.
//   Registers hit it twice there. The live set is O (32 rows x 128 fp32 per warp = 128 registers
//   per thread), S (32 rows x Bc keys: 64 registers at Bc = 64), the Q and K fragments of a k16
//   slice, the softmax state and the addresses: a little more than 255. So ptxas spills (64 bytes;
//   ncu counts 12.6 M local-memory loads), and to keep the spills that small t04 leaves the k16
//   loop of S = Q K^T rolled, so each slice waits for its own ldmatrix: short-scoreboard stalls
//   (shared-memory results) 2.9x t03's. Spilling alone is survivable: FA2's own D 128 kernel
//   makes 14.7 M local loads (ncu_fa2_fwd_d128.txt) and still keeps its tensor pipe 57%
//   busy. The rolled loop is the likelier cost.
//
// What changed vs t04
//   * Bc = 32 keys per K/V tile at D = 96 and 128 (64 elsewhere, as before). S is 32 x 32 per warp:
//     32 registers per thread instead of 64. ptxas (CUDA 13.0, sm_90): D 128 255 registers and no
//     spills, D 96 221; t04: 64 and 48 bytes of spills.
//   * With the registers back, the k16 loop of S = Q K^T is unrolled in full again (t04 had to
//     stop ptxas from hoisting the loads of many slices; 12 bytes of spills at D 128 if it is kept
//     at 2).
//   * The shared-memory layout has its own K/V buffer size (Bc rows): 68 KiB at D = 128 instead of
//     102 KiB.
//   The price: twice as many K/V tiles, so twice the barriers, the mask tests and the O rescales
//   (alpha) per key. FlashAttention-2 makes the same choice for D = 128, non-causal, on sm_86/89
//   (128 x 32 there, "the fastest for non-causal since we get 2 CTAs per SM"; 128 x 64 on A100
//   and H100: run_mha_fwd_hdim128 in Dao-AILab/flash-attention,
//   csrc/flash_attn/src/flash_fwd_launch_template.h).
//
// Speed (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D; fa_bench with PyTorch SDPA in
// the same run: notes/measured/h100-2026-11-23d/sdpa_05v5.log, bench_05v5.log)
//   D 128, N 8192: 316.0 TFLOP/s (t04 270.4; FlashAttention-2 338.8, 0.93x); causal 297.2 (t04
//   244.5; FA2 315.5, 0.94x). Over N 1024 .. 16384 at D 128: 0.82x to 0.96x FA2.
//   Nsight Compute (sdpa_05v5.log's table, ncu_fwd_v5_bc32_for_registers.txt): no local
//   loads, tensor pipe busy 51% (t04 43%), short-scoreboard stalls half of t04's, 100.7 M ldmatrix
//   (t04 83.9 M: Q is now read from shared memory once per 32 keys instead of once per 64).
//   At D 64 nothing changed (Bc stays 64): t05 has t04's tiles and loops there.
//
// The code: this step's tiles are TilesT05 (ch05_tuning_tiles.cuh); the kernel and launcher are
// ch05_mtiles_kernel.cuh's.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of t04-t11, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT05
#include "registry.h"

namespace fa {
namespace {

struct StepT05 {
  static constexpr const char* kName = "05/t05_bc32_for_registers";
  template <int D>
  using Tiles = TilesT05<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::StepT05::kName,
             fa::mtiles_forward<fa::StepT05>,
             "t04 (= v3) with Bc = 32 at head dims 96 and 128: S halves, the spills go",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
