// t22_group_split.cu: 06/t20_grouped_heads with its group split among blocks: where t20 hands a
// K/V tile's whole group of query heads to one block, t22 hands it to `split` blocks, each walking
// group / split of the heads, and their dK and dV parts meet by fp32 atomics in a buffer of the
// K/V heads' size. One idea, the group split of chapter 07's bwd_v1 (group_split there) on
// mma.sync. Grouped heads (GQA, MQA) before sm_90, every multiple of 8 up to 128 as t16 and t20.
//
// Why. t20 reads each K/V tile once for its group and writes dK, dV once, summed in registers: at
// full attention it runs in its MHA time per query head (1.000-1.004x, H200). Under the causal
// mask it does not: its grid has group times fewer blocks than MHA's, each group times longer,
// and a K/V head's first key tiles (those every query row sees) carry most of the work, so a few
// long blocks finish last: 1.08x, 1.21x and 2.06x the MHA time at H_kv 8, 4 and 1 (H 32, N 8192).
// The dispatch therefore sent causal grouped backwards before sm_90 to the MHA kernel on K and V
// repeated by the caller, group times their bytes, and summed dK and dV in another pass.
//
// What changed vs t20.
//   * The grid: (K/V tile, batch x heads_kv x split). Block part p of a K/V tile walks query
//     heads kv_bh * group + p * (group / split) .. + group / split - 1: t20's walk over a slice.
//   * split > 1: the walk's dK and dV sums are parts, added (unscaled, fp32) into dkv_parts
//     ([2][batch x heads_kv][seq_k][d]: dK's, then dV's; zeroed on the stream first) by atomics;
//     a last kernel converts them to dK = scale * sum and dV (t20's dQ conversion, twice).
//   * The split: causal, every query head its own block (split = group): the grid, its blocks'
//     lengths and their order are MHA's, with K and V read in place (the group's blocks read the
//     same K/V tile, from L2 after the first). Full attention keeps t20's walk (split 1), which
//     measured level with MHA, unless its grid leaves the GPU's resident blocks idle (split_of:
//     MQA at N 4096). The parts take 2 x heads_kv x seq_k x d floats, 2 / group of the
//     repeated K and V they replace; where the stream-ordered allocation fails the call runs
//     t20's walk (split 1), correct and slower.
// At split 1 every line is t20's.
//
// Speed (H200, 2026-12-05; tuning/README.md): causal with grouped heads 1.000-1.008x its MHA time
// per query head at H_kv 8, 4, 1 (t20: 1.08-2.06x); at MHA 1.02-1.03x t20's time. H100,
// 2026-12-06, N 4096 and 8192: causal 1.006-1.017x, full 0.982-1.008x (MQA at N 4096 split in
// two: 1.008x, where t20 took 1.934x); the dispatch runs it for every grouped backward before
// sm_90 up to D 128.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ch06_preprocess.h"
#include "check.h"
#include "gpu.h"
#include "group_split_plan.h"  // full_split
#include "mma.cuh"
#include "registry.h"
#include "stream_buffer.h"

namespace {

constexpr const char* kName = "06/t22_group_split";  // the registered name

using fa::causal_last_key;
using fa::ceil_div;
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
// zero-filled (nothing is read for them).
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
    if constexpr (kSwizzled)
      fa::mma::cp_async_16(s + swizzled_offset<D>(r, cc), src, valid);
    else
      fa::mma::cp_async_16(s + r * kLd + cc * 8, src, valid);
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
// n8 tiles at or past column d are not stored.
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
      *reinterpret_cast<uint32_t*>(dst + 8 * nt) =
          fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
    }
  }
}

// t22: a 16 x DC fp32 accumulator added by atomics into rows r0 + g, r0 + g + 8 of a [seq, d] fp32
// matrix, columns below d (a multiple of 8: the pair 2t, 2t + 1 of an 8-column group is both
// below d or both past it); rows at or past seq are not touched. sm_90 adds the pair as one
// float2 (8-byte aligned: d and 2t are even).
template <int DC>
__device__ __forceinline__ void add_rows(float* out, const float (&acc)[DC / 8][4], int64_t r0,
                                         int64_t seq, int d, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    float* dst = out + row * int64_t(d) + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      if (8 * nt >= d) break;  // rows of d: the zero columns past it are not added
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]));
#else
      atomicAdd(dst + 8 * nt, acc[nt][2 * h]);
      atomicAdd(dst + 8 * nt + 1, acc[nt][2 * h + 1]);
