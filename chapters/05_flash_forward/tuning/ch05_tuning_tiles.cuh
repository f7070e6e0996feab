// ch05_tuning_tiles.cuh: the tiles of the tuning steps t04 to t13, one struct per step, each the
// previous step's with its one idea switched on. The flag kernel (ch05_mtiles_kernel.cuh) and the
// matmuls (ch05_mma_fwd_mtiles.cuh) read them; each step's .cu file tells its story, holds its
// measurements and registers it. t04 is the main path's v3, t09 its v4 (the same machine code):
// their tiles are here as the bases of the steps after them, and no file registers them.
// Each including .cu file compiles its own copy (anonymous namespace).
#pragma once
#include "ch05_mtiles_kernel.cuh"  // Tiles<D> (t03's Br and Bc), visible in fa::{anonymous}

namespace fa {
namespace {

// t04 (= v3_fa2_warp_layout.cu): t03's Br and Bc, with the rows of a warp doubled where the
// registers allow it (kM m16 tiles per warp, 4 warps). Every later idea off.
template <int D>
struct TilesT04 {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp (the idea of t04)
  static constexpr int kWarps = Tiles<D>::kBr / (16 * kM);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMinBlocks = 2;  // blocks per SM that __launch_bounds__ asks registers for
  static constexpr int kRowsPerWarp = 16 * kM;
  static constexpr int kBr = Tiles<D>::kBr;  // 128 (D <= 128) or 64: t03's, so is the smem layout
  static constexpr int kBc = Tiles<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kQInRegs = kM * D <= 128;  // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // With Q in shared memory nothing is indexed by the k16 slice, so the loop of S = Q K^T need not
  // be unrolled in full: fully unrolled, ptxas hoisted the K and Q loads of many slices ahead and
  // spilled at D = 128.
  static constexpr int kUnrollK = kQInRegs ? D / 16 : 1;
  static constexpr bool kExactAlpha = false;     // alpha = 1 exactly for an unmoved max (t06)
  static constexpr bool kSkipRescale = false;    // O's rescale skipped by a warp vote (t06)
  static constexpr bool kSwizzle = false;        // swizzled shared-memory rows (t07)
  static constexpr bool kOneLaneAddr = false;    // one set of lane addresses for Q and V (t08)
  static constexpr bool kPipelineLoads = false;  // fragment loads software-pipelined (t09)
  static constexpr bool kHoistCopies = false;    // K/V copies planned once per thread (t10)
  static_assert(kWarps == 4, "128 threads: two blocks per SM at up to 255 registers");
};

// t05: Bc = 32 at D = 96 and 128, so that S fits beside O without spills; the k16 loop of
// S = Q K^T unrolled in full again.
template <int D>
struct TilesT05 : TilesT04<D> {
  static constexpr int kBc = (D == 96 || D == 128) ? 32 : TilesT04<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr int kUnrollK = D / 16;
};

// t06: alpha = 1 exactly for an unmoved max, and O's rescale skipped by a warp vote where it pays
// (Bc = 32: there the rescale is as many instructions as the MMAs).
template <int D>
struct TilesT06 : TilesT05<D> {
  static constexpr bool kExactAlpha = true;
  static constexpr bool kSkipRescale = TilesT05<D>::kBc <= 32;
};

// t07: Q, K and V swizzled instead of padded where a row holds whole 128-byte groups.
template <int D>
struct TilesT07 : TilesT06<D> {
  static constexpr bool kSwizzle = D % 64 == 0;
};

// t08: V read through Q's lane addresses.
template <int D>
struct TilesT08 : TilesT07<D> {
  static constexpr bool kOneLaneAddr = true;
};

// t09 (= v4_swizzled_pipelined.cu): the fragment loads of both matmuls software-pipelined.
template <int D>
struct TilesT09 : TilesT08<D> {
  static constexpr bool kPipelineLoads = true;
};

// t10: each thread's K/V copies planned once (KVCopyPlan).
template <int D>
struct TilesT10 : TilesT09<D> {
  static constexpr bool kHoistCopies = true;
};

// t11: 64 keys per K/V tile again at D 128. kSkipRescale stays t06's (on at D 96 and 128):
// without it ptxas spills 100 bytes at D 128. (t12, the epilogue through stmatrix, is the main
// path's v5_fewer_instructions.cu.)
template <int D>
struct TilesT11 : TilesT10<D> {
  static constexpr int kBc = D == 128 ? 64 : TilesT10<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
};

// t13: FlashAttention-2's A100 tile at D 256: 128 queries x 64 keys, 8 warps of 16 rows each, one
// block per SM (192 KiB of shared memory; the registers of 256 threads at up to 255 each).
// Other head dims keep t11's tiles.
template <int D>
struct TilesT13 : TilesT11<D> {
  static constexpr bool kWide = D == 256;
  static constexpr int kWarps = kWide ? 8 : TilesT11<D>::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMinBlocks = kWide ? 1 : TilesT11<D>::kMinBlocks;
  static constexpr int kBr = kWarps * TilesT11<D>::kRowsPerWarp;
  static constexpr int kBc = kWide ? 64 : TilesT11<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
};

}  // namespace
}  // namespace fa
