// v5_warp_tiles.cu: 06/v5_warp_tiles, v4 with FlashAttention-2's warp tiles at D 64 and 128: each
// product of the backward gets the warp layout that loads the fewest fragments for it, and P and
// dS go through shared memory to get from the layout of one product to the next. bf16 / fp16 in,
// mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3 and v4).
// The last rung of the chapter's main path.
//
// What it adds to v4, and why. In v4 each warp owns 16 keys of the block's 128 and all D columns
// of dK and dV, so P^T and dS^T stay in the registers where S^T and dP^T were computed. The price:
// all eight warps load the same Q and dO fragments, for S^T, dP^T, dV and dK. Counted per block
// and pair of tiles at D 128 (notes/06_flash_backward.md, section 5c), that is 1408 ldmatrix.x4
// where FlashAttention-2's layout needs 1152; Nsight Compute measured 1.22x FA2's ldmatrix
// wavefronts for v4, whose dK/dV kernel is 0.77-0.78x FA2's at every N from 1024 to 16384, and
// shared memory is the unit it waits for. warp_tiles_kernel:
//   * S = Q K^T and dP = dO V^T: warp (wm, wn) computes 32 queries x 32 keys (64 keys with
//     128-query tiles). Per k16 step it loads 2 A (Q) and 2 B (K) fragments for 8 MMAs: 32 loads
//     per product per warp at D 128, against v4's 40 (1 A and 4 B for 8 MMAs).
//   * P and dS, 16-bit, into shared memory (queries x 128 keys each, padded rows), then a barrier.
//   * dV += P^T dO and dK += dS^T Q: warp (wk, wd) = (warp % 4, warp / 4) owns 32 keys x D / 2
//     columns. A = P^T (ldmatrix .trans of the P tile), 2 per k16 step; B = dO, D / 32 per step:
//     24 loads per product per warp at D 128, against v4's 32. The accumulators are the same size
//     as v4's (32 keys x 64 columns x 2 = 16 keys x 128 columns x 2).
//   * dQ += dS K: 32 x 32 warp tiles (v4's at D 128), with A = dS read from the P tile.
//   The stores of P and dS cost 2 x 64 x 128 x 2 B per tile pair, where v4 stored dS^T only;
//   ldmatrix and shared stores are then exactly FA2's counts (302.0 M and 68.16 M at D 128
//   N 8192).
// Two more changes go with the new kernel, each measured on its own (tuning/README.md, steps t11
// to t13):
//   * Two barriers per Q tile instead of three: wait for tile i's copies first, then one barrier
//     says both "tile i has arrived" and "every warp is done with tile i - 1", and only then the
//     prefetch of tile i + 1 goes into the buffer tile i - 1 used. Barrier stalls per warp fell
//     from 108 K to 66 K (FA2: 31 K).
//   * At D 64, Q tiles of 128 queries (kBrW): a 64-query tile is half the MMAs of D 128 for the
//     same fixed work per tile, and FlashAttention-2 picks 128 there too. The warps of S and dP
//     become 4 x 2 of 32 queries x 64 keys (64 registers each, which D 64 can afford: dK and dV
//     take 64 together); those of dQ 4 x 2 of 32 x 32.
// D 32 and 96, whose rows are not whole 128-byte groups (the swizzle), run v4's dkdv_kernel,
// unchanged.
//
// The map (three launches on one stream, after the caller's memset of the workspace), as v4,
// with warp_tiles_kernel as the dK/dV kernel at D 64 and 128:
//   per Q tile: wait for the tile, barrier, prefetch the next one; S = Q K^T, dP = dO V^T;
//   P = exp(scale S - L), dS = P (dP - D) into shared memory; barrier; dV += P^T dO,
//   dK += dS^T Q; dQaccum += dS K by atomics.
// And in this file, top to bottom: v4's pieces and dkdv_kernel (for D 32 and 96), then this rung:
// kBrW, the products of a warp tile (rows_times_keys, keys_times_cols), warp_tiles_kernel; the
// launcher, the registration.
//
// Shared memory: 171 KiB at D 128, 178 KiB at D 64: more than an A100's 163 KiB, where v5
// reports those head dims as unsupported (06/v4_bc128_tuned runs them in 91 and 155 KiB).
// ptxas (CUDA 13.0, sm_90): 252 registers at D 128, 254 at D 64, no spills.
//
// What is left against FA2 (Nsight Compute, D 128 N 8192): barrier stalls, 66 K per warp
// against 31 K, and 2.46 G instructions against 2.12 G, part of it the XOR of every swizzled
// read (swz_addr).
//
// Speed (H100 80GB HBM3, 2026-11-25): D 128 N 8192 bf16 274.9 TFLOP/s (FlashAttention-2 295.2),
// D 64 259.7 (277.5) (fa_bench and PyTorch in one run,
// notes/measured/h100-2026-11-25/v13_sdpa.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "attention_tiles.cuh"  // fa::tiles::LaneAddr, a lane's ldmatrix addresses (05/v4)
#include "ch06_preprocess.h"
#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "registry.h"

