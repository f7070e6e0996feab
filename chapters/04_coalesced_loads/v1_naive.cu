// 04/v1_naive: out[c][r] = in[r][c] straight from global memory to global memory.
// The reads are coalesced (a warp reads 32 consecutive floats of one input row), but the writes
// are not: the same warp writes one element in each of 32 output rows, rows*4 bytes apart, so
// every store touches its own 32-byte sector. Same tile and thread shape as the later versions
// (ch04_transpose.cuh), so the only thing that changes along the ladder is the memory pattern.
// Measured: see notes/04_coalesced_loads.md.
#include "ch04_transpose.cuh"
#include "registry.h"

namespace fa::ch04 {
namespace {

__global__ void transpose_naive_kernel(const float* __restrict__ in, float* __restrict__ out,
                                       int64_t rows, int64_t cols) {
  const TileCoords t = tile_coords(cols);
  const int64_t c = t.c0 + threadIdx.x;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t r = t.r0 + threadIdx.y + p * kRowsPerPass;
    if (r < rows && c < cols) out[c * rows + r] = in[r * cols + c];
  }
}

void transpose_v1(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  launch_transpose(transpose_naive_kernel, in, out, s, stream);
}

}  // namespace

FA_REGISTER(TransposeKernel, {"04/v1_naive", transpose_v1, "coalesced reads, strided writes"});

}  // namespace fa::ch04
