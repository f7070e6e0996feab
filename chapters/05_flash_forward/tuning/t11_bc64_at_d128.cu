// t11_bc64_at_d128.cu: tuning step 11, t10 (t10_hoisted_copy_addresses.cu) with Bc = 64 again at
// D 128. One idea: t05 halved the K/V tile at D 128 because 64 keys did not fit the registers; t08
// and t10 freed enough of them.
//
// Why: at Bc = 32 every 32 keys pay a step's fixed costs: the Q fragments read again from shared
//   memory (16 ldmatrix per warp at D 128, whatever Bc is), a barrier, the row max and sum
//   shuffles, the rescale test. t10's Nsight Compute profile at N 1024 counts 12.6 M ldmatrix
//   against FlashAttention-2's 10.5 M, which runs 128 x 64 tiles at D 128 on the H100. t05's
//   reason for 32 was registers: O (128 per thread) + S (64 at Bc = 64) + fragments and addresses
//   came to a little more than 255 and ptxas spilled in the loop. t08 (one set of lane addresses
//   for Q and V) and t10 (a two-register copy plan instead of load_tile_async's temporaries)
//   gave some back. ptxas (CUDA 13.0, sm_90) now fits Bc = 64 at D 128 in 255 registers with 8
//   bytes of spills, outside the loop (one 64-bit value stored after the prologue, reloaded in the
//   epilogue). Without t06's rescale skip it spills 100 bytes, without t09's pipelined loads 56:
//   both stay on.
//
// What changed vs t10: kBc (and kSTiles) at D 128, nothing else. Shared memory per block: 32 KiB
//   of Q + 2 x 2 x 16 KiB of K/V = 96 KiB, two blocks per SM (227 KiB). Other head dims keep t10's
//   tiles (D 96 stays at 32 keys: t10's plan does not cover it, and it is not measured against
//   FA2).
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D; notes/measured/
// h100-2026-11-25c/rounds_d128_v11.md: medians of three alternating rounds, PyTorch SDPA in
// each)
//   D 128 against t10: 1.022-1.055x non-causal, 1.007-1.042x causal; N 8192 361.9 TFLOP/s, N 1024
//   321.6. Against FlashAttention-2: 0.965 (N 1024), 0.967 (2048), 0.997 (4096), 1.025 (8192),
//   1.044 (16384); causal 1.020-1.039.
//   Nsight Compute at N 1024 (ncu_fwd_n1024_*_v11.txt): ldmatrix 10.5 M (= FA2's), 131.1 M warp
//   instructions (FA2 166.6 M), 759 K cycles (t10 786 K, FA2 734 K). What is left: the epilogue,
//   1043 instructions per warp and 6.4% of the samples (FA2: 572 and 3.1%). t12, the main path's
//   v5_fewer_instructions.cu, takes it.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of t04-t11, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT11
#include "registry.h"

namespace fa {
namespace {

struct StepT11 {
  static constexpr const char* kName = "05/t11_bc64_at_d128";
  template <int D>
  using Tiles = TilesT11<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel, {fa::StepT11::kName,
                                 fa::mtiles_forward<fa::StepT11>,
                                 "t10 with 64 keys per K/V tile at D 128",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128, 256},
                                 80});
