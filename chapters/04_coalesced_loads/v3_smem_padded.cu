// 04/v3_smem_padded: tile[32][33].
// What changed vs v2: one unused column. Row y of the tile now starts at word 33*y, so the column
// read tile[tx][y] for tx = 0..31 hits banks (33*tx + y) % 32 = (tx + y) % 32: all 32 different.
// The row writes stay conflict-free. Cost: 32 words of shared memory per tile.
// Measured: see notes/04_coalesced_loads.md.
// EXERCISE-KERNELS: 04/v3_smem_padded
#include "ch04_transpose.cuh"
#include "registry.h"

namespace fa::ch04 {
namespace {

constexpr int kPad = 1;

__global__ void transpose_padded_kernel(const float* __restrict__ in, float* __restrict__ out,
                                        int64_t rows, int64_t cols) {
  // EXERCISE(padded-tile): declare the shared tile so that reading it down a column does not hit the same bank 32 times (the row stride in 4-byte words decides the bank)
  __shared__ float tile[kTile][kTile + kPad];
  // EXERCISE-PLACEHOLDER
  // __shared__ float tile[kTile][kTile];  // stand-in: unpadded, 32-way bank conflicts on the column read
  // (void)kPad;
  // EXERCISE-END
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
    // EXERCISE(transposed-write): write the tile to its mirrored place in the transposed output so that consecutive threads still write consecutive addresses: the transposition happens in which element of the shared tile a thread reads
    const int y = ty + p * kRowsPerPass;
    const int64_t orow = t.c0 + y, ocol = t.r0 + tx;
    if (orow < cols && ocol < rows) out[orow * rows + ocol] = tile[tx][y];
    // EXERCISE-PLACEHOLDER
    // const int y = ty + p * kRowsPerPass;  // stand-in: a plain copy, nothing is transposed
    // const int64_t r = t.r0 + y, c = t.c0 + tx;
    // if (r < rows && c < cols) out[r * cols + c] = tile[y][tx];
    // EXERCISE-END
  }
}

void transpose_v3(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  launch_transpose(transpose_padded_kernel, in, out, s, stream);
}

}  // namespace

FA_REGISTER(TransposeKernel, {"04/v3_smem_padded", transpose_v3,
                              "tile[32][33]: the padding column removes the bank conflicts"});

}  // namespace fa::ch04
