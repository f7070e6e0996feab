// attention_tiles.cuh: the padded shared-memory tile of the tensor-core attention kernels
// (05/v2_mma, 05/v3_fused_scale_warp_skip, 06/v2_mma) and the cp.async loader that fills it.
// Device code.
//
// A tile holds ROWS consecutive rows of a row-major [seq, D] matrix of 16-bit elements (Q, K, V,
// dO), stored as [ROWS][D + kPad]. The 8 elements (16 bytes) of padding per row shift each row
// by 16 bytes modulo 128, so the eight row addresses of one ldmatrix 8x8 matrix (all at the same
// column) fall into eight different 16-byte bank groups: no bank conflicts, with or without
// .trans, for D = 32, 64, 96, 128, 256. Without it the rows are 2 * D bytes apart, a multiple of
// 128 for D = 64, 128 and 256, and all eight land in the same four banks (an 8-way conflict). Every
// 16-byte cp.async destination stays aligned.
//
// The cp.async writes and the ldmatrix reads must agree on that layout: both go through
// padded_row (or the pitch kPitch<D>).
//
// Chapter 06's backward keeps its own loop over the same layout (flash_bwd_tc.cuh): the chunks
// are the same, but ptxas allocates registers differently for the two loop shapes, and each
// kernel keeps the one it was tuned with (this one costs 06/v2's dQ kernel 31 more registers at
// D = 128; 06's costs 05/v2 56 bytes of spills at D = 64).
#pragma once
#include <cstdint>

#include "mma.cuh"

namespace fa::tiles {

constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

// Elements between consecutive rows of a padded tile.
template <int D>
constexpr int kPitch = D + kPad;

// Row `row` of a padded tile.
template <int D, class T>
__device__ __forceinline__ T* padded_row(T* tile, int row) {
  return tile + row * kPitch<D>;
}

// Copy rows [row0, row0 + ROWS) of the row-major [seq, D] matrix `gmem` into the padded tile
// `tile`, one 16-byte cp.async per chunk, the THREADS threads of the block (tid = threadIdx.x)
// splitting the ROWS * D / 8 chunks evenly. Rows at or past `seq` are zero-filled: cp.async with
// src-size 0 reads nothing (an in-range pointer is still passed). The copies are only issued;
// the caller commits and waits (mma::cp_async_commit / cp_async_wait) before reading the tile.
template <int D, int ROWS, int THREADS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int tid) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % THREADS == 0, "the tile must split evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / THREADS; ++i) {
    const int c = tid + i * THREADS;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    const bool valid = grow < seq;
    const T* src = gmem + (valid ? grow * D + ch * 8 : 0);
    mma::cp_async_16(padded_row<D>(tile, r) + ch * 8, src, valid);
  }
}

}  // namespace fa::tiles