#endif
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

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fp32 [batch * heads][seq_q][d], zero on entry (the caller's workspace)
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, K/V head)
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  bool causal;
  int d;      // t16: the real head dim, the length of a row in global memory (<= D)
  int group;  // t20: query heads per K/V head (heads / heads_kv; 1 without grouping)
  int split;  // t22: blocks per K/V tile of a K/V head, each walking group / split query heads
  int64_t n_kv_rows;  // t22: batch x heads_kv x seq_k, the rows of dK (and of dV)
  float* dkv_parts;   // t22: fp32 [2][batch x heads_kv][seq_k][d], zero on entry (split > 1)
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

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(Params p) {
  constexpr int kChunk = kBr;  // S^T and dP^T for the whole Q tile at once
  constexpr int kLd = D + kPad;
  constexpr int kTile = kBr * kLd;    // a Q or dO tile (kBr rows)
  constexpr int kKvTile = kBc * kLd;  // a K or V tile (kBc rows: twice v3's)
  // The K, V, Q and dO tiles hold swizzled rows of kLdT = D elements (swizzled_offset) where a
  // row is whole 128-byte groups (D 64, 128); each keeps the place and size of a padded tile (its
  // last kPad * rows elements unused), and every tile starts at a multiple of 128 bytes. D 32 and
  // 96 keep padded rows.
  constexpr bool kSwz = D % 64 == 0;
  constexpr int kLdT = kSwz ? D : kLd;  // elements between rows inside a tile
  static_assert(!kSwz || (kTile * 2) % 128 == 0 && (kKvTile * 2) % 128 == 0, "aligned tiles");
  // Two arrays, one per alignment: one name declared with both (D 32/96 and D 64/128 in one
  // translation unit) is one array with the first alignment (nvcc warning 1886), and the PTX of
  // the swizzled kernel would not ask for the 128-byte base its tiles rely on.
  extern __shared__ __align__(16) unsigned char smem_padded[];
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sK = reinterpret_cast<T*>(kSwz ? smem_swizzled : smem_padded);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                               // two buffers of kBr: D
  T* sdS = reinterpret_cast<T*>(sD + 2 * kBr);            // dS^T: kBc keys x kBr queries

  // dQ in warp tiles of kDqRt m16 tiles (kDqRowTiles).
  constexpr int kDqRt = kDqRowTiles<D>;
  constexpr int kDqWc = kDqWarpCols<D>, kDqC = kDqChunk<D>;
  static_assert(kDqWc % kDqC == 0, "dQ chunks");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;        // (kv_bh * split + part) * n_tiles + key tile
  const int64_t unit = tile_bh / p.n_tiles;  // t22: (K/V head, part)
  const int64_t kv_bh = unit / p.split;      // t20: the block's K/V head, b * heads_kv + h_kv
  const int slice = p.group / p.split;       // t22: query heads this block walks
  // t22: the first of them, kv_bh * group + part * slice, part = unit % split the block's slice.
  const int64_t head0 = kv_bh * p.group + (unit % p.split) * slice;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  // Causal (bottom-right): query i sees keys j <= causal_last_key(i) = i + off (shapes.h).
  const int64_t off = causal_last_key(0, seq_q, seq_k);

  const int d = p.d;  // rows of d elements in global memory
  const T* K = static_cast<const T*>(p.k) + kv_bh * seq_k * d;
  const T* V = static_cast<const T*>(p.v) + kv_bh * seq_k * d;

  // The Q tiles that can see this K tile: with causal masking the first query to see key k0 is
  // k0 - off; every tile before the one holding it is entirely masked and skipped.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBr;  // may be >= n_qt: no work

  // t20: the group walk, t22: over the block's slice. Iteration it is Q tile qt_begin + it % n_per
  // of query head head0 + it / n_per; Q, dO, L, D and the dQ accumulator of that head.
  const int n_per = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;
  const int n_iter = n_per * slice;
  auto head_of = [&](int it) { return head0 + it / n_per; };
  auto row_of = [&](int it) { return (qt_begin + it % n_per) * kBr; };
  auto q_of = [&](int64_t bh) { return static_cast<const T*>(p.q) + bh * seq_q * d; };
  auto do_of = [&](int64_t bh) { return static_cast<const T*>(p.dout) + bh * seq_q * d; };

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_tile_async<T, D, kBc, kThreads, kSwz>(sK, K, k0, seq_k, d, tid);
  load_tile_async<T, D, kBc, kThreads, kSwz>(sV, V, k0, seq_k, d, tid);
  if (n_iter > 0) {
    const int64_t q0 = row_of(0), bh = head_of(0);
    load_tile_async<T, D, kBr, kThreads, kSwz>(sQ, q_of(bh), q0, seq_q, d, tid);
    load_tile_async<T, D, kBr, kThreads, kSwz>(sdO, do_of(bh), q0, seq_q, d, tid);
    const int64_t row = q0 + (tid & (kBr - 1));
    if (tid < kBr)
      sL[tid] = load_l2(p.lse + bh * seq_q, row, seq_q);
    else if (tid < 2 * kBr)
      sD[tid - kBr] = row < seq_q ? p.delta[bh * seq_q + row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  float dv[D / 8][4], dk[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[nt][e] = dk[nt][e] = 0.0f;

  const int kr0 = warp * 16;                           // this warp's first key row in the tile
  const int qr0 = (warp % kDqRowWarps<D>)*16 * kDqRt;  // its first query row, for dQ,
  const int dq0 = (warp / kDqRowWarps<D>)*kDqWc;       // and its first column of dQ

  // The bases of every address in the loop, computed once. ldmatrix: K, V as A of S^T, dP^T
  // (this warp's rows); K as B of dQ (.trans, this warp's columns); Q, dO as B in both forms
  // (buffer 0; a tile adds its buffer's offset); dS^T as A of dQ (.trans, this warp's query
  // rows). The store of dS^T (rows kr0 + g, + 8; columns 2t, 2t + 1). The Q / dO copy plan.
  // Each ldmatrix base is a LaneAddr: padded, one base, and a read adds a constant. Swizzled:
  // every ldmatrix row of this lane is lane % 8 modulo 8 (fragments start at multiples of 16
  // rows), so the lane's address is the unswizzled one with bits 4-6 flipped by swz; four bases,
  // one per 16-column step modulo 4, keep every read a base plus a constant (LaneAddr says why).
  constexpr uint32_t kTileBytes = kTile * 2;
  const uint32_t swz = swizzle_xor(lane);
  using Lane = LaneAddr<kSwz>;
  const uint32_t rows_off = lane_rows<kLdT>(lane), trans_off = lane_trans<kLdT>(lane);
  const Lane k_a(smem_addr(sK) + rows_off + at<kLdT>(kr0, 0), swz);
  const Lane v_a(smem_addr(sV) + rows_off + at<kLdT>(kr0, 0), swz);
  const Lane k_x(smem_addr(sK) + rows_off + at<kLdT>(0, dq0), swz);
  const Lane q_t0(smem_addr(sQ) + trans_off, swz), q_x0(smem_addr(sQ) + rows_off, swz);
  const Lane do_t0(smem_addr(sdO) + trans_off, swz), do_x0(smem_addr(sdO) + rows_off, swz);
  const uint32_t ds_t = smem_addr(sdS) + lane_trans<kLdS>(lane) + at<kLdS>(0, qr0);
  T* const ds_st = sdS + (kr0 + g) * kLdS + 2 * t;
  const TileCopy<T, D, kSwz> copy(tid, d);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    const int64_t q0 = row_of(it), bh = head_of(it);  // t20: this iteration's tile and head
    float* const dQacc = p.dq_accum + bh * seq_q * d;
    const bool has_next = it + 1 < n_iter;

    // Prefetch Q_{i+1}, dO_{i+1} into the other buffer (always commit: an empty group keeps the
    // wait<1> below correct on the last tile). L and D go through registers, stored after the
    // math so their latency hides behind it.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = row_of(it + 1), bh1 = head_of(it + 1);  // t20: the next head's tile
      const T* Q = q_of(bh1);
      const T* dO = do_of(bh1);
      if (q1 + kBr <= seq_q) {  // a full tile: the plan, no bounds test
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * d);
        copy.full(sdo_addr + next, dO + q1 * d);
      } else {  // the sequence ends inside it: rows past seq_q zero-filled
        load_tile_async<T, D, kBr, kThreads, kSwz>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, d, tid);
        load_tile_async<T, D, kBr, kThreads, kSwz>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, d, tid);
      }
      const int64_t row = q1 + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(p.lse + bh1 * seq_q, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? p.delta[bh1 * seq_q + row] : 0.0f;
    }
    fa::mma::cp_async_commit();
    fa::mma::cp_async_wait<1>();
    __syncthreads();

    const uint32_t cur = uint32_t(buf) * kTileBytes;
    const Lane q_t(q_t0, cur), q_x(q_x0, cur), do_t(do_t0, cur), do_x(do_x0, cur);
    const float* l_s = sL + buf * kBr;
    const float* d_s = sD + buf * kBr;
    // Mask only where needed: keys past seq_k, or a tile crossing the causal diagonal (some key
    // of the tile lies beyond what the tile's first query sees).
    const bool need_mask = (k0 + kBc > seq_k) || (p.causal && k0 + kBc - 1 > q0 + off);

#pragma unroll
    for (int qc = 0; qc < kBr / kChunk; ++qc) {
      constexpr int kNt = kChunk / 8;  // n-tiles of the chunk
      const int c0 = qc * kChunk;      // first query column of the chunk, within the tile

      // S^T = K_j Q^T over this chunk of queries.
      float s[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, k_a.at(0, ks));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, q_t.at(at<kLdT>(c0 + np * 16, 0), ks));
          mma_pair<T>(s[2 * np], s[2 * np + 1], a, b);
        }
      }

      // P^T = exp(scale S^T - L), masked where needed: need_mask is tested once per chunk, and
      // tiles that need no mask run the exponentials alone. Element (nt, e): key row kr0 + g +
      // 8*(e/2), query column c0 + 8*nt + 2t + e%2.
      if (need_mask) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c0 + nt * 8 + 2 * t + (e & 1);
            const int64_t key = k0 + kr0 + g + 8 * (e >> 1);
            const int64_t query = q0 + col;
            const bool keep = key < seq_k && !(p.causal && key > query + off);
            s[nt][e] = keep ? ex2_ftz(fmaf(s[nt][e], p.scale_log2, -l_s[col])) : 0.0f;
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[nt][e] = ex2_ftz(fmaf(s[nt][e], p.scale_log2, -l_s[c0 + nt * 8 + 2 * t + (e & 1)]));
      }

      // dV_j += P^T dO: k runs over the chunk's queries, 16 at a time.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, do_x.at(at<kLdT>(c0 + kk * 16, 0), np));
          mma_pair<T>(dv[2 * np], dv[2 * np + 1], a, b);
        }
      }

      // dP^T = V_j dO^T over the same chunk.
      float dp[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, v_a.at(0, ks));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, do_t.at(at<kLdT>(c0 + np * 16, 0), ks));
          mma_pair<T>(dp[2 * np], dp[2 * np + 1], a, b);
        }
      }

      // dS^T = P^T * (dP^T - D): D belongs to the query, the column.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dp[nt][e] = s[nt][e] * (dp[nt][e] - d_s[c0 + nt * 8 + 2 * t + (e & 1)]);

          // dK_j += dS^T Q; the same 16-bit dS^T into sdS for dQ.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, dp[2 * kk], dp[2 * kk + 1]);
        store_a_at<kLdS>(ds_st + c0 + kk * 16, a);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, q_x.at(at<kLdT>(c0 + kk * 16, 0), np));
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
        }
      }
    }

    // dQaccum_i += dS K_j: warp w takes query rows qr0 .. qr0 + 16 kDqRt - 1 and columns dq0 ..
    // dq0 + kDqWarpCols - 1, A = dS = sdS^T (all kBc keys, written by the eight warps), B = K_j;
    // kDqCols columns at a time; each B fragment feeds the kDqRt m-tiles.
    __syncthreads();         // sdS complete
    if (q0 + qr0 < seq_q) {  // else every row of this warp lies past seq_q
#pragma unroll
      for (int dc = 0; dc < kDqWc / kDqC; ++dc) {
        const int n0 = dq0 + dc * kDqC;  // first column of the chunk
        float acc[kDqRt][kDqC / 8][4];
#pragma unroll
        for (int mt = 0; mt < kDqRt; ++mt)
#pragma unroll
          for (int nt = 0; nt < kDqC / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kBc / 16; ++ks) {
          uint32_t a[kDqRt][4];
#pragma unroll
          for (int mt = 0; mt < kDqRt; ++mt)
            ldmatrix_x4_trans(a[mt], ds_t + at<kLdS>(ks * 16, mt * 16));
#pragma unroll
          for (int np = 0; np < kDqC / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, k_x.at(at<kLdT>(ks * 16, 0), dc * kDqC / 16 + np));
#pragma unroll
            for (int mt = 0; mt < kDqRt; ++mt)
              mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b);
          }
        }
        // Element (mt, nt, e): query row qr0 + 16 mt + g + 8*(e/2), column n0 + 8*nt + 2t + e%2.
