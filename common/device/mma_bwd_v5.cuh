// mma_bwd_v5.cuh: chapter 06's final backward, 06/v5_warp_tiles, as pieces a later rung calls
// instead of copying: its tile (8 warps, 128 keys a block, Q tiles of 64 queries, 128 at D 64),
// the swizzled and padded shared-memory tiles, the copies, the addresses computed once, the three
// products of a warp tile (S and dP, dV and dK, dQ), the dQ atomics and the conversion of dQ. At
// head dims 64 and 128 (the swizzled ones: 06/v5 sends D 32 and 96 to 06/v4).
//
// Read them in 06/v5 first (chapters/06_flash_backward/v5_warp_tiles.cu): it carries its own
// copy, so that the rung reads top to bottom. Chapter 09's mma.sync backwards (09/bwd_v1_varlen,
// bwd_v2_window) are each 06/v5 plus one idea (packed offsets, the window's tiles) and call these
// pieces; what each keeps in its file is its parameters, its kernel and its launch. Two things
// here are not 06/v5's letter for letter: the bounds of the stores and copies are written for a
// packed batch (a row at or past the sequence's end is the next sequence's), which 06/v5's code
// already respected, and the full-tile copy plan has no test for D 96's idle threads (06/v5
// keeps v4's test, which its machine code was measured with). The rungs compile to the machine
// code they had when each carried a copy (the cubins' kernel sections compared, CUDA 13.0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "mma.cuh"

namespace fa::ch06::v5 {

using fa::mma::ldmatrix_x4;
using fa::mma::ldmatrix_x4_trans;

// ---- shared-memory tiles and fragments ------------------------------------------------------
// The fragment layouts are those of common/mma.cuh (g = lane / 4, t = lane % 4); an ldmatrix.x4
// takes from lane l the row address of matrix i = l / 8, row r = l % 8.
//
// The P and dS tiles are padded: [rows][kBc + kPad]. The 8 elements (16 bytes) of padding per row
// shift each row by 16 bytes modulo 128, so the eight row addresses of one ldmatrix 8x8 matrix
// fall into eight different 16-byte bank groups (no bank conflicts, with or without .trans).
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

// The Q, K, V and dO tiles are swizzled: rows of D elements with no padding, each row's 16-byte
// chunks permuted within their 128-byte group: logical chunk c of row r is stored at chunk
// c ^ (r % 8). Why not the padding: a padded row starts 16 bytes further modulo 128 than the one
// before, so a warp's cp.async of whole rows writes shared memory across 128-byte lines, and
// Nsight Compute counts 2.6x the ideal shared-memory wavefronts and 1.5x the ideal L2 sectors for
// those copies. The XOR keeps every row at a 128-byte boundary (the copies are aligned) and still
// sends the eight rows of an ldmatrix 8x8 matrix (same logical chunk, rows r .. r + 7) to eight
// different chunks of the group: no bank conflicts either. Rows of at least 8 chunks (D a multiple
// of 64); the tile must start at a 128-byte boundary.
constexpr int kSwizzleRows = 8;  // the permutation repeats every 8 rows

// Element offset of logical chunk `chunk` (8 elements) of row `row` in a swizzled tile.
template <int D>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  static_assert(D % 64 == 0, "a swizzled row holds whole 128-byte groups of 8 chunks");
  return row * D + (chunk ^ (row % kSwizzleRows)) * 8;
}

// The same for a reader's 32-bit shared address (ldmatrix). If `plain` is where logical chunk c of
// row r would be without the swizzle (tile + (r * D + 8 c) * 2 bytes, tile 128-byte aligned), its
// bits 4-6 are c % 8, so plain ^ swizzle_xor(r) is where it is stored.
__device__ __forceinline__ uint32_t swizzle_xor(int row) {
  return uint32_t(row % kSwizzleRows) * 16;
}

// Copy rows [row0, row0 + ROWS) of a [seq, D] row-major matrix `g` into the swizzled tile `s`,
// 16 bytes per cp.async. Rows at or past `seq` are zero-filled (nothing is read for them): here
// they are the next sequence's rows, or past the end of the packed tensor.
template <class T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(T* s, const T* g, int64_t row0, int64_t seq,
                                                int tid) {
  constexpr int kChunksPerRow = D * int(sizeof(T)) / 16;
  constexpr int kChunks = ROWS * kChunksPerRow;
#pragma unroll
  for (int c = tid; c < kChunks; c += THREADS) {
    const int r = c / kChunksPerRow;
    const int cc = c % kChunksPerRow;
    const bool valid = row0 + r < seq;
    const T* src = valid ? g + (row0 + r) * int64_t(D) + cc * 8 : g;
    fa::mma::cp_async_16(s + swizzled_offset<D>(r, cc), src, valid);
  }
}

