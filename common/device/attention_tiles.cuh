// attention_tiles.cuh: the padded shared-memory tile of the tensor-core attention kernels
// (chapter 08's rungs, chapter 05's tuning appendix) and the cp.async loader that fills it.
// Device code. At the end: the swizzled tile that 08/v5_swizzled_ring uses instead. The
// main-path rungs of chapters 05 and 06 carry their own copy of the piece they teach (05/v2_mma
// the padded tile, 05/v4_swizzled_pipelined the swizzle); device/README.md lists who uses what.
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
// Chapter 06's backward keeps its own loop over the same layout (in its rung files): the chunks
// are the same, but ptxas allocates registers differently for the two loop shapes, and each
// kernel keeps the one it was tuned with (this one costs 06/v2_mma's dQ kernel 31 more registers
// at D = 128; 06's costs 05/v2_mma 56 bytes of spills at D = 64).
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

// The swizzled tile (08/v5_swizzled_ring): the same [ROWS][D] rows with no padding, each row's
// 16-byte chunks permuted within their 128-byte group: logical chunk c of row r is stored at chunk
// c ^ (r % 8). Why not the padding: a padded row starts 16 bytes further modulo 128 than the one
// before, so a warp's cp.async of two whole rows (16 threads x 16 bytes each) writes shared memory
// across 128-byte boundaries, and Nsight Compute counts 10.5 shared wavefronts per such
// instruction where 4 would do, and 24 L2 sector requests where 16 would (08/t06_l2_prefetch, H100,
// notes/08_decoding.md). The XOR keeps every row at a 128-byte boundary (the copies are aligned)
// and still sends the eight rows of an ldmatrix 8x8 matrix (same logical chunk, rows r .. r + 7)
// to eight different chunks of the group: no bank conflicts either. Rows of at least 8 chunks
// (D a multiple of 64); the tile must start at a 128-byte boundary.
constexpr int kSwizzleRows = 8;  // the permutation repeats every 8 rows

// Element offset of logical chunk `chunk` (8 elements) of row `row` in a swizzled tile.
template <int D>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  static_assert(D % 64 == 0, "a swizzled row holds whole 128-byte groups of 8 chunks");
  return row * D + (chunk ^ (row % kSwizzleRows)) * 8;
}

// The same for a reader's 32-bit shared address (ldmatrix). If `plain` is where logical chunk c of
// row r would be without the swizzle (tile + (r * D + 8 c) * 2 bytes, tile 128-byte aligned), its
// bits 4-6 are c % 8, so plain ^ swizzle_xor(r) is where it is stored. A lane whose rows all have
// the same r % 8 computes the XOR once and reads at (plain + offset) ^ xor for each offset.
__device__ __forceinline__ uint32_t swizzle_xor(int row) {
  return uint32_t(row % kSwizzleRows) * 16;
}

// A lane's ldmatrix address into a tile, for reads at (row offset, 16-element column step j):
// `rows` is a byte offset that moves whole rows by a multiple of 8 (so row % 8 stays the lane's),
// j the 16-column step (32 bytes). Padded tiles: one base, base + rows + 32 j, so every fragment is
// the base plus a compile-time constant (folded into the ldmatrix). Swizzled tiles: the XOR of
// swizzle_xor would cost an instruction per read (two: the add is no longer folded). But the XOR
// touches bits 4-6 only, and adding a multiple of 128 leaves those bits alone, so
// (plain + 32 j) ^ xor = ((plain + 32 (j % 4)) ^ xor) + 128 (j / 4): four bases, computed once,
// and each read is again a base plus a constant. (`rows` is a multiple of 128 bytes as well.)
template <bool kSwizzled>
struct LaneAddr {
  uint32_t base;
  __device__ __forceinline__ LaneAddr(uint32_t plain, uint32_t /*xor_bits*/) : base(plain) {}
  __device__ __forceinline__ LaneAddr(const LaneAddr& a, uint32_t offset) : base(a.base + offset) {}
  __device__ __forceinline__ uint32_t at(uint32_t rows, int j) const {
    return base + rows + 32 * j;
  }
};
template <>
struct LaneAddr<true> {
  uint32_t base[4];
  __device__ __forceinline__ LaneAddr(uint32_t plain, uint32_t xor_bits) {
#pragma unroll
    for (int i = 0; i < 4; ++i) base[i] = (plain + 32 * i) ^ xor_bits;
  }
  // The same lane in a tile `offset` bytes further (a multiple of 128: another buffer).
  __device__ __forceinline__ LaneAddr(const LaneAddr& a, uint32_t offset) {
#pragma unroll
    for (int i = 0; i < 4; ++i) base[i] = a.base[i] + offset;
  }
  __device__ __forceinline__ uint32_t at(uint32_t rows, int j) const {
    return base[j % 4] + rows + 128 * (j / 4);
  }
};

// Copy rows [row0, row0 + ROWS) of the row-major [seq, D] matrix `gmem` into the padded tile
// `tile`, one 16-byte cp.async per chunk, the THREADS threads of the block (tid = threadIdx.x)
// splitting the ROWS * D / 8 chunks evenly. Rows at or past `seq` are zero-filled: cp.async with
// src-size 0 reads nothing (an in-range pointer is still passed). The copies are only issued;
// the caller commits and waits (mma::cp_async_commit / cp_async_wait) before reading the tile.
// kSwizzled: into a swizzled tile instead (above).
template <int D, int ROWS, int THREADS, bool kSwizzled = false, class T>
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
    T* dst;
    if constexpr (kSwizzled)
      dst = tile + swizzled_offset<D>(r, ch);
    else
      dst = padded_row<D>(tile, r) + ch * 8;
    mma::cp_async_16(dst, src, valid);
  }
}

// One 16-byte chunk of a shared tile from a global row that is not 16-byte aligned (a head dim
// that is no multiple of 8: 05/t15_any_head_dim, 06/t17_any_head_dim), where cp.async cannot go:
// the n elements of the row from src on (at most 8 are read; n <= 0, or src null for a row past
// the sequence's end: none) by one 2-byte load each, zeros after them, then one 16-byte store to
// dst. Synchronous, unlike cp.async: the chunk is in shared memory once the thread passes its next
// barrier, so the callers' cp.async waits and barriers cover it as they cover a landed copy.
template <class T>
__device__ __forceinline__ void copy_chunk_by_elements(T* dst, const T* src, int n) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  const unsigned short* s = reinterpret_cast<const unsigned short*>(src);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = s != nullptr && 2 * i < n ? s[2 * i] : 0u;
    const uint32_t hi = s != nullptr && 2 * i + 1 < n ? s[2 * i + 1] : 0u;
    w[i] = lo | hi << 16;
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace fa::tiles
