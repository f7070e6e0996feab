// t07_swizzled_smem.cu: tuning step 7, t06 (t06_skip_unmoved_rescale.cu) with Q, K and V stored
// swizzled instead of padded in shared memory. One idea: rows that start at 128-byte boundaries,
// so that each cp.async fills whole lines of shared memory and asks L2 for each sector once.
//
// Why: the padded rows (D + 8 elements, so that the eight rows of an ldmatrix 8x8 matrix fall into
//   eight bank groups) start 16 bytes further modulo 128 from one row to the next. A warp's
//   cp.async of whole rows then straddles 128-byte lines, and Nsight Compute counts the copies'
//   shared-memory wavefronts and L2 sectors well above the ideal: in chapter 08's split kernel
//   2.6x and 1.5x (notes/08_decoding.md, "The answer"), in chapter 06's dK/dV kernel 2.6x and 1.5x
//   as well (H100, 2026-11-23: 178.9 M wavefronts for an ideal 68.2 M;
//   notes/measured/h100-2026-11-23f/sass_v7.csv.gz read by bench/sass_memory.py). This
//   kernel copies K and V the same way. FlashAttention-2's copies, into its swizzled tiles, are at
//   the ideal counts. In chapter 08 the swizzle alone made the split kernel 6% faster.
//
// What changed vs t06
//   * Tiles of D elements per row, unpadded, with 16-byte chunk c of row r stored at chunk
//     c ^ (r % 8) of its 128-byte group (fa::tiles::swizzled_offset; the cp.async loader's
//     kSwizzled form). The eight rows of one ldmatrix matrix (same logical chunk, r % 8 = 0 .. 7)
//     still land in eight different bank groups.
//   * Each lane's ldmatrix rows are lane % 8 modulo 8 (every fragment is 16 rows further, or 16
//     elements along), so the lane's swizzled address is t06's with bits 4-6 flipped by one lane
//     constant. Flipping them per read costs two instructions (the XOR, and the add that is no
//     longer folded into the ldmatrix); four bases per tile instead (fa::tiles::LaneAddr, one per
//     16-column step modulo 4) keep every read a base plus a compile-time constant, as in t06.
//   * The epilogue stages O through the warp's own rows of sQ in the same layout (store_o_tile).
//   * D 32 and 96 keep t06's padded rows: a row of 4 or 12 chunks does not fill whole 128-byte
//     groups. Shared memory at D 128: 64 KiB instead of 68 (the padding is gone).
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, t06 and PyTorch SDPA in the
// same run: notes/measured/h100-2026-11-25/v7_bench.log, v7_sdpa.log)
//   D 256: 1.11-1.24x t06 at all 12 shapes; N 8192 291.6 TFLOP/s (t06 246.0; FlashAttention-2
//   327.7, 0.89x). Here a block has 64 query rows, so each byte copied feeds half the MMAs it
//   feeds at D 128, and the copies' waste was a large share of the time.
//   D 128: 0.98-1.04x t06 (and an outlier, N 8192: 344.4 against t06's 300.5); 0.91-0.99x FA2.
//   D 64: 0.93-1.03x t06, below 1 from N 2048 on. The four bases cost registers (ptxas, CUDA 13.0:
//   4 bytes of spills at D 64 and 8 at D 128, t06 none), the copies were a small share of the
//   time there, and t06 stays the faster kernel at D 64.
//   Nsight Compute (D 128 N 8192, ncu_fwd_memory.txt, ncu_fwd_memory.txt): the copies at
//   the ideal counts (67.63 M wavefronts, 270.53 M L2 sectors: FlashAttention-2's); 3.89 ms against
//   FA2's 3.67; tensor pipe busy 54.2% (FA2 57.1%); 1.128 G instructions (t06 1.109 G, 2026-11-23).
//   The form that XORed each read (its logs not kept) ran 1.248 G instructions and was 1-7% slower
//   than t06 at D 64 and 128.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of t04-t11, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT07
#include "registry.h"

namespace fa {
namespace {

struct StepT07 {
  static constexpr const char* kName = "05/t07_swizzled_smem";
  template <int D>
  using Tiles = TilesT07<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::StepT07::kName,
             fa::mtiles_forward<fa::StepT07>,
             "t06 with Q, K and V swizzled instead of padded in shared memory (D 64, 128, 256)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