// Two MMAs sharing one A fragment: d0 += a b[0..1], d1 += a b[2..3] (two adjacent n-tiles).
template <class T>
__device__ __forceinline__ void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]};
  const uint32_t b1[2] = {b[2], b[3]};
  fa::mma::mma_16816<T>(d0, a, b0);
  fa::mma::mma_16816<T>(d1, a, b1);
}
// 2^x by the MUFU unit alone (ex2.approx.ftz.f32: results below 2^-126 flush to 0). exp2f
// without --use_fast_math wraps the same instruction in a guard for results in the denormal range
// (a compare and two predicated multiplies: four instructions instead of one); a probability that
// small changes no sum here. exp2(-inf) is +0, which the masking relies on.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x log2(e))

// L in the form the loops want: L * log2(e), or +inf for a row that does not exist or sees no
// key (L = -inf), which makes every P of that row exp2(finite - inf) = 0.
__device__ __forceinline__ float load_l2(const float* lse, int64_t row, int64_t seq_q) {
  if (row >= seq_q) return INFINITY;
  const float l = lse[row];
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// Store a 16 x DC fp32 accumulator, times `mul`: rows r0 + g, r0 + g + 8 and columns
// col0 .. col0 + DC - 1 of a [seq, D] matrix. Rows at or past `seq` are not written (with
// packing they are the next sequence's).
template <class T, int D, int DC>
__device__ __forceinline__ void store_rows(T* out, const float (&acc)[DC / 8][4], int64_t r0,
                                           int col0, int64_t seq, float mul, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * int64_t(D) + col0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      *reinterpret_cast<uint32_t*>(dst + 8 * nt) =
          fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
    }
  }
}

// ---- the tile ------------------------------------------------------------------------------
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 64;   // query rows per tile (128 at D 64: kBrW)
constexpr int kBc = 128;  // key rows per tile

// ---- the addresses, computed once ----------------------------------------------------------
// The lane's part of the two ldmatrix x4 address patterns, in bytes, for a tile of pitch LD
// elements (lane l gives row r = l % 8 of matrix i = l / 8):
//   lane_rows:  (r + 8 (i % 2)) LD + 8 (i / 2)   A = the tile; B = the tile (.trans)
//   lane_trans: (r + 8 (i / 2)) LD + 8 (i % 2)   B = tile^T; A = tile^T (.trans)
// The fragment at (row0, col0) of the tile is then base + lane part + (row0 * LD + col0) * 2.
template <int LD>
__device__ __forceinline__ uint32_t lane_rows(int lane) {
  return uint32_t(((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4)) * 2;
}
template <int LD>
__device__ __forceinline__ uint32_t lane_trans(int lane) {
  return uint32_t(((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1)) * 2;
}
// Byte offset of element (row, col) of a tile of pitch LD: a compile-time constant in the loop.
template <int LD>
constexpr uint32_t at(int row, int col) {
  return uint32_t(row * LD + col) * 2;
}

// The copies of a full Q or dO tile (ROWS rows), planned once per thread: thread tid copies the
// 16-byte chunk tid % kChunksPerRow of rows row + kRowsPerPass * i, i < kPasses, into swizzled
// rows of D elements; the chunk moves by row % 8, the same for every pass (kRowsPerPass is a
// multiple of 8 at D = 64 and 128), so the pass offsets stay constant. A strided loop from the
// thread index (load_tile_async) has a trip count the compiler cannot see: it emits a generic
// loop with a 64-bit bounds test per copy.
template <class T, int D, int ROWS>
struct TileCopy {
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = ROWS / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0 && ROWS % kRowsPerPass == 0 &&
                    kRowsPerPass % kSwizzleRows == 0,
                "one swizzle for every pass");
  int src;  // this thread's first chunk, in elements from the tile's first row in global memory
  uint32_t dst;  // and in bytes from the tile's start in shared memory

  __device__ __forceinline__ explicit TileCopy(int tid) {
    const int row = tid / kChunksPerRow;
    const int col = (tid % kChunksPerRow) * 8;
    src = row * D + col;
    dst = uint32_t(swizzled_offset<D>(row, col / 8)) * 2;
  }
  // Rows [0, ROWS) of the tile whose first row is `g` into the tile at shared address `s`.
  __device__ __forceinline__ void full(uint32_t s, const T* g) const {
#pragma unroll
    for (int i = 0; i < kPasses; ++i)
      fa::mma::cp_async_16(s + dst + at<D>(i * kRowsPerPass, 0), g + src + i * kRowsPerPass * D);
  }
};

// ---- FlashAttention-2's warp tiles (D 64, 128) -----------------------------------------------
constexpr int kLdP = kBc + kPad;  // a row of the P or dS tile: kBc keys + padding (16-bit)

// The Q tile of this kernel: 128 queries at D = 64, 64 at D = 128 (kBr). At D = 64 a Q tile of
// 64 is half the MMAs of D = 128 for the same fixed work per tile (two barriers, the L and D
// loads, a round of dQ atomics); FlashAttention-2 picks 128 there too.
template <int D>
constexpr int kBrW = D == 64 ? 128 : kBr;

// Shared memory: K, V, Q x2, dO x2 (swizzled rows, each in the place of a padded tile of rows of
// D + kPad, as 06/v4 laid them out), L x2, D x2, then the P and dS tiles (kBrW x kLdP each).
// 171 KiB at D 128, 178 KiB at D 64.
template <int D>
constexpr int warp_tiles_smem_bytes() {
  constexpr int kRows = kBrW<D>;
  return (2 * kBc + 4 * kRows) * (D + kPad) * 2 + 4 * kRows * int(sizeof(float)) +
         2 * kRows * kLdP * 2;
}

// An ldmatrix address into a swizzled tile: the unswizzled one with bits 4-6 flipped by the lane's
// row % 8 (every fragment starts at a multiple of 16 rows; swizzle_xor). One XOR per read: four
// bases per address, one per 16-column step modulo 4 (06/v4's LaneAddr), would take 21 more
// registers for this kernel's seven ldmatrix addresses, beside accumulators that already fill 253.
__device__ __forceinline__ uint32_t swz_addr(uint32_t plain, uint32_t swz) {
  return plain ^ swz;
}

// acc += A B^T over D for one warp: A is 32 rows of a swizzled tile (two m16 tiles, ldmatrix
// from a, this lane's address of its first row), B^T the kSn * 8 rows of another (b, lane_trans
// form): S = Q K^T and dP = dO V^T. Per k16 step 2 A and kSn / 2 B fragments feed 2 * kSn MMAs.
template <class T, int D, int kSn>
__device__ __forceinline__ void rows_times_keys(float (&acc)[2][kSn][4], uint32_t a_base,
                                                uint32_t b_base, uint32_t swz) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[2][4], b[kSn / 2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
      ldmatrix_x4(a[mt], swz_addr(a_base + at<D>(16 * mt, 16 * ks), swz));
#pragma unroll
    for (int np = 0; np < kSn / 2; ++np)
      ldmatrix_x4(b[np], swz_addr(b_base + at<D>(16 * np, 16 * ks), swz));
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int np = 0; np < kSn / 2; ++np)
        mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b[np]);
  }
}

