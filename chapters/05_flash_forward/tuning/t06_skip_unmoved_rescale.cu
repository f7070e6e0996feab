// t06_skip_unmoved_rescale.cu: tuning step 6, t05 (t05_bc32_for_registers.cu) with one change: O is
// rescaled by alpha only when the running max of one of its rows moved; when no row of an m16
// tile got a new max in this K/V tile, the warp skips the D / 2 multiplies per thread of that
// tile's O.
//
// Why: after t05 the D 128 kernel is short of tensor-core work per instruction, not of registers.
//   Per 32-key tile a warp issues 64 MMAs for S and 64 for P V; the O rescale is D / 8 x 4 = 64
//   FMULs per thread per m16 tile, 128 at kM = 2: as many instructions as the MMAs themselves
//   (t05's Bc = 32 doubled their share; at Bc = 64 it was half as many per key). Yet alpha = 1
//   for most tiles: row i's max moves at tile j only if tile j holds the largest score seen so
//   far, which for scores in no particular order happens with probability about 1/j. After the
//   first few tiles nearly every tile leaves every max where it was.
//
// What changed vs t05
//   * A row whose max did not move gets alpha = 1 exactly (not 2^(c m - c m) through ex2.approx,
//     which may round to 1 + 1 ulp), so l and O are untouched for it.
//   * Per m16 tile, the warp votes (__any_sync) whether any of its 16 rows has alpha != 1; if none
//     has, the O multiplies of that tile are skipped. The vote makes the branch warp-uniform: no
//     divergence, and skipping a multiply by exactly 1 changes no bit of the result.
//   * Only where Bc = 32 (D = 96, 128 and 256). With Bc = 64 (D = 32, 64) the rescale is half as
//     many instructions as the MMAs, and the skip measured slower than no skip: the branch cuts
//     the tile's code in two, so ptxas can no longer hide the multiplies among the MMAs and
//     exponentials around them. Measured with the skip at every head dim (bench_05v6.log): D 64
//     N 8192 314.7 TFLOP/s against t05's 336.9; slower than t05 at 11 of the 12 D 64 shapes, by
//     up to 8%.
//
// Speed (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D; fa_bench and PyTorch SDPA in
// the same run: notes/measured/h100-2026-11-23d/sdpa_05v6.log, bench_05v6.log):
//   D 128, N 8192: 336.6 TFLOP/s (t05 292.7; FlashAttention-2 351.0, 0.96x), causal 311.5 (t05
//   292.0; FA2 318.1, 0.98x). That +15% over t05 is partly t05's sample: the same kernel made 316.0
//   at that shape in the run before (bench_05v5.log). At the other D 128 shapes of the run t06 is
//   2% slower (causal N 1024) to 7% faster than t05. Over N 1024 .. 16384 at D 128: 0.89x to
//   0.98x FA2, short of it still (notes/measured/ch05_history.md has the profile). At D 64,
//   t04/t05 are the ones at 1.01x to 1.11x.
//   Nsight Compute at D 128 N 8192 (ncu_fwd_v6_skip_unmoved_rescale.txt): 1.109 G
//   instructions against t05's 1.299 G (-15%), tensor pipe busy 54.5% (t05 51.3%, FA2 57.1%).
//   The limit to Bc = 32 came after that run; the next one timed it (bench_stages.log,
//   notes/measured/ch05_history.md).
//
// The code: this step's tiles are TilesT06 (ch05_tuning_tiles.cuh: kExactAlpha, kSkipRescale);
// the kernel and its launcher are ch05_mtiles_kernel.cuh's, where kExactAlpha marks this step's
// change.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of t04-t11, given a step's tiles
#include "ch05_tuning_tiles.cuh"   // TilesT06
#include "registry.h"

namespace fa {
namespace {

struct StepT06 {
  static constexpr const char* kName = "05/t06_skip_unmoved_rescale";
  template <int D>
  using Tiles = TilesT06<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::StepT06::kName,
             fa::mtiles_forward<fa::StepT06>,
             "t05 + O rescaled only when a row max moved (warp vote per m16 tile)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
