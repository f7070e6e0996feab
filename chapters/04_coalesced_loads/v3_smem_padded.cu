// 04/v3_smem_padded: tile[32][33].
// What changed vs v2: one unused column. Row y of the tile now starts at word 33*y, so the column
// read tile[tx][y] for tx = 0..31 hits banks (33*tx + y) % 32 = (tx + y) % 32: all 32 different.
// The row writes stay conflict-free. Cost: 32 words of shared memory per tile.
// Measured: see notes/04_coalesced_loads.md.
#include "ch04_transpose.cuh"
#include "registry.h"

namespace fa::ch04 {
namespace {

constexpr int kPad = 1;

__global__ void transpose_padded_kernel(const float* __restrict__ in, float* __restrict__ out,
                                        int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile + kPad];
  const TileCoords t = tile_coords(cols);
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int y = ty + p * kRowsPerPass;
    const int64_t r = t.r0 + y, c = t.c0 + tx;
    if (r < rows && c < cols) tile[y][tx] = in[r * cols + c];
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int y = ty + p * kRowsPerPass;
    const int64_t orow = t.c0 + y, ocol = t.r0 + tx;
    if (orow < cols && ocol < rows) out[orow * rows + ocol] = tile[tx][y];
  }
}

void transpose_v3(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  launch_transpose(transpose_padded_kernel, in, out, s, stream);
}

}  // namespace

FA_REGISTER(TransposeKernel, {"04/v3_smem_padded", transpose_v3,
                              "tile[32][33]: the padding column removes the bank conflicts"});

}  // namespace fa::ch04
