// t13_d256_tile_128x64.cu: tuning step 13, t11 (t11_bc64_at_d128.cu) with one idea at D 256: the
// block's tile becomes 128 queries x 64 keys with 8 warps, FlashAttention-2's tile for D 256 on
// the A100. Other head dims keep t11's tiles; this step registers D 256 only.
//
// Why: at D 256 t11 (and the main path's v4, which serves D 256) runs 64 queries x 32 keys with 4
//   warps of 16 rows, two blocks per SM: 0.86-0.94x FlashAttention-2 without a causal mask on the
//   H200 (notes/measured/h200-2026-12-01/ladder_fwd_d256_sdpa_compare.csv). Per 32 keys a warp
//   pays a step's fixed costs (a barrier, its 16 Q fragments read again from shared memory at D
//   256, the row max and sum shuffles), and each K/V byte copied into shared memory feeds 64 query
//   rows. 64 keys halve the first; 128 queries double the second.
//
// What changed vs t11, at D 256 only (TilesT13 in ch05_tuning_tiles.cuh): kWarps 4 -> 8, kBr 64
//   -> 128, kBc 32 -> 64, and kMinBlocks 2 -> 1 (__launch_bounds__ then lets ptxas use up to 255
//   registers for 256 threads). Shared memory: 64 KiB of Q + 2 x 2 x 32 KiB of K/V = 192 KiB, one
//   block per SM: 8 warps per SM, as before. With 256 threads a copy pass is 8 rows of 256
//   elements, the swizzle's period, so t10's copy plan now covers D 256 (it did not at 4 rows a
//   pass).
//   ptxas (CUDA 13.0, sm_90): 250 registers, no spills.
//
// Each half alone, measured in the same run (H200, 2026-12-04, bf16, notes/measured/
// h200-2026-12-04/fwd_d256_tiles_tried.log): 64 keys with 4 warps (one block of 160 KiB per SM, 4
//   warps per SM, 92 bytes of spills) 99-145 TFLOP/s, 0.46-0.52x v4; 128 queries with 8 warps and
//   32 keys 177-289, 0.92-0.94x v4. Together, in that run: 1.02-1.09x v4.
//
// Speed (H200, 2026-12-04, bf16, B = 16384/N, H = 2048/D; medians of three alternating rounds with
// PyTorch SDPA in each, notes/measured/h200-2026-12-04/rounds_fwd_d256_t13.md)
//   D 256 against v4: 1.06-1.09x without a mask, 1.03-1.09x causal; N 8192 327.4 TFLOP/s (v4
//   303.9). Against FlashAttention-2: 0.917 (N 512), 0.946 (1024), 0.967 (2048), 1.003 (4096),
//   1.008 (8192), 1.010 (16384); causal 0.952, 0.942, 0.963, 0.972, 1.034, 1.152. What is left:
//   the short rows. FlashAttention-2 runs 64 x 64 tiles with 4 warps on the H100 and H200,
//   single-buffered K and V in 96 KiB so that two blocks share an SM (its
//   flash_fwd_launch_template.h, run_mha_fwd_hdim256). Nsight Compute at N 1024 (ncu_fwd_D256_
//   N1024_*.txt): the same ldmatrix count and 8 warps per SM, half FA2's copy traffic, but 613 us
//   against 583, issue slots busy 27.6% against 31.5%, more barrier and long-scoreboard stalls:
//   one block's 8 warps wait at the same barriers, where two blocks of 4 fill each other's waits.
//   FA2's pipeline in this kernel (tried, the tuning README's row) spilled and ran 0.72-0.77x t13.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT13
#include "registry.h"

namespace fa {
namespace {

struct StepT13 {
  static constexpr const char* kName = "05/t13_d256_tile_128x64";
  template <int D>
  using Tiles = TilesT13<D>;
};

// D 256 only: the other head dims would compile t11's kernel a second time.
void t13_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.shape.head_dim != 256,
                    std::string(StepT13::kName) + ": head_dim " + std::to_string(a.shape.head_dim) +
                        " not instantiated (256 only; t11 has the others)");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return launch<StepT13, __nv_bfloat16, 256>(a, stream);
    case DType::F16:
      return launch<StepT13, __half, 256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(StepT13::kName) + ": takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel, {fa::StepT13::kName,
                                 fa::t13_forward,
                                 "t11 with FlashAttention-2's A100 tile at D 256: 128 queries x 64 "
                                 "keys, 8 warps",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {256},
                                 80});
FA_REGISTER_SMEM(fa::StepT13::kName, [](int d) {
  return fa::smem_at<256>(
      d, [](auto D) { return fa::SmemFor<fa::TilesT13<256>, decltype(D)::value>::kBytes; });
});
