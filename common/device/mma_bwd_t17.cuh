// mma_bwd_t17.cuh: chapter 06's backward at every head dim up to 128, 06/t17_any_head_dim
// (chapter 06's tuning appendix: 06/v4's one kernel with dQ by fp32 atomics, taking rows of any
// length d, computed at the next instance 32, 64, 96 or 128), as pieces a later rung calls instead
// of copying: its tiles (padded rows at D 32 and 96, swizzled at 64 and 128) and a lane's ldmatrix
// addresses, the tile loader for rows of d (16-byte cp.async, or element by element where d is no
// multiple of 8), the fragment helpers, L in base 2, the stores of dK and dV, the block (8 warps,
// 128 keys, 64 queries) and its dQ warp tiles, the full-tile copy plan, the shared memory, and dQ's
// conversion.
//
// Read them in 06/t17 first (chapters/06_flash_backward/tuning/t17_any_head_dim.cu), whose ladder
// runs 06/v4 -> t16 (rows of d) -> t17 (element by element): it carries its own copy, so that it
// reads top to bottom. Chapter 09's backwards for the head dims no other backward takes
// (09/bwd_v3_varlen_any_head_dim, bwd_v4_window_any_head_dim) are each t17 plus one idea (packed
// offsets, the window's tiles) and call these pieces; what each keeps in its file is its
// parameters, its dK/dV kernel and its launch. Each compiled to the machine code it had when it
// carried a copy (the cubins' kernel sections compared for sm_80 and sm_90, CUDA 13.0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention_tiles.cuh"  // fa::tiles::copy_chunk_by_elements (05/t15)
#include "mma.cuh"

namespace fa::ch06::t17 {

using fa::mma::ldmatrix_x4;
using fa::mma::ldmatrix_x4_trans;
using fa::mma::smem_addr;

// ---- shared-memory tiles and fragments ------------------------------------------------------
// A tile holds ROWS rows of a row-major [seq, D] matrix (Q, K, V or dO) in the 16-bit dtype,
// stored as [ROWS][D + kPad]: the 8 elements (16 bytes) of padding per row shift each row by 16
// bytes modulo 128, so the eight row addresses of one ldmatrix 8x8 matrix fall into eight
// different 16-byte bank groups (no bank conflicts, with or without .trans), and every 16-byte
// cp.async destination stays aligned.
//
// The fragment layouts are those of common/mma.cuh (g = lane / 4, t = lane % 4); an ldmatrix.x4
// takes from lane l the row address of matrix i = l / 8, row r = l % 8.
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

// The swizzled tile: the same rows with no padding, each row's 16-byte chunks permuted within
// their 128-byte group: logical chunk c of row r is stored at chunk c ^ (r % 8). Why not the
// padding: a padded row starts 16 bytes further modulo 128 than the one before, so a warp's
// cp.async of whole rows writes shared memory across 128-byte lines, and Nsight Compute counts
// 2.6x the ideal shared-memory wavefronts and 1.5x the ideal L2 sectors for those copies. The XOR
// keeps every row at a 128-byte boundary (the copies are aligned) and still sends the eight rows
// of an ldmatrix 8x8 matrix (same logical chunk, rows r .. r + 7) to eight different chunks of
// the group: no bank conflicts either. Rows of at least 8 chunks (D a multiple of 64); the tile
// must start at a 128-byte boundary.
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
  uint32_t base[kSwizzled ? 4 : 1];
  __device__ __forceinline__ LaneAddr(uint32_t plain, uint32_t xor_bits) {
    if constexpr (kSwizzled) {
#pragma unroll
      for (int i = 0; i < 4; ++i) base[i] = (plain + 32 * i) ^ xor_bits;
    } else {
      base[0] = plain;
    }
  }
  // The same lane in a tile `offset` bytes further (a multiple of 128: another buffer).
  __device__ __forceinline__ LaneAddr(const LaneAddr& a, uint32_t offset) {
#pragma unroll
    for (int i = 0; i < (kSwizzled ? 4 : 1); ++i) base[i] = a.base[i] + offset;
  }
  __device__ __forceinline__ uint32_t at(uint32_t rows, int j) const {
    if constexpr (kSwizzled)
      return base[j % 4] + rows + 128 * (j / 4);
    else
      return base[0] + rows + 32 * j;
  }
};

