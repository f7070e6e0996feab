// t08_one_lane_address.cu: tuning step 8, t07 (t07_swizzled_smem.cu) with one set of ldmatrix lane
// addresses for Q and V instead of two. One idea: registers t07's four-base addresses took, given
// back.
//
// Why: t07 keeps each lane's ldmatrix address into a swizzled tile as four bases (one per
//   16-column step modulo 4, fa::tiles::LaneAddr), so that every read is a base plus a constant.
//   It keeps three such sets, for Q, K and V: 12 registers live across the key loop, plus those
//   that shift the K and V sets to the current buffer. At D 64 and 128 the kernel sits at 255
//   registers and ptxas spills 4 and 8 bytes (t06, padded, spilled none).
//
// What changed vs t07
//   * A lane of an ldmatrix.x4 points at row (lane % 8) + 8 ((lane / 8) & 1) and column
//     8 (lane / 16) of its 16 x 16 block for Q (the A fragment) and for V (.trans): the same
//     mapping, so the same four bases serve both. V buffer b lies (Q tile + both K buffers - this
//     warp's Q offset + b * buffer) bytes past Q's lane address: one runtime offset per key tile
//     and four adds, where t07 kept a third set of bases. ptxas (CUDA 13.0): no spills at any D.
//   * K keeps its own mapping and bases. Reading K with Q's mapping as well (one set for all three
//     tiles) returns K's four 8 x 8 matrices with the middle two swapped, and an MMA's B operand
//     is a pair of consecutive registers: ptxas moved registers to rebuild the pairs. That form was
//     measured first (2026-11-25, notes/measured/h100-2026-11-25b/bench_first_forms.log,
//     sdpa_first_forms.log, ncu_fwd_ours_first_forms.txt): 5-14% slower
//     than t07 at D 128, and Nsight Compute counted 348 M IMAD (register moves among them) against
//     t07's 101 M in the same kernel with t09's loads on top.
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, TFLOP/s, t07 and PyTorch SDPA
// in the same run: notes/measured/h100-2026-11-25b/bench_final_forms.log, sdpa_final_forms.log)
//   D 128: 0.99-1.03x t07 (N 1024 306.1 against 298.0; N 8192 333.3 against 335.7).
//   D 256: 0.98-1.08x t07. D 64: 0.99-1.04x t07 (t06 stays faster at some D 64 shapes).

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of t04-t11, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT08
#include "registry.h"

namespace fa {
namespace {

struct StepT08 {
  static constexpr const char* kName = "05/t08_one_lane_address";
  template <int D>
  using Tiles = TilesT08<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::StepT08::kName,
             fa::mtiles_forward<fa::StepT08>,
             "t07 with one set of ldmatrix lane addresses for Q and V (the spills go)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
