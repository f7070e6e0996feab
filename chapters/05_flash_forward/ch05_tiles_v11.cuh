// ch05_tiles_v11.cuh: the tiles of 05/v11_bc64_at_d128 (v11_bc64_at_d128.cu tells its story), in
// a header because 05/v12_stmatrix_epilogue runs the same tiles with one more switch.
// Each including .cu file compiles its own copy (anonymous namespace).
#pragma once
#include "ch05_tiles_v6.cuh"  // v6's tiles, which v7-v12 extend

namespace fa {
namespace {

// v10's tiles (v9's switches and kHoistCopies), with 64 keys per K/V tile at D 128 (this rung).
// kSkipRescale stays TilesV6's (on at D 96 and 128): without it ptxas spills 100 bytes at D 128.
template <int D>
struct TilesV11 : TilesV6<D> {
  static constexpr int kBc = D == 128 ? 64 : TilesV6<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineLoads = true;
  static constexpr bool kHoistCopies = true;
};

}  // namespace
}  // namespace fa
