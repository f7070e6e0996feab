// 04/v4_smem_swizzled: tile[32][32] with an XOR swizzle instead of padding.
// What changed vs v3: no wasted column. Element (y, x) of the tile is stored at column x ^ y of
// row y. A row write (fixed y, x = 0..31) still covers all 32 banks, because x -> x ^ y is a
// permutation of 0..31. A column read (fixed x, y = tx = 0..31) goes to column x ^ tx of row tx,
// in bank (x ^ tx) % 32: again all different. Padding breaks 16-byte alignment of rows and wastes
// memory; swizzling keeps both, which is why tensor-core kernels (and CUTLASS) swizzle.
// Measured: see notes/04_coalesced_loads.md.
#include "ch04_transpose.cuh"
#include "registry.h"

namespace fa::ch04 {
namespace {

__device__ __forceinline__ int swz(int y, int x) {
  return x ^ y;
}  // y, x in 0..31

__global__ void transpose_swizzled_kernel(const float* __restrict__ in, float* __restrict__ out,
                                          int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile];
  const TileCoords t = tile_coords(cols);
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int y = ty + p * kRowsPerPass;
    const int64_t r = t.r0 + y, c = t.c0 + tx;
    if (r < rows && c < cols) tile[y][swz(y, tx)] = in[r * cols + c];
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int y = ty + p * kRowsPerPass;
    const int64_t orow = t.c0 + y, ocol = t.r0 + tx;
    if (orow < cols && ocol < rows) out[orow * rows + ocol] = tile[tx][swz(tx, y)];
  }
}

void transpose_v4(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  launch_transpose(transpose_swizzled_kernel, in, out, s, stream);
}

}  // namespace

FA_REGISTER(TransposeKernel, {"04/v4_smem_swizzled", transpose_v4,
                              "tile[32][32] with an XOR swizzle: no conflicts, no padding"});

}  // namespace fa::ch04