// Copy rows [row0, row0 + ROWS) of a [seq, d] row-major matrix `g` into the padded tile `s` (rows
// of D), 16 bytes per cp.async. Rows at or past `seq` and chunks at or past column d are
// zero-filled (nothing is read for them). t17: where d is no multiple of 8 the rows are not
// 16-byte aligned, and each chunk is copied element by element instead, zeros past d.
// kSwizzled: into a swizzled tile of D elements per row instead (swizzled_offset).
template <class T, int D, int ROWS, int THREADS, bool kSwizzled = false>
__device__ __forceinline__ void load_tile_async(T* s, const T* g, int64_t row0, int64_t seq, int d,
                                                int tid) {
  constexpr int kChunksPerRow = D * int(sizeof(T)) / 16;
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kLd = D + kPad;
#pragma unroll
  for (int c = tid; c < kChunks; c += THREADS) {
    const int r = c / kChunksPerRow;
    const int cc = c % kChunksPerRow;
    const bool valid = row0 + r < seq && cc * 8 < d;
    const T* src = valid ? g + (row0 + r) * int64_t(d) + cc * 8 : g;
    T* dst;
    if constexpr (kSwizzled)
      dst = s + swizzled_offset<D>(r, cc);
    else
      dst = s + r * kLd + cc * 8;
    if (d % 8 == 0)
      fa::mma::cp_async_16(dst, src, valid);
    else
      fa::tiles::copy_chunk_by_elements(dst, valid ? src : nullptr, d - cc * 8);
  }
}

// The C fragments of two adjacent n-tiles (16 columns) of a 16 x N accumulator, rounded to 16
// bits, are exactly the A fragment of the 16x16 block with those columns as k:
//   a[0] = C[g][2t..]   (tile j, c[0..1])    a[1] = C[g+8][2t..]   (tile j, c[2..3])
//   a[2] = C[g][2t+8..] (tile j+1, c[0..1])  a[3] = C[g+8][2t+8..] (tile j+1, c[2..3])
// This is why P^T and dS^T feed dV and dK from registers.
template <class T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4]) {
  a[0] = fa::mma::pack2<T>(c0[0], c0[1]);
  a[1] = fa::mma::pack2<T>(c0[2], c0[3]);
  a[2] = fa::mma::pack2<T>(c1[0], c1[1]);
  a[3] = fa::mma::pack2<T>(c1[2], c1[3]);
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
// col0 .. col0 + DC - 1 of a [seq, d] matrix (DC = D, col0 = 0 unless the columns are split); the
// n8 tiles at or past column d are not stored. t17: where d is no multiple of 8 a row may start at
// an odd element, so each of the pair's two elements is stored on its own, those below d.
template <class T, int D, int DC>
__device__ __forceinline__ void store_rows(T* out, const float (&acc)[DC / 8][4], int64_t r0,
                                           int col0, int64_t seq, float mul, int d, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * int64_t(d) + col0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      if (col0 + 8 * nt >= d) break;  // rows of d
      const uint32_t pair = fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
      if (d % 8 == 0) {
        *reinterpret_cast<uint32_t*>(dst + 8 * nt) = pair;
      } else {
        const int col = col0 + 8 * nt + 2 * t;
        unsigned short* const e = reinterpret_cast<unsigned short*>(dst + 8 * nt);
        if (col < d) e[0] = static_cast<unsigned short>(pair & 0xffffu);
        if (col + 1 < d) e[1] = static_cast<unsigned short>(pair >> 16);
      }
    }
  }
}

// ---- the tile ------------------------------------------------------------------------------
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 64;           // query rows per tile
constexpr int kBc = 128;          // key rows per tile
constexpr int kLdS = kBr + kPad;  // row of the dS^T tile: kBr queries + padding
static_assert(kBc == kWarps * 16, "one warp per 16 keys");

// The warps' tiles of dQ_i (kBr x D): kDqRowTiles m16 tiles by kDqWarpCols columns each, summed
// over all kBc keys, kDqChunk columns at a time: 16 rows by D / 2 (four warps along the rows, two
// along the columns), at D = 128 32 rows by D / 4 (two by four), so that every K fragment feeds
// two m-tiles. At D = 64 a 32 x 16 warp tile would load as many fragments as 16 x 32 (one B for
// two A), and D = 32 and 96 do not split into four 16-column quarters.
template <int D>
constexpr int kDqRowTiles = D == 128 ? 2 : 1;
template <int D>
constexpr int kDqRowWarps = kBr / (16 * kDqRowTiles<D>);  // warps along the rows
template <int D>
constexpr int kDqWarpCols = D* kDqRowWarps<D> / kWarps;  // columns a warp adds
// 32 columns where they divide the warp's share (D 64, 128), 16 where not (32, 96).
template <int D>
constexpr int kDqChunk = kDqWarpCols<D> % 32 == 0 ? 32 : 16;
static_assert(kDqWarpCols<128> == 32 && kDqWarpCols<64> == 32 && kDqChunk<96> == 16 &&
                  kDqChunk<32> == 16,
              "dQ warp tiles");

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

