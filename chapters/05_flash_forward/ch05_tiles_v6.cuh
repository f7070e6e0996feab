// ch05_tiles_v6.cuh: the tiles of 05/v6_skip_unmoved_rescale (v6_skip_unmoved_rescale.cu tells
// its story), in a header because 05/v7_swizzled_smem runs the same tiles with one more switch.
// Each including .cu file compiles its own copy (anonymous namespace).
#pragma once
#include "ch05_mtiles_kernel.cuh"  // Tiles<D> (v3's Br and Bc), visible in fa::{anonymous}

namespace fa {
namespace {

// v6's tiles: v5's, and the two switches of this rung (kExactAlpha; kSkipRescale where it pays).
template <int D>
struct TilesV6 {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp (the idea of this rung)
  static constexpr int kWarps = Tiles<D>::kBr / (16 * kM);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 16 * kM;
  static constexpr int kBr = Tiles<D>::kBr;  // 128 (D <= 128) or 64: v3's, so is the smem layout
  static constexpr int kBc = (D == 96 || D == 128) ? 32 : Tiles<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  // The skip pays where the rescale is as many instructions as the MMAs: Bc = 32 (header).
  static constexpr bool kSkipRescale = kBc <= 32;
  static constexpr bool kExactAlpha = true;  // alpha = 1 exactly for an unmoved max (this rung)
  static constexpr bool kQInRegs = kM * D <= 128;  // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  static constexpr int kUnrollK = D / 16;        // the k16 loop of S = Q K^T, unrolled in full
  static constexpr bool kSwizzle = false;        // padded shared-memory rows (v7 swizzles them)
  static constexpr bool kOneLaneAddr = false;    // K and V with their own lane addresses (v8)
  static constexpr bool kPipelineLoads = false;  // fragment loads in program order (v9)
  static constexpr bool kHoistCopies = false;    // K/V copy addresses worked out per tile (v10)
  static constexpr bool kStmatrixO = false;      // O stored through v3's store_o_tile (v12)
  static_assert(kWarps == 4, "128 threads: two blocks per SM at up to 255 registers");
};

}  // namespace
}  // namespace fa