namespace {

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

// Copy rows [row0, row0 + ROWS) of a [seq, D] row-major matrix `g` into the padded tile `s`,
// 16 bytes per cp.async. Rows at or past `seq` are zero-filled (nothing is read for them).
// kSwizzled: into a swizzled tile of D elements per row instead (swizzled_offset).
template <class T, int D, int ROWS, int THREADS, bool kSwizzled = false>
__device__ __forceinline__ void load_tile_async(T* s, const T* g, int64_t row0, int64_t seq,
                                                int tid) {
  constexpr int kChunksPerRow = D * int(sizeof(T)) / 16;
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kLd = D + kPad;
#pragma unroll
  for (int c = tid; c < kChunks; c += THREADS) {
    const int r = c / kChunksPerRow;
    const int cc = c % kChunksPerRow;
    const bool valid = row0 + r < seq;
    const T* src = valid ? g + (row0 + r) * int64_t(D) + cc * 8 : g;
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
// col0 .. col0 + DC - 1 of a [seq, D] matrix (DC = D, col0 = 0 unless the columns are split).
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
// 16-byte chunk tid % kChunksPerRow of rows row + kRowsPerPass * i, i < kPasses. Threads past
// kRowsPerPass * kChunksPerRow (D = 96: 12 chunks a row, 21 rows a pass) copy nothing. A strided
// loop from the thread index (load_tile_async) has a trip count the compiler cannot see: it
// emits a generic loop with a 64-bit bounds test per copy. kSwizzled: into swizzled rows of D
// elements; the chunk moves by row % 8, the same for every pass (kRowsPerPass is a multiple of 8
// at D = 64 and 128), so the pass offsets stay constant. ROWS: tiles of ROWS rows instead of kBr
// (warp_tiles_kernel's 128-query tiles at D 64).
template <class T, int D, bool kSwizzled = false, int ROWS = kBr>
struct TileCopy {
  static constexpr int kLd = kSwizzled ? D : D + kPad;
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (ROWS + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr bool kExact = kThreads % kChunksPerRow == 0 && ROWS % kRowsPerPass == 0;
  int row;       // this thread's first row (ROWS: none)
  int src;       // its first chunk, in elements from the tile's first row in global memory
  uint32_t dst;  // and in bytes from the tile's start in shared memory

  __device__ __forceinline__ explicit TileCopy(int tid) {
    row = tid < kRowsPerPass * kChunksPerRow ? tid / kChunksPerRow : ROWS;
    const int col = (tid % kChunksPerRow) * 8;
    src = row * D + col;
    static_assert(!kSwizzled || (kExact && kRowsPerPass % kSwizzleRows == 0),
                  "one swizzle for every pass");
    if constexpr (kSwizzled)
      dst = uint32_t(swizzled_offset<D>(row, col / 8)) * 2;
    else
      dst = at<kLd>(row, col);
  }
  // Rows [0, ROWS) of the tile whose first row is `g` into the tile at shared address `s`.
  __device__ __forceinline__ void full(uint32_t s, const T* g) const {
#pragma unroll
    for (int i = 0; i < kPasses; ++i)
      if (kExact || row + i * kRowsPerPass < ROWS)
        fa::mma::cp_async_16(s + dst + at<kLd>(i * kRowsPerPass, 0),
                             g + src + i * kRowsPerPass * D);
  }
};

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fp32 [batch * heads][seq_q][D], zero on entry (the caller's workspace)
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, head)
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  bool causal;
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
  const int64_t tile_bh = blockIdx.x;  // bh * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  // Causal (bottom-right): query i sees keys j <= causal_last_key(i) = i + off (shapes.h).
  const int64_t off = causal_last_key(0, seq_q, seq_k);

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;
  float* dQacc = p.dq_accum + bh * seq_q * D;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  // The Q tiles that can see this K tile: with causal masking the first query to see key k0 is
  // k0 - off; every tile before the one holding it is entirely masked and skipped.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBr;  // may be >= n_qt: no work

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_tile_async<T, D, kBc, kThreads, kSwz>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBc, kThreads, kSwz>(sV, V, k0, seq_k, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBr;
    load_tile_async<T, D, kBr, kThreads, kSwz>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBr, kThreads, kSwz>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBr - 1));
    if (tid < kBr)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBr)
      sD[tid - kBr] = row < seq_q ? delta[row] : 0.0f;
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
  using Lane = fa::tiles::LaneAddr<kSwz>;
  const uint32_t rows_off = lane_rows<kLdT>(lane), trans_off = lane_trans<kLdT>(lane);
  const Lane k_a(smem_addr(sK) + rows_off + at<kLdT>(kr0, 0), swz);
  const Lane v_a(smem_addr(sV) + rows_off + at<kLdT>(kr0, 0), swz);
  const Lane k_x(smem_addr(sK) + rows_off + at<kLdT>(0, dq0), swz);
  const Lane q_t0(smem_addr(sQ) + trans_off, swz), q_x0(smem_addr(sQ) + rows_off, swz);
  const Lane do_t0(smem_addr(sdO) + trans_off, swz), do_x0(smem_addr(sdO) + rows_off, swz);
  const uint32_t ds_t = smem_addr(sdS) + lane_trans<kLdS>(lane) + at<kLdS>(0, qr0);
  T* const ds_st = sdS + (kr0 + g) * kLdS + 2 * t;
  const TileCopy<T, D, kSwz> copy(tid);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBr;
    const bool has_next = qt + 1 < n_qt;

    // Prefetch Q_{i+1}, dO_{i+1} into the other buffer (always commit: an empty group keeps the
    // wait<1> below correct on the last tile). L and D go through registers, stored after the
    // math so their latency hides behind it.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBr;
      if (q1 + kBr <= seq_q) {  // a full tile: the plan, no bounds test
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * D);
        copy.full(sdo_addr + next, dO + q1 * D);
      } else {  // the sequence ends inside it: rows past seq_q zero-filled
        load_tile_async<T, D, kBr, kThreads, kSwz>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
        load_tile_async<T, D, kBr, kThreads, kSwz>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      }
      const int64_t row = q1 + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? delta[row] : 0.0f;
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
            float* dst = dQacc + row * D + n0 + 2 * t;
#pragma unroll
            for (int nt = 0; nt < kDqC / 8; ++nt) {
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

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
  store_rows<T, D, D>(dK, dk, k0 + kr0, 0, seq_k, p.scale, lane);
  store_rows<T, D, D>(dV, dv, k0 + kr0, 0, seq_k, 1.0f, lane);
}

// ---- this rung: FlashAttention-2's warp tiles (D 64, 128) --------------------------------------
constexpr int kLdP = kBc + kPad;  // a row of the P or dS tile: kBc keys + padding (16-bit)

// The Q tile of this kernel: 128 queries at D = 64, 64 at D = 128 (kBr). At D = 64 a Q tile of
// 64 is half the MMAs of D = 128 for the same fixed work per tile (two barriers, the L and D
// loads, a round of dQ atomics); FlashAttention-2 picks 128 there too.
template <int D>
constexpr int kBrW = D == 64 ? 128 : kBr;

// Shared memory: dkdv_kernel's K, V, Q x2, dO x2 (swizzled rows, in its places), L x2, D x2, then
// the P and dS tiles (kBrW x kLdP each). 171 KiB at D 128, 178 KiB at D 64.
template <int D>
constexpr int warp_tiles_smem_bytes() {
  constexpr int kRows = kBrW<D>;
  return (2 * kBc + 4 * kRows) * (D + kPad) * 2 + 4 * kRows * int(sizeof(float)) +
         2 * kRows * kLdP * 2;
}
static_assert(warp_tiles_smem_bytes<128>() ==
                  smem_bytes_tiles<128>() + 4 * kBr * int(sizeof(float)) + 2 * kBr * kLdP * 2,
              "D 128: dkdv_kernel's tiles plus P and dS");

// An ldmatrix address into a swizzled tile: the unswizzled one with bits 4-6 flipped by the lane's
// row % 8 (every fragment starts at a multiple of 16 rows; swizzle_xor). One XOR per read, where
// dkdv_kernel keeps four bases per address (LaneAddr): those would take 21 more registers for this
// kernel's seven ldmatrix addresses, beside accumulators that already fill 253.
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
// ldmatrix address of its first query row in dS) and Y the K tile: dQ += dS K.
template <class T, int D, int kRows, int kCols, bool kXT = true>
__device__ __forceinline__ void keys_times_cols(float (&acc)[2][kCols / 8][4], uint32_t a_base,
                                                uint32_t b_base, uint32_t swz) {
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    uint32_t a[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if constexpr (kXT)
        ldmatrix_x4_trans(a[mt], a_base + at<kLdP>(16 * kk, 16 * mt));
      else
        ldmatrix_x4(a[mt], a_base + at<kLdP>(16 * mt, 16 * kk));
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

// dQaccum[p], [p + 1] += x, y: sm_90 adds a float2 in one atomic (v3's).
__device__ __forceinline__ void add_dq(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) warp_tiles_kernel(Params p) {
  static_assert(D == 64 || D == 128, "swizzled 128-byte rows: D 64 or 128");
  static_assert(kWarps == 8 && kBr == 64 && kBc == 128, "warps: 2 x 4 (S, dQ), 4 x 2 (dK, dV)");
  constexpr int kBrT = kBrW<D>;       // queries per Q tile: 128 at D 64, 64 at D 128
  constexpr int kLd = D + kPad;       // dkdv_kernel's tile places: rows of kLd, used D at a time
  constexpr int kTile = kBrT * kLd;   // a Q or dO buffer
  constexpr int kKvTile = kBc * kLd;  // K or V
  constexpr int kHalf = D / 2;        // columns of dK, dV per warp
  // Warps of S, dP and dQ: 32 queries each, kWm along the queries (2, or 4 with 128-query tiles)
  // by kWn along the keys of S (or the columns of dQ).
  constexpr int kWm = kBrT / 32, kWn = kWarps / kWm;
  constexpr int kKw = kBc / kWn;     // keys of S, dP per warp: 32 (or 64)
  constexpr int kSn = kKw / 8;       // their n8 tiles
  constexpr int kQuarter = D / kWn;  // columns of dQ per warp: D / 4 (or D / 2)
  // Swizzled tiles start at 128-byte boundaries. The array has a name of its own: the same
  // `extern __shared__` name declared in one translation unit with two alignments (this kernel's
  // 128 and dkdv_kernel's 16, the kernel at D 32 and 96) is one array with the first alignment
  // (nvcc warning 1886), and the PTX would no longer ask for the 128 bytes this kernel relies on.
  extern __shared__ __align__(128) unsigned char smem_warp_tiles[];
  T* sK = reinterpret_cast<T*>(smem_warp_tiles);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBrT: L * log2(e)
  float* sD = sL + 2 * kBrT;                              // two buffers of kBrT: D
  T* sP = reinterpret_cast<T*>(sD + 2 * kBrT);            // P: kBrT queries x kBc keys
  T* sdS = sP + kBrT * kLdP;                              // dS: the same layout

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // bh * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;
  float* dQacc = p.dq_accum + bh * seq_q * D;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  const int64_t n_qt = ceil_div(seq_q, kBrT);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBrT;  // may be >= n_qt: no work

  // Prologue, as dkdv_kernel: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i.
  load_tile_async<T, D, kBc, kThreads, true>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBc, kThreads, true>(sV, V, k0, seq_k, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBrT;
    load_tile_async<T, D, kBrT, kThreads, true>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBrT, kThreads, true>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBrT - 1));
    if (tid < kBrT)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBrT)
      sD[tid - kBrT] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  // The three warp layouts.
  constexpr int kWnShift = kWn == 4 ? 2 : 1;  // warp / kWn as a shift (kWn is 4 or 2)
  static_assert(kWn == 1 << kWnShift, "kWn: 4 or 2");
  const int wm = warp >> kWnShift, wn = warp & (kWn - 1);  // S, dP: queries 32 wm, keys kKw wn
  const int wk = warp & 3, wd = warp >> 2;  // dK, dV: keys 32 wk .., columns kHalf wd ..
  const int wq = wm, wc = wn;               // dQ: queries 32 wq .., columns kQuarter wc ..

  float dv[2][kHalf / 8][4], dk[2][kHalf / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][nt][e] = dk[mt][nt][e] = 0.0f;

  // Every address of the loop as a base plus a compile-time offset (as dkdv_kernel); the swizzled
  // tiles' reads then flip bits 4-6 (swz_addr). Q, dO: buffer 0 (a tile adds its buffer's offset).
  // ldmatrix forms (lane_rows, lane_trans): A = tile, rows (lane_rows); B = tile^T (lane_trans);
  // A = tile^T, .trans (lane_trans); B = tile, .trans (lane_rows).
  const uint32_t swz = swizzle_xor(lane);
  const uint32_t rows_d = lane_rows<D>(lane), trans_d = lane_trans<D>(lane);
  const uint32_t q_a0 = smem_addr(sQ) + rows_d + at<D>(32 * wm, 0);       // S: A = Q
  const uint32_t do_a0 = smem_addr(sdO) + rows_d + at<D>(32 * wm, 0);     // dP: A = dO
  const uint32_t k_b = smem_addr(sK) + trans_d + at<D>(kKw * wn, 0);      // S: B = K^T
  const uint32_t v_b = smem_addr(sV) + trans_d + at<D>(kKw * wn, 0);      // dP: B = V^T
  const uint32_t do_x0 = smem_addr(sdO) + rows_d + at<D>(0, kHalf * wd);  // dV: B = dO
  const uint32_t q_x0 = smem_addr(sQ) + rows_d + at<D>(0, kHalf * wd);    // dK: B = Q
  const uint32_t k_x = smem_addr(sK) + rows_d + at<D>(0, kQuarter * wc);  // dQ: B = K
  const uint32_t p_at = smem_addr(sP) + lane_trans<kLdP>(lane) + at<kLdP>(0, 32 * wk);    // P^T
  const uint32_t ds_at = smem_addr(sdS) + lane_trans<kLdP>(lane) + at<kLdP>(0, 32 * wk);  // dS^T
  const uint32_t ds_a = smem_addr(sdS) + lane_rows<kLdP>(lane) + at<kLdP>(32 * wq, 0);    // dS
  // Where this thread stores its P and dS elements: row 32 wm + g, columns kKw wn + 2t.
  T* const p_st = sP + (32 * wm + g) * kLdP + kKw * wn + 2 * t;
  T* const ds_st = sdS + (32 * wm + g) * kLdP + kKw * wn + 2 * t;
  const TileCopy<T, D, true, kBrT> copy(tid);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);
  constexpr uint32_t kTileBytes = kTile * 2;

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBrT;
    const bool has_next = qt + 1 < n_qt;