#pragma unroll
        for (int mt = 0; mt < kDqRt; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t row = q0 + qr0 + 16 * mt + g + 8 * h;
            if (row >= seq_q) continue;
            float* dst = dQacc + row * d + n0 + 2 * t;
#pragma unroll
            for (int nt = 0; nt < kDqC / 8; ++nt) {
              if (n0 + 8 * nt >= d) break;  // rows of d: the zero columns past it are not added
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
              // sm_90 adds a float2 in one atomic (the two columns are adjacent and 8-byte
              // aligned: 2t is even): half the atomic instructions and L2 sector updates of two
              // scalar ones (Nsight Compute, H100: 1.61 G reduction sectors with scalar atomics).
              atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                        make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
#else
              atomicAdd(dst + 8 * nt, acc[mt][nt][2 * h]);
              atomicAdd(dst + 8 * nt + 1, acc[mt][nt][2 * h + 1]);
#endif
            }
          }
      }
    }

    // L, D of the next tile into the other buffer (nobody reads it during this iteration).
    if (has_next) {
      if (tid < kBr)
        sL[(buf ^ 1) * kBr + tid] = next_ld;
      else if (tid < 2 * kBr)
        sD[(buf ^ 1) * kBr + tid - kBr] = next_ld;
    }
    __syncthreads();  // everyone is done with `buf` before the next prefetch overwrites it
  }
  fa::mma::cp_async_wait<0>();

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must. t20: the
  // sums over the group, into the block's K/V head. t22: a slice's sums are parts, added into
  // the fp32 buffer (zeros added where no query of the slice sees a key).
  if (p.split == 1) {
    T* dK = static_cast<T*>(p.dk) + kv_bh * seq_k * d;
    T* dV = static_cast<T*>(p.dv) + kv_bh * seq_k * d;
    store_rows<T, D, D>(dK, dk, k0 + kr0, 0, seq_k, p.scale, d, lane);
    store_rows<T, D, D>(dV, dv, k0 + kr0, 0, seq_k, 1.0f, d, lane);
  } else {
    const int64_t n = p.n_kv_rows * d;  // elements of dK (and of dV)
    add_rows<D>(p.dkv_parts + kv_bh * seq_k * d, dk, k0 + kr0, seq_k, d, lane);
    add_rows<D>(p.dkv_parts + n + kv_bh * seq_k * d, dv, k0 + kr0, seq_k, d, lane);
  }
}

