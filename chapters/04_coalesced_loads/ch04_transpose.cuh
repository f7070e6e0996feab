// ch04_transpose.cuh: what the four transposes share: the tile and the thread shape.
//
// A block of 32 x 8 threads moves one 32 x 32 tile: each thread handles 4 elements, rows
// ty, ty+8, ty+16, ty+24 of the tile. Fewer threads per element means more loads in flight per
// thread and fewer blocks to schedule; 4 per thread is the usual sweet spot.
// The grid is 1-D over tiles (row-major tile order), so any matrix size fits gridDim.x.
#pragma once
#include <cstdint>

#include "check.h"
#include "shapes.h"

namespace fa::ch04 {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // blockDim.y
constexpr int kPasses = kTile / kRowsPerPass;

struct TileCoords {
  int64_t r0, c0;  // first input row and column of this block's tile
};

__device__ __forceinline__ TileCoords tile_coords(int64_t cols) {
  const int64_t tiles_c = ceil_div(cols, kTile);
  return {int64_t(blockIdx.x / tiles_c) * kTile, int64_t(blockIdx.x % tiles_c) * kTile};
}

template <class Kernel>
void launch_transpose(Kernel kernel, const float* in, float* out, TransposeShape s,
                      cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  const int64_t tiles = ceil_div(s.rows, kTile) * ceil_div(s.cols, kTile);
  FA_REQUIRE(tiles <= 0x7fffffff, "too many tiles for gridDim.x");
  kernel<<<unsigned(tiles), dim3(kTile, kRowsPerPass), 0, stream>>>(in, out, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace fa::ch04