    // One barrier for two things. Tile i is the only copy in flight here; once every warp has
    // it, every warp is also done with tile i - 1: its Q and dO buffer (which the prefetch below
    // overwrites), P, dS, L and D. (Waiting for tile i after issuing the prefetch of i + 1, as
    // dkdv_kernel does, takes a second barrier at the end of each tile.)
    fa::mma::cp_async_wait<0>();
    __syncthreads();

    // Prefetch Q_{i+1}, dO_{i+1}, L and D as dkdv_kernel.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBrT;
      if (q1 + kBrT <= seq_q) {
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * D);
        copy.full(sdo_addr + next, dO + q1 * D);
      } else {
        load_tile_async<T, D, kBrT, kThreads, true>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
        load_tile_async<T, D, kBrT, kThreads, true>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      }
      const int64_t row = q1 + (tid & (kBrT - 1));
      if (tid < kBrT)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBrT)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();

    const uint32_t cur = uint32_t(buf) * kTileBytes;
    const uint32_t q_a = q_a0 + cur, do_a = do_a0 + cur, do_x = do_x0 + cur, q_x = q_x0 + cur;
    const float* l_s = sL + buf * kBrT;
    const float* d_s = sD + buf * kBrT;
    const bool need_mask = (k0 + kBc > seq_k) || (p.causal && k0 + kBc - 1 > q0 + off);

    // S = Q K^T and dP = dO V^T, 32 x kKw per warp: element (mt, nt, e) is query row
    // 32 wm + 16 mt + g + 8 (e / 2), key column kKw wn + 8 nt + 2t + e % 2 of the tile.
    float s[2][kSn][4], dp[2][kSn][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.0f;
    rows_times_keys<T, D, kSn>(s, q_a, k_b, swz);    // S = Q K^T
    rows_times_keys<T, D, kSn>(dp, do_a, v_b, swz);  // dP = dO V^T

    // P = exp(scale S - L), masked where needed; dS = P (dP - D). L and D belong to the query,
    // the row. Both into shared memory, 16-bit, for the products that follow.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 32 * wm + 16 * mt + g + 8 * h;
        const float l2 = l_s[row], dd = d_s[row];
#pragma unroll
        for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = 2 * h + c;
            float pv = ex2_ftz(fmaf(s[mt][nt][e], p.scale_log2, -l2));
            if (need_mask) {
              const int64_t key = k0 + kKw * wn + 8 * nt + 2 * t + c;
              if (key >= seq_k || (p.causal && key > q0 + row + off)) pv = 0.0f;
            }
            s[mt][nt][e] = pv;
            dp[mt][nt][e] = pv * (dp[mt][nt][e] - dd);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int o = (16 * mt + 8 * h) * kLdP + 8 * nt;
          *reinterpret_cast<uint32_t*>(p_st + o) =
              fa::mma::pack2<T>(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(ds_st + o) =
              fa::mma::pack2<T>(dp[mt][nt][2 * h], dp[mt][nt][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // P and dS complete

    // dV += P^T dO and dK += dS^T Q: 32 keys (two m16 tiles) x kHalf columns per warp; k runs
    // over the tile's queries, 16 at a time.
    keys_times_cols<T, D, kBrT, kHalf>(dv, p_at, do_x, swz);  // dV += P^T dO
    keys_times_cols<T, D, kBrT, kHalf>(dk, ds_at, q_x, swz);  // dK += dS^T Q

    // dQaccum_i += dS K_j: 32 queries x kQuarter columns per warp, k over the kBc keys.
    if (q0 + 32 * wq < seq_q) {  // else every row of this warp lies past seq_q
      float acc[2][kQuarter / 8][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kQuarter / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      keys_times_cols<T, D, kBc, kQuarter, false>(acc, ds_a, k_x, swz);  // dQ_i = dS K_j
      // Element (mt, nt, e): query row 32 wq + 16 mt + g + 8 (e / 2), column kQuarter wc + 8 nt
      // + 2t + e % 2; the two columns of a thread are adjacent, one float2 atomic (add_dq).
      const int64_t row0 = q0 + 32 * wq + g;
      float* const dst0 = dQacc + row0 * D + kQuarter * wc + 2 * t;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 16 * mt + 8 * h >= seq_q) continue;
#pragma unroll
          for (int nt = 0; nt < kQuarter / 8; ++nt)
            add_dq(dst0 + (16 * mt + 8 * h) * D + 8 * nt, acc[mt][nt][2 * h],
                   acc[mt][nt][2 * h + 1]);
        }
    }

    if (has_next) {  // L, D of the next tile into the other buffer
      if (tid < kBrT)
        sL[(buf ^ 1) * kBrT + tid] = next_ld;
      else if (tid < 2 * kBrT)
        sD[(buf ^ 1) * kBrT + tid - kBrT] = next_ld;
    }
  }
  fa::mma::cp_async_wait<0>();

  // Keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    store_rows<T, D, kHalf>(dK, dk[mt], k0 + 32 * wk + 16 * mt, kHalf * wd, seq_k, p.scale, lane);
    store_rows<T, D, kHalf>(dV, dv[mt], k0 + 32 * wk + 16 * mt, kHalf * wd, seq_k, 1.0f, lane);
  }
}

