// 04/v2_smem: the tile goes through shared memory so both sides are coalesced.
// What changed vs v1: a block reads a 32x32 tile row by row (coalesced), stores it in shared
// memory, and after a barrier writes it out row by row of the OUTPUT (coalesced too), reading the
// shared tile down a column. That column read is the new problem: tile[tx][k] for tx = 0..31 are
// 32 words exactly 32 words apart, all in the same bank, so the warp's read is replayed 32 times
// (a 32-way bank conflict). v3 and v4 remove it.
// Measured: see notes/04_coalesced_loads.md.
#include "ch04_transpose.cuh"
#include "registry.h"

namespace fa::ch04 {
namespace {

__global__ void transpose_smem_kernel(const float* __restrict__ in, float* __restrict__ out,
                                      int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile];
  const TileCoords t = tile_coords(cols);
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {  // read: a warp takes one input row of the tile
    const int y = ty + p * kRowsPerPass;
    const int64_t r = t.r0 + y, c = t.c0 + tx;
    if (r < rows && c < cols) tile[y][tx] = in[r * cols + c];
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {  // write: a warp takes one output row = one tile column
    const int y = ty + p * kRowsPerPass;
    const int64_t orow = t.c0 + y, ocol = t.r0 + tx;                        // out is [cols, rows]
    if (orow < cols && ocol < rows) out[orow * rows + ocol] = tile[tx][y];  // 32-way conflict
  }
}

void transpose_v2(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  launch_transpose(transpose_smem_kernel, in, out, s, stream);
}

}  // namespace

FA_REGISTER(TransposeKernel, {"04/v2_smem", transpose_v2,
                              "32x32 tile in shared memory: coalesced both ways, bank conflicts"});

}  // namespace fa::ch04