// acc += X^T Y over the kRows queries of a tile, for one warp's 32 keys and kCols columns: X is
// the P or dS tile (a: this lane's ldmatrix .trans address of its first key column), Y the dO or
// Q tile (b, swizzled, lane_rows form, at the warp's first column): dV += P^T dO, dK += dS^T Q.
// kXT = false: acc += X Y over kRows keys instead, for one warp's 32 queries (a: this lane's plain
// ldmatrix address of its first query row in dS) and Y the K tile: dQ += dS K. LdP: the pitch of
// the P and dS tiles (06/t14's 64-key tiles at D 256: mma_bwd_t21.cuh's kLdP64).
template <class T, int D, int kRows, int kCols, bool kXT = true, int LdP = kLdP>
__device__ __forceinline__ void keys_times_cols(float (&acc)[2][kCols / 8][4], uint32_t a_base,
                                                uint32_t b_base, uint32_t swz) {
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    uint32_t a[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if constexpr (kXT)
        ldmatrix_x4_trans(a[mt], a_base + at<LdP>(16 * kk, 16 * mt));
      else
        ldmatrix_x4(a[mt], a_base + at<LdP>(16 * mt, 16 * kk));
    }
#pragma unroll
    for (int np = 0; np < kCols / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, swz_addr(b_base + at<D>(16 * kk, 16 * np), swz));
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b);
    }
  }
}

// dQaccum[p], [p + 1] += x, y: sm_90 adds a float2 in one atomic (the two columns are adjacent
// and 8-byte aligned): half the atomic instructions and L2 sector updates of two scalar ones.
__device__ __forceinline__ void add_dq(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

}  // namespace fa::ch06::v5

// The conversion is a kernel: each translation unit that includes this header compiles its own.
namespace {

// ---- dQ = dQaccum * scale ------------------------------------------------------------------
// n4 = elements / 4 (every D here is a multiple of 16); 16-byte loads, 8-byte stores. Over the
// packed layout, every row of the workspace is some sequence's: one pass over all of them.
template <class T>
__global__ void convert_dq_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n4,
                                  float scale) {
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n4;
       x += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(acc)[x];
    uint2 out;
    out.x = fa::mma::pack2<T>(v.x * scale, v.y * scale);
    out.y = fa::mma::pack2<T>(v.z * scale, v.w * scale);
    reinterpret_cast<uint2*>(dq)[x] = out;
  }
}

}  // namespace