// ---- dQ = dQaccum * scale ------------------------------------------------------------------
// n4 = elements / 4 (every D here is a multiple of 16); 16-byte loads, 8-byte stores.
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
// The dK/dV kernel of a head dim and its shared memory: warp_tiles_kernel at D 64 and 128,
// dkdv_kernel at D 32 and 96 (rows that are not whole 128-byte groups: no swizzle).
template <class T, int D>
constexpr auto kernel_for() {
  if constexpr (D == 64 || D == 128)
    return warp_tiles_kernel<T, D>;
  else
    return dkdv_kernel<T, D>;
}
template <int D>
constexpr int smem_bytes() {
  return D == 64 || D == 128 ? warp_tiles_smem_bytes<D>() : dkdv_smem_bytes<D>();
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

  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  FA_REQUIRE(n_kt * s.bh() <= INT32_MAX, "batch * heads * key tiles must fit in gridDim.x");

  if (n_kt > 0 && s.bh() > 0) {
    constexpr int kSmem = smem_bytes<D>();
    const auto kernel = kernel_for<T, D>();
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    kernel<<<static_cast<unsigned>(n_kt * s.bh()), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace).
  const int64_t n4 = s.q_numel() / 4;
  if (n4 > 0) {
    constexpr int kConvThreads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(n4, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        a.workspace, static_cast<T*>(a.dq), n4, p.scale);
    FA_CHECK_LAUNCH();
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <int D>
void run_head_dim(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  // 171 KiB per block at D = 128 and 178 KiB at D = 64: an H100 (227 KiB) has it, an A100
  // (163 KiB) or sm_86/89 (99 KiB) not. Refuse before anything runs, rather than fail in
  // cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    "06/v5_warp_tiles: head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr, "06/v5_warp_tiles needs the fp32 workspace (dQ accumulator)");

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream).
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  if (a.dtype == fa::DType::BF16)
    launch<__nv_bfloat16, D>(a, stream);
  else
    launch<__half, D>(a, stream);
}

// Head dim 256 is not instantiated (the header says why); 06/v3_atomic_dq serves it.
void attention_bwd_v5(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    "06/v5_warp_tiles takes bf16 and fp16 only");
  switch (s.head_dim) {  // every D here is a multiple of 16, which the mma loops need
    case 32:
      return run_head_dim<32>(a, stream);
    case 64:
      return run_head_dim<64>(a, stream);
    case 96:
      return run_head_dim<96>(a, stream);
    case 128:
      return run_head_dim<128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true,
                        "06/v5_warp_tiles is instantiated for head_dim 32, 64, 96 and 128 only "
                        "(06/v3_atomic_dq has 256)");
  }
}

}  // namespace

FA_REGISTER(
    AttentionBwdKernel,
    {"06/v5_warp_tiles",
     attention_bwd_v5,
     "v4 with FA2's warp tiles at D 64 and 128: P and dS through shared memory, two barriers "
     "per Q tile, 128-query tiles at D 64",
     {fa::DType::BF16, fa::DType::F16},
     {32, 64, 96, 128},
     80,
     false});