// Store an A fragment (as acc_to_a makes it) as the 16x16 block [m0.., k0..] of a row-major tile,
// from the lane's address p = s + (m0 + g) LD + k0 + 2t. Four 32-bit stores per thread; in a
// padded tile (LD = 8 mod 16 elements) the 32 lanes of each store hit 32 different banks.
template <int LD, class T>
__device__ __forceinline__ void store_a_at(T* p, const uint32_t (&a)[4]) {
  *reinterpret_cast<uint32_t*>(p) = a[0];
  *reinterpret_cast<uint32_t*>(p + 8 * LD) = a[1];
  *reinterpret_cast<uint32_t*>(p + 8) = a[2];
  *reinterpret_cast<uint32_t*>(p + 8 * LD + 8) = a[3];
}

// The copies of a full Q or dO tile (kBr rows), planned once per thread: thread tid copies the
// 16-byte chunk tid % kChunksPerRow of rows row + kRowsPerPass * i, i < kPasses; a chunk at or
// past column d (`active` false) is zero-filled instead, the source rows being d long. Threads past
// kRowsPerPass * kChunksPerRow (D = 96: 12 chunks a row, 21 rows a pass) copy nothing. A strided
// loop from the thread index (load_tile_async) has a trip count the compiler cannot see: it
// emits a generic loop with a 64-bit bounds test per copy. kSwizzled: into swizzled rows of D
// elements; the chunk moves by row % 8, the same for every pass (kRowsPerPass is a multiple of 8
// at D = 64 and 128), so the pass offsets stay constant.
template <class T, int D, bool kSwizzled = false>
struct TileCopy {
  static constexpr int kLd = kSwizzled ? D : D + kPad;
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kBr + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr bool kExact = kThreads % kChunksPerRow == 0 && kBr % kRowsPerPass == 0;
  int row;       // this thread's first row (kBr: none)
  int src;       // its first chunk, in elements from the tile's first row in global memory
  int pass;      // the source's move per pass: kRowsPerPass rows of d elements
  uint32_t dst;  // and in bytes from the tile's start in shared memory
  bool active;   // the chunk lies inside the real head dim

  __device__ __forceinline__ TileCopy(int tid, int d) {
    row = tid < kRowsPerPass * kChunksPerRow ? tid / kChunksPerRow : kBr;
    const int col = (tid % kChunksPerRow) * 8;
    active = col < d;
    src = row * d + col;
    pass = kRowsPerPass * d;
    static_assert(!kSwizzled || (kExact && kRowsPerPass % kSwizzleRows == 0),
                  "one swizzle for every pass");
    if constexpr (kSwizzled)
      dst = uint32_t(swizzled_offset<D>(row, col / 8)) * 2;
    else
      dst = at<kLd>(row, col);
  }
  // Rows [0, kBr) of the tile whose first row is `g` into the tile at shared address `s`.
  __device__ __forceinline__ void full(uint32_t s, const T* g) const {
#pragma unroll
    for (int i = 0; i < kPasses; ++i)
      if (kExact || row + i * kRowsPerPass < kBr)
        fa::mma::cp_async_16(s + dst + at<kLd>(i * kRowsPerPass, 0),
                             active ? g + src + i * pass : g, active);
  }
};

// Shared memory: K_j, V_j (kBc rows) | Q_i x2 | dO_i x2 (kBr rows) | L_i*log2(e) x2 | D_i x2 |
// dS^T (kBc keys x kBr queries). 59 / 91 / 123 / 155 KiB at D = 32 / 64 / 96 / 128.
template <int D>
constexpr int smem_bytes_tiles() {
  return (2 * kBc + 4 * kBr) * (D + kPad) * 2;  // K_j, V_j; Q_i, dO_i double-buffered
}
template <int D>
constexpr int dkdv_smem_bytes() {
  return smem_bytes_tiles<D>() + 4 * kBr * int(sizeof(float)) + kBc * kLdS * 2;
}

}  // namespace fa::ch06::t17

// dQ's conversion is a kernel: in an anonymous namespace, so that each module that includes this
// header compiles its own.
namespace {

// ---- dQ = dQaccum * scale ------------------------------------------------------------------
// n elements, the first n / 4 * 4 by 16-byte loads and 8-byte stores; t17: the last n % 4 (a head
// dim that is no multiple of 8 can leave some) one at a time, by the first threads of block 0.
template <class T>
__global__ void convert_dq_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n,
                                  float scale) {
  const int64_t n4 = n / 4;
  if (blockIdx.x == 0 && threadIdx.x < n % 4) {
    const int64_t i = n4 * 4 + threadIdx.x;
    reinterpret_cast<unsigned short*>(dq)[i] =
        static_cast<unsigned short>(fa::mma::pack2<T>(acc[i] * scale, 0.0f) & 0xffffu);
  }
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
