// v7_two_steps_per_tile.cu: v6 (v6_skip_unmoved_rescale.cu) with one change: at head dims 96 and
// 128 a K/V tile in shared memory is 64 keys again, and the warps consume it as two steps of 32
// keys. S stays 32 keys wide (v5's register budget); the barriers and the copy rounds halve.
//
// Why: what Nsight Compute saw of v6 at D 128 (notes/05 section 8)
//   Against FlashAttention-2 in the same call, v6's warps stall nearly twice as often at barriers
//   (28.7 K against 15.3 K per warp): v5 halved the key tile to 32 for registers, and with it
//   doubled the tiles, so every 32 keys cost a __syncthreads, a cp.async wait and a round of
//   copy instructions. But the registers only ever needed S to be 32 keys wide, not the tile in
//   shared memory. Two blocks of v6 at D 128 use 2 x 68 KiB of the 228 KiB an SM has; 64-key
//   buffers make it 2 x 102 KiB, which still fits.
//
// What changed vs v6
//   * Tiles: kBcLoad = 64 keys per K/V buffer at D = 96 and 128 (kBc = 32 per step, as v5/v6).
//     Elsewhere kBcLoad = kBc: D 32 and 64 already step 64 keys, and at D 256 two blocks per SM
//     would not fit 64-key buffers.
//   * The kernel (ch05_mtiles_kernel.cuh): the loop over K/V tiles waits, synchronises and issues
//     the next tile's copies once per tile, then runs v6's step (S, mask, softmax, P V) on each
//     32-key half, the second half's ldmatrix addresses 32 rows further on. The `step` loop is
//     the whole change; with kBcLoad = kBc it runs once, and the PTX of v4-v6 is unchanged.
//
// The code: this file holds v7's tiles; the kernel and launcher are ch05_mtiles_kernel.cuh's.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v7, given this rung's tiles
#include "registry.h"

namespace fa {
namespace {

// v7's tiles: v6's, with 64-key K/V buffers at D = 96 and 128 (the idea of this rung).
template <int D>
struct TilesV7 {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp (v4)
  static constexpr int kWarps = Tiles<D>::kBr / (16 * kM);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 16 * kM;
  static constexpr int kBr = Tiles<D>::kBr;  // 128 (D <= 128) or 64: v3's
  static constexpr int kBc = (D == 96 || D == 128) ? 32 : Tiles<D>::kBc;  // keys per step (v5)
  static constexpr int kBcLoad = (D == 96 || D == 128) ? 64 : kBc;  // keys per tile (this rung)
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kSkipRescale = kBc <= 32;  // v6
  static constexpr bool kExactAlpha = true;        // v6
  static constexpr bool kQInRegs = kM * D <= 128;  // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  static constexpr int kUnrollK = D / 16;  // the k16 loop of S = Q K^T, unrolled in full
  static_assert(kWarps == 4, "128 threads: two blocks per SM at up to 255 registers");
};

struct RungV7 {
  static constexpr const char* kName = "05/v7_two_steps_per_tile";
  template <int D>
  using Tiles = TilesV7<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV7::kName,
             fa::mtiles_forward<fa::RungV7>,
             "v6 with 64-key K/V tiles consumed as two 32-key steps: half the barriers at D 96/128",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
