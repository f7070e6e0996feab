// v6_skip_unmoved_rescale.cu: v5 (v5_bc32_for_registers.cu) with one change: O is rescaled by
// alpha only when the running max of one of its rows moved; when no row of an m16 tile got a new
// max in this K/V tile, the warp skips the D / 2 multiplies per thread of that tile's O.
//
// Why: after v5 the D 128 kernel is short of tensor-core work per instruction, not of registers.
//   Per 32-key tile a warp issues 64 MMAs for S and 64 for P V; the O rescale is D / 8 x 4 = 64
//   FMULs per thread per m16 tile, 128 at kM = 2: as many instructions as the MMAs themselves
//   (v5's Bc = 32 doubled their share; at Bc = 64 it was half as many per key). Yet alpha = 1
//   for most tiles: row i's max moves at tile j only if tile j holds the largest score seen so
//   far, which for scores in no particular order happens with probability about 1/j. After the
//   first few tiles nearly every tile leaves every max where it was.
//
// What changed vs v5
//   * A row whose max did not move gets alpha = 1 exactly (not 2^(c m - c m) through ex2.approx,
//     which may round to 1 + 1 ulp), so l and O are untouched for it.
//   * Per m16 tile, the warp votes (__any_sync) whether any of its 16 rows has alpha != 1; if none
//     has, the O multiplies of that tile are skipped. The vote makes the branch warp-uniform: no
//     divergence, and skipping a multiply by exactly 1 changes no bit of the result.
//   * Only where Bc = 32 (D = 96, 128 and 256). With Bc = 64 (D = 32, 64) the rescale is half as
//     many instructions as the MMAs, and the skip measured slower than no skip: the branch cuts
//     the tile's code in two, so ptxas can no longer hide the multiplies among the MMAs and
//     exponentials around them. Measured with the skip at every head dim (call 4, below): D 64
//     N 8192 314.7 TFLOP/s against v5's 336.9; slower than v5 at 11 of the 12 D 64 shapes, by
//     up to 8%.
//
// Speed (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D; fa_bench and PyTorch SDPA in
// the same call: notes/measured/h100-2026-11-23d/call4_sdpa.log, call4_bench.log):
//   D 128, N 8192: 336.6 TFLOP/s (v5 292.7; FlashAttention-2 351.0, 0.96x), causal 311.5 (v5
//   292.0; FA2 318.1, 0.98x). That +15% over v5 is partly v5's sample: the same kernel made 316.0
//   at that shape in call 3. At the other D 128 shapes of the call v6 is 2% slower (causal N
//   1024) to 7% faster than v5. Over N 1024 .. 16384 at D 128: 0.89x to 0.98x FA2, short of it
//   still (notes/05 section 8 has the profile). At D 64, v4/v5 are the ones at 1.01x to 1.11x.
//   Nsight Compute at D 128 N 8192 (call4_ncu_fwd_v6_skip_unmoved_rescale.txt): 1.109 G
//   instructions against v5's 1.299 G (-15%), tensor pipe busy 54.5% (v5 51.3%, FA2 57.1%).
//   The limit to Bc = 32 came after call 4; the session's last call timed it (notes/05 section 8).
//
// The code: v6's tiles (TilesV6: kExactAlpha, kSkipRescale) are in ch05_tiles_v6.cuh, which
// 05/v7 builds on; the kernel and its launcher, shared with v4 and v5, are ch05_mtiles_kernel.cuh's,
// where kExactAlpha marks this rung's change.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v7, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // this rung's tiles
#include "registry.h"

namespace fa {
namespace {

struct RungV6 {
  static constexpr const char* kName = "05/v6_skip_unmoved_rescale";
  template <int D>
  using Tiles = TilesV6<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV6::kName,
             fa::mtiles_forward<fa::RungV6>,
             "v5 + O rescaled only when a row max moved (warp vote per m16 tile)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