// ---- dQ = dQaccum * scale ------------------------------------------------------------------
// n4 = elements / 4 (every d here is a multiple of 8); 16-byte loads, 8-byte stores.
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

// ---- launcher ------------------------------------------------------------------------------
// t22: how many blocks share a K/V tile's group. Causal: one per query head (the MHA grid).
// Full attention: every block does the same work, so the grid runs in waves of `slots` blocks
// (the GPU's SMs times the blocks one SM holds), each as long as one block's walk over group /
// split query heads. t20's walk (split 1) measured level with MHA wherever its n_kt x batch x
// heads_kv blocks fill the slots; where they leave slots idle (MQA at N 4096: 64 blocks, 1.96x
// the MHA time per query head), the split whose waves end soonest (common/group_split_plan.h,
// full_split, which the CPU tier checks).
int split_of(const fa::AttentionShape& s, int64_t n_kt, int64_t slots) {
  const int group = std::max(int(s.group()), 1);
  if (s.causal) return group;
  return fa::ch06::full_split(group, n_kt * s.batch * s.kv_heads(), slots);
}

template <class T, int D>
void launch(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  Params p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.dout = a.dout;
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_accum = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  p.d = int(s.head_dim);
  p.group = int(s.group());
  p.n_kv_rows = s.batch * s.kv_heads() * s.seq_k;

  // t22: the split, and its parts zeroed on the stream before the kernel adds into them. The
  // slots: the SMs times the blocks of this kernel one SM holds.
  constexpr int kSmem = dkdv_smem_bytes<D>();
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(dkdv_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int per_sm = 1;
  FA_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dkdv_kernel<T, D>, kThreads, kSmem));
  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  p.split = split_of(s, n_kt, int64_t(std::max(per_sm, 1)) * fa::gpu_info().sm_count);
  // The conversion stores four 16-bit elements at a time: dK and dV must be 8-byte aligned for it,
  // else the walk stores them itself.
  if (reinterpret_cast<uintptr_t>(a.dk) % 8 != 0 || reinterpret_cast<uintptr_t>(a.dv) % 8 != 0)
    p.split = 1;
  // The parts: a stream-ordered buffer (stream_buffer.h); without it the call walks whole groups.
  fa::StreamBuffer parts(p.split > 1 ? 2 * size_t(s.k_numel()) * sizeof(float) : 0, stream);
  if (p.split > 1 && parts.as<float>() == nullptr) p.split = 1;
  if (p.split > 1) {
    p.dkv_parts = parts.as<float>();
    FA_CUDA_CHECK(cudaMemsetAsync(p.dkv_parts, 0, 2 * size_t(s.k_numel()) * sizeof(float), stream));
  }

  // t20: one block per (K/V tile, batch x heads_kv); t22: times the split.
  const int64_t kv_bh = s.batch * s.kv_heads() * p.split;
  FA_REQUIRE(n_kt * kv_bh <= INT32_MAX,
             "batch * heads_kv * split * key tiles must fit in gridDim.x");
  FA_REQUIRE(ceil_div(s.seq_q, kBr) * p.group <= INT32_MAX,
             "a block's Q tiles over its group must fit in an int");

  if (n_kt > 0 && kv_bh > 0) {
    p.n_tiles = n_kt;
    dkdv_kernel<T, D><<<static_cast<unsigned>(n_kt * kv_bh), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace).
  constexpr int kConvThreads = 256;
  const int64_t n4 = s.q_numel() / 4;
  if (n4 > 0) {
    const int64_t blocks = std::min<int64_t>(ceil_div(n4, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        a.workspace, static_cast<T*>(a.dq), n4, p.scale);
    FA_CHECK_LAUNCH();
  }
  // t22: dK = scale * (sum of the parts), dV = the sum, by the same conversion.
  const int64_t kv4 = s.k_numel() / 4;
  if (p.split > 1 && kv4 > 0) {
    const int64_t blocks = std::min<int64_t>(ceil_div(kv4, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        p.dkv_parts, static_cast<T*>(a.dk), kv4, p.scale);
    FA_CHECK_LAUNCH();
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        p.dkv_parts + s.k_numel(), static_cast<T*>(a.dv), kv4, 1.0f);
    FA_CHECK_LAUNCH();
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <int D>
void run_head_dim(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  // 155 KiB per block at D = 128: an H100 (227 KiB) or an A100 (163 KiB) has it, sm_86/89
  // (99 KiB) not. Refuse before anything runs, rather than fail in cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(dkdv_smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr,
             std::string(kName) + " needs the fp32 workspace (dQ accumulator)");

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream).
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  if (a.dtype == fa::DType::BF16)
    launch<__nv_bfloat16, D>(a, stream);
  else
    launch<__half, D>(a, stream);
}

// t16: every multiple of 8 up to 128, at the next instance (v4's header says why not 256).
void attention_bwd_t22(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(),
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(d <= 0 || d > 128 || d % fa::kHeadDimStep != 0,
                    std::string(kName) +
                        " takes head dims 32, 64, 96 and 128, and the multiples of 8 below them "
                        "rounded up; not " +
                        std::to_string(d));
  if (d <= 32) return run_head_dim<32>(a, stream);
  if (d <= 64) return run_head_dim<64>(a, stream);
  if (d <= 96) return run_head_dim<96>(a, stream);
  return run_head_dim<128>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {kName,
             attention_bwd_t22,
             "t20 with its group split among blocks: causal, a block per query head, the dK and dV "
             "parts added by fp32 atomics; K and V read in place",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             /*min_sm=*/80,
             /*deterministic=*/false,
             /*gqa=*/true,
             /*rounds_head_dim=*/true});
FA_REGISTER_SMEM(kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128>(d,
                                      [](auto D) { return dkdv_smem_bytes<decltype(D)::value>(); });
});
