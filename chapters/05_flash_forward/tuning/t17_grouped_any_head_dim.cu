// t17_grouped_any_head_dim.cu: 05/t15_any_head_dim with grouped K/V heads (grouped-query
// attention, GQA, and multi-query attention, MQA): heads_kv K/V heads serve the heads query heads,
// query head h reading K/V head h / (heads / heads_kv). One idea, t16's on t15: the K/V head of a
// block is its query head divided by the group, in the K and V pointers; no copy of K or V. A step
// of the tuning appendix for grouped heads at the head dims no grouped kernel takes: those that
// are no multiple of 8 (59, 111, ...), on every GPU.
//
// Why. t15 takes any head dim for one K/V head per query head; t16 takes grouped heads at the
// multiples of 8. A model with grouped heads and such a head dim had no forward: the caller would
// have to pad the head dim in a copy (t15's header) and repeat K and V over the group, group times
// the bytes.
//
// What changed vs t15 (the lines of t14 -> t16, on t15). A block's (batch, query head) is
// bh = b * heads + h, from its block index as before; Q, O and L stay at bh. K and V move to the
// block's K/V head,
//   bh_kv = b * heads_kv + h / group,   group = heads / heads_kv,
// two more kernel parameters (Params::heads, Params::group) and a few divisions per block. At
// heads_kv = heads (group 1) bh_kv = bh: t15's work.
//
// Speed (H200, 2026-12-05, tuning/README.md): 0.997-1.000x its MHA time per query head at H 32,
// H_kv 8/4/1, D 128, N 8192; the dispatch runs it for grouped heads at head dims off the step of 8.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "attention_tiles.cuh"
#include "registry.h"

namespace fa {
namespace {

constexpr const char* kName = "05/t17_grouped_any_head_dim";  // the registered name

constexpr int kM16Rows = 16;  // rows of one m16 tile (mma.sync m16n8k16)

// The tiles of head dim D: 4 warps of kM m16 tiles each (the header says why).
template <int D>
struct Tiles {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp
  static constexpr int kRowsPerWarp = kM16Rows * kM;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;       // two blocks per SM at up to 255 registers
  static constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block: 128, or 64 (D = 256)
  static constexpr int kBc = D <= 64 ? 64 : 32;      // keys per K/V tile: 32 from D = 96 on
  static constexpr int kSTiles = kBc / 8;            // n8 tiles of S per m16 tile
  static constexpr bool kQInRegs = kM * D <= 128;    // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // O is rescaled only where some row's max moved, where that pays: Bc = 32 (the header says why).
  static constexpr bool kSkipRescale = kBc <= 32;
  static_assert(kBc % 16 == 0, "P V takes the keys 16 at a time");
};

// The swizzled tile: rows of D elements with no padding, each row's 16-byte chunks permuted
// within their 128-byte group: logical chunk c of row r is stored at chunk c ^ (r % 8). Every row
// starts at a 128-byte boundary (so a warp's cp.async of whole rows fills whole lines), and the
// eight rows of an ldmatrix 8x8 matrix (same logical chunk, rows r .. r + 7) still land in eight
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
// bits 4-6 are c % 8, so plain ^ swizzle_xor(r) is where it is stored. Every row a lane reads in
// this kernel is lane % 8 modulo 8 (tiles of 16 rows, each lane at row lane % 8 of an 8-row
// matrix), so one XOR pattern serves all of its reads.
__device__ __forceinline__ uint32_t swizzle_xor(int row) {
  return uint32_t(row % kSwizzleRows) * 16;
}

// A lane's ldmatrix address into a tile, as 32-bit shared-memory addresses, for reads at (row
// offset, 16-element column step j): `rows` is a byte offset of whole rows (a multiple of 8 rows,
// so row % 8 stays the lane's), j the 16-column step (32 bytes). Padded tiles: one base, and every
// fragment is base + rows + 32 j, a compile-time offset that ptxas folds into the instruction.
// Swizzled tiles: XORing each read with swizzle_xor would cost an instruction per read (two: the
// add is no longer folded). But the XOR touches bits 4-6 only, and adding a multiple of 128 leaves
// those bits alone, so (plain + 32 j) ^ xor = ((plain + 32 (j % 4)) ^ xor) + 128 (j / 4): four
// bases, computed once, and each read is again a base plus a constant. (`rows` is a multiple of
// 128 bytes as well.)
template <bool kSwizzled>
struct LaneAddr {
  uint32_t base;
  __device__ __forceinline__ LaneAddr(uint32_t plain, uint32_t /*xor_bits*/) : base(plain) {}
  // The same lane in a tile `offset` bytes further (another buffer).
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

// Shared memory: the Q tile, then K and V double-buffered, 16-bit elements. Swizzled rows of D
// elements where a row holds whole 128-byte groups (D 64, 128, 256), every tile at a 128-byte
// boundary; else (D 32, 96) rows padded by kPad elements (v2's header says why).
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

template <int D>
struct SmemLayout {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr int kPitch = kSwizzle ? D : D + kPad;  // elements between consecutive rows
  static constexpr int kQElems = Tiles<D>::kBr * kPitch;
  static constexpr int kKVElems = Tiles<D>::kBc * kPitch;     // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
  static_assert(!kSwizzle || (kQElems * 2) % 128 == 0 && (kKVElems * 2) % 128 == 0,
                "swizzled tiles start at 128-byte boundaries");
  using Lane = LaneAddr<kSwizzle>;
};

// Row `row` of a shared tile: the cp.async writes, the ldmatrix lane addresses (unswizzled:
// LaneAddr makes the lane's read addresses from it) and the epilogue all start from it.
template <int D, class T>
__device__ __forceinline__ T* tile_row(T* tile, int row) {
  return tile + row * SmemLayout<D>::kPitch;
}

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t seq_q, seq_k;
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
  int d;             // t14: the real head dim, the length of a row in global memory (<= D)
  int64_t heads;     // t17: query heads
  int64_t group;     // t17: query heads per K/V head (heads / heads_kv)
};

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Copy rows [row0, row0 + ROWS) of the row-major [seq, d] matrix `gmem` into the shared tile
// `tile` (rows of D), one 16-byte cp.async per chunk, the block's threads splitting the
// ROWS * D / 8 chunks evenly. Rows at or past `seq` and chunks at or past column d are
// zero-filled: cp.async with src-size 0 reads nothing (an in-range pointer is still passed).
// t15: where d is no multiple of 8 the rows are not 16-byte aligned, and each chunk is copied
// element by element instead (copy_chunk_by_elements), zeros past d. The copies are only issued; the caller commits and waits
// (mma::cp_async_commit / cp_async_wait) before reading the tile.
template <int D, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int d, int tid) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  constexpr int kThreads = Tiles<D>::kThreads;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % kThreads == 0, "the tile must split evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    const bool valid = grow < seq && ch * 8 < d;
    const T* src = gmem + (valid ? grow * d + ch * 8 : 0);
    T* dst;
    if constexpr (SmemLayout<D>::kSwizzle)
      dst = tile + swizzled_offset<D>(r, ch);
    else
      dst = tile_row<D>(tile, r) + ch * 8;
    if (d % 8 == 0)
      mma::cp_async_16(dst, src, valid);
    else
      tiles::copy_chunk_by_elements(dst, valid ? src : nullptr, d - ch * 8);
  }
}

// K/V tile j into buffer buf.
template <class T, int D>
__device__ __forceinline__ void load_kv_tile(T* sK, T* sV, const T* K, const T* V, int j, int buf,
                                             int64_t seq_k, int d, int tid) {
  using Sm = SmemLayout<D>;
  constexpr int kBc = Tiles<D>::kBc;
  load_tile_async<D, kBc>(sK + buf * Sm::kKVElems, K, int64_t(j) * kBc, seq_k, d, tid);
  load_tile_async<D, kBc>(sV + buf * Sm::kKVElems, V, int64_t(j) * kBc, seq_k, d, tid);
}

// This lane's ldmatrix.x4 address for the A fragment of k16 slice 0 of the 16 Q rows of m16 tile
// `slab` of the block (slice kk is kk * 16 elements further along). Lane l addresses row l % 8 of
// matrix l / 8; the four 8x8 matrices are
//   m0 = rows 0-7, cols 0-7   -> a[0]      m1 = rows 8-15, cols 0-7  -> a[1]
//   m2 = rows 0-7, cols 8-15  -> a[2]      m3 = rows 8-15, cols 8-15 -> a[3]
// (cols relative to the slice), exactly the A fragment order of mma.cuh.
template <int D, class T>
__device__ __forceinline__ const T* q_lane_ptr(const T* sQ, int slab, int lane) {
  const int row = slab * kM16Rows + (lane % 8) + 8 * ((lane / 8) & 1);
  const int col = 8 * (lane / 16);
  return sQ + row * SmemLayout<D>::kPitch + col;
}

// S = 0 for the warp's kM m16 tiles (the accumulators of S = Q K_j^T).
template <int D>
__device__ __forceinline__ void zero_s_m(float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m)
#pragma unroll
    for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = 0.0f;
}

// S = Q K_j^T for the warp's kM m16 tiles. Each K fragment (ldmatrix.x4: two n8 tiles, one k16
// slice) is loaded once and used by every m16 tile. Q comes from q_frag where Tiles<D>::kQInRegs,
// else from shared memory at q (m16 tile m is 16 rows further per m); k: this lane's ldmatrix
// address in the K buffer. The fragment loads are software-pipelined: the Q and K fragments of
// k16 slice kk + 1 are loaded into a second set of registers before the MMAs of slice kk are
// issued, so that those MMAs never wait for a load issued just before them. The loop is unrolled
// in full (the two register sets are indexed by kk % 2 at compile time).
template <class T, int D>
__device__ __forceinline__ void compute_s_m(
    float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4],
    const uint32_t (&q_frag)[Tiles<D>::kM][Tiles<D>::kQRegSlices][4],
    const typename SmemLayout<D>::Lane& q, const typename SmemLayout<D>::Lane& k) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  constexpr int kSlices = D / 16;
  constexpr int kPairs = Tl::kSTiles / 2;
  uint32_t qa[2][Tl::kM][4], kb[2][kPairs][4];  // slice kk lives in set kk % 2
  auto load_slice = [&](int kk, int set) {
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      if constexpr (Tl::kQInRegs) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[set][m][r] = q_frag[m][kk][r];
      } else {
        mma::ldmatrix_x4(qa[set][m], q.at(kM16Rows * kRowBytes * m, kk));
      }
    }
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma::ldmatrix_x4(kb[set][np], k.at(16 * kRowBytes * np, kk));
  };
  zero_s_m<D>(s);
  load_slice(0, 0);
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk) {
    const int cur = kk % 2;
    if (kk + 1 < kSlices) load_slice(kk + 1, cur ^ 1);
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      const uint32_t b_lo[2] = {kb[cur][np][0], kb[cur][np][1]};
      const uint32_t b_hi[2] = {kb[cur][np][2], kb[cur][np][3]};
#pragma unroll
      for (int m = 0; m < Tl::kM; ++m) {
        mma::mma_16816<T>(s[m][2 * np], qa[cur][m], b_lo);
        mma::mma_16816<T>(s[m][2 * np + 1], qa[cur][m], b_hi);
      }
    }
  }
}

// O *= alpha for the m16 tiles m where rescale[m] (a tile is skipped when every alpha of it is
// exactly 1).
template <int D>
__device__ __forceinline__ void rescale_o_m(float (&o_acc)[Tiles<D>::kM][D / 8][4],
                                            const float (&alpha)[Tiles<D>::kM][2],
                                            const bool (&rescale)[Tiles<D>::kM]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m) {
    if (!rescale[m]) continue;  // warp-uniform: the kernel's vote
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o_acc[m][dn][0] *= alpha[m][0];
      o_acc[m][dn][1] *= alpha[m][0];
      o_acc[m][dn][2] *= alpha[m][1];
      o_acc[m][dn][3] *= alpha[m][1];
    }
  }
}

// O = alpha O + P V_j for the warp's kM m16 tiles; each V fragment is loaded once for all of them.
// The rescale of m16 tile m runs only where rescale[m]; v: this lane's ldmatrix .trans address in
// the V buffer. The V fragment loads are software-pipelined as in compute_s_m: the Bc / 16 x D / 16
// fragments of the tile are one sequence, and fragment i + 1 is loaded into a second set of
// registers before the MMAs of fragment i are issued. The P fragments of every k16 slice are
// packed first.
template <class T, int D>
__device__ __forceinline__ void rescale_o_add_pv_m(
    float (&o_acc)[Tiles<D>::kM][D / 8][4], const float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4],
    const float (&alpha)[Tiles<D>::kM][2], const bool (&rescale)[Tiles<D>::kM],
    const typename SmemLayout<D>::Lane& v) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  constexpr int kSlices = Tl::kBc / 16, kPairs = D / 16, kSteps = kSlices * kPairs;
  uint32_t vb[2][4];  // fragment i lives in set i % 2
  mma::ldmatrix_x4_trans(vb[0], v.at(0, 0));
  rescale_o_m<D>(o_acc, alpha, rescale);
  uint32_t p_frag[kSlices][Tl::kM][4];  // two S tiles of one m16 tile are one A fragment (v2)
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk)
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      p_frag[kk][m][0] = mma::pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
      p_frag[kk][m][1] = mma::pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
      p_frag[kk][m][2] = mma::pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
      p_frag[kk][m][3] = mma::pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
    }
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int kk = i / kPairs, dp = i % kPairs, cur = i % 2;
    if (i + 1 < kSteps)
      mma::ldmatrix_x4_trans(vb[cur ^ 1],
                             v.at(16 * kRowBytes * ((i + 1) / kPairs), (i + 1) % kPairs));
    const uint32_t b_lo[2] = {vb[cur][0], vb[cur][1]};
    const uint32_t b_hi[2] = {vb[cur][2], vb[cur][3]};
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      mma::mma_16816<T>(o_acc[m][2 * dp], p_frag[kk][m], b_lo);
      mma::mma_16816<T>(o_acc[m][2 * dp + 1], p_frag[kk][m], b_hi);
    }
  }
}

// Write the 16 rows of m16 tile `slab` of O = o_acc * inv_l (16-bit) to global memory (its first
// row is row0), rows past seq_q not at all. O is staged in the same 16 rows of sQ: only this warp
// ever read them (its Q fragments), and no cp.async targets sQ any more, so a warp-level sync is
// enough. Each thread writes 4 bytes at (row g or g+8, col 8dn + 2t): with the padded pitch these
// 32 writes fall in 32 different banks, and so they do in a swizzled tile (chunk dn of row g at
// dn ^ g). Then each lane copies 16-byte chunks of whole rows to global memory, read back through
// the same layout.
template <class T, int D>
__device__ __forceinline__ void store_o_tile(T* O, const float (&o_acc)[D / 8][4],
                                             const float (&inv_l)[2], T* sQ, int slab, int lane,
                                             int64_t row0, int64_t seq_q, int d) {
  const int g = lane / 4, t = lane % 4;
  // Lanes of a warp may drift apart (independent thread scheduling): make sure every lane's
  // ldmatrix reads of these rows are done before any lane overwrites them (racecheck caught this).
  __syncwarp();
  T* const sO = sQ + slab * kM16Rows * SmemLayout<D>::kPitch;
  // Chunk ch (8 elements) of row r of those 16 rows (their first row is a multiple of 8).
  const auto chunk = [sO](int r, int ch) {
    if constexpr (SmemLayout<D>::kSwizzle)
      return sO + swizzled_offset<D>(r, ch);
    else
      return tile_row<D>(sO, r) + ch * 8;
  };
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    *reinterpret_cast<uint32_t*>(chunk(g, dn) + 2 * t) =
        mma::pack2<T>(o_acc[dn][0] * inv_l[0], o_acc[dn][1] * inv_l[0]);
    *reinterpret_cast<uint32_t*>(chunk(g + 8, dn) + 2 * t) =
        mma::pack2<T>(o_acc[dn][2] * inv_l[1], o_acc[dn][3] * inv_l[1]);
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
  static_assert((kM16Rows * kChunks) % 32 == 0, "O rows must split evenly over the warp");
#pragma unroll
  for (int i = 0; i < kM16Rows * kChunks / 32; ++i) {
    const int c = lane + 32 * i;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    if (grow < seq_q && ch * 8 < d) {  // rows of d: the chunks past it are not stored
      if (d % 8 == 0) {
        *reinterpret_cast<uint4*>(O + grow * d + ch * 8) =
            *reinterpret_cast<const uint4*>(chunk(r, ch));
      } else {  // t15: a row not 16-byte aligned, element by element up to d
        const T* from = chunk(r, ch);
        T* to = O + grow * d + ch * 8;
        for (int e = 0; e < 8 && ch * 8 + e < d; ++e) to[e] = from[e];
      }
    }
  }
}

// L = ln(sum_j exp(s_j)) of rows row0 + g and row0 + g + 8 of one m16 tile (l, m: this lane's
// row sums, already reduced over the quad, and raw-score maxima), written by the quad's first lane
// (t = 0); rows past seq_q are not.
__device__ __forceinline__ void write_lse(float* Lse, const float (&l)[2], const float (&m)[2],
                                          float c, int64_t row0, int64_t seq_q, int g, int t) {
  if (t == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + g + 8 * h;
      if (row < seq_q)
        Lse[row] = l[h] > 0.0f ? (m[h] * c + log2f(l[h])) * 0.6931471805599453f : -INFINITY;
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) flash_fwd_v4_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemLayout<D>;
  constexpr int kM = Tiles<D>::kM;            // m16 tiles per warp
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S per m16 tile
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;

  // Swizzled tiles must start at 128-byte boundaries; so must the block's shared memory. Two arrays,
  // one per alignment: one name declared with both (D 32/96 padded and D 64/128/256 swizzled in
  // one translation unit) is one array with the first alignment (nvcc warning 1886), and the PTX
  // of the swizzled kernels would not ask for the 128-byte base they rely on.
  extern __shared__ __align__(16) unsigned char smem_padded[];
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sQ = reinterpret_cast<T*>(Sm::kSwizzle ? smem_swizzled : smem_padded);
  T* sK = sQ + Sm::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * Sm::kKVElems;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  // ---- Which (batch*head) and which Q tile: both on blockIdx.x (gridDim.y/z stop at 65535).
  // Q tiles of one head are consecutive blocks (K/V of that head stay hot in L2), last tile first
  // (under causal masking the last Q tiles have the most work; starting them first evens the tail).
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  const int d = p.d;  // rows of d elements in global memory
  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * d;
  // t17: the block's K/V head, h / group of its batch (b = bh / heads, h = bh % heads).
  const int64_t bh_kv = bh / p.heads * (p.heads / p.group) + bh % p.heads / p.group;
  const T* K = static_cast<const T*>(p.k) + bh_kv * seq_k * d;
  const T* V = static_cast<const T*>(p.v) + bh_kv * seq_k * d;

  // ---- How many K/V tiles this Q tile needs. Causal (bottom-right): query i sees keys
  // j <= causal_last_key(i) = i + seq_k - seq_q, so the last real row of the tile bounds the loop;
  // tiles entirely above the diagonal are never loaded.
  int64_t n_tiles = ceil_div(seq_k, kBc);
  if (p.causal) {
    const int64_t last_row = (q0 + kBr < seq_q ? q0 + kBr : seq_q) - 1;
    const int64_t last_key = causal_last_key(last_row, seq_q, seq_k);
    n_tiles = last_key < 0 ? 0 : (last_key / kBc + 1 < n_tiles ? last_key / kBc + 1 : n_tiles);
  }

  // This thread's rows are g and g + 8 of each of the warp's kM m16 tiles: rows warp_row0 + 16 m +
  // g + 8 h. Their last visible keys are recomputed where a tile needs a mask (kept in registers
  // across the loop they pushed D = 128 into spills).
  const int64_t warp_row0 = q0 + warp * Tiles<D>::kRowsPerWarp;
  // The smallest last key over the warp (its first row): a tile whose keys all lie at or below it
  // needs no mask for any row of the warp. The largest (its last row): a tile starting after it is
  // invisible to the whole warp, which then skips it.
  const int warp_last_key = int(p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1);
  const int warp_max_key = int(
      p.causal ? (causal_last_key(warp_row0 + Tiles<D>::kRowsPerWarp - 1, seq_q, seq_k) < seq_k - 1
                      ? causal_last_key(warp_row0 + Tiles<D>::kRowsPerWarp - 1, seq_q, seq_k)
                      : seq_k - 1)
               : seq_k - 1);

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, d, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) load_kv_tile<T, D>(sK, sV, K, V, 0, 0, seq_k, d, tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ. Fragments kept in
  // registers at D <= 64 only.
  constexpr int kRowBytes = Sm::kPitch * 2;
  // Every ldmatrix row of this lane is lane % 8 modulo 8: one XOR pattern for all of its reads
  // where the tiles are swizzled (LaneAddr; unused with padded rows).
  const uint32_t swz = swizzle_xor(lane);
  const T* q_lane = q_lane_ptr<D>(sQ, kM * warp, lane);  // m16 tile m: 16 m rows down
  const typename Sm::Lane q_addr(mma::smem_addr(q_lane), swz);
  uint32_t q_frag[kM][Tiles<D>::kQRegSlices][4];
  if constexpr (Tiles<D>::kQInRegs) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma::ldmatrix_x4(q_frag[m][kk], q_addr.at(kM16Rows * kRowBytes * m, kk));
  }

  float o_acc[kM][kOTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int dn = 0; dn < kOTiles; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[m][dn][e] = 0.0f;
  float m_run[kM][2], l_run[kM][2];  // running max in raw score units, per-thread partial sum
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[m][h] = kNegInf;
      l_run[m][h] = 0.0f;
    }

  // Per-lane row/column offsets of the ldmatrix addresses for K (v2's kernel explains the
  // mapping), as 32-bit shared addresses of buffer 0.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  const typename Sm::Lane k_addr0(mma::smem_addr(tile_row<D>(sK, k_ld_row) + k_ld_col), swz);
  constexpr uint32_t kKVBytes = Sm::kKVElems * 2;
  // V's lane mapping (.trans: row (lane % 8) + 8 ((lane / 8) & 1), column 8 (lane / 16) of a
  // 16 x 16 block) is Q's, so q_addr's bases reach V as well: V buffer b lies (Q tile + both K
  // buffers - this warp's Q offset + b * buffer) bytes further. (K's mapping differs: its own set
  // of bases stays.)
  const uint32_t v_from_q =
      uint32_t(Sm::kQElems * 2 + 2 * Sm::kKVElems * 2) - uint32_t(16 * kRowBytes * kM * warp);

  const int n_tiles32 = int(n_tiles);
  for (int j = 0; j < n_tiles32; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      // Tile j (the only group in flight) has landed for this thread; the barrier makes it
      // visible to all, and also guarantees every warp is done with tile j-1, whose buffer the
      // next cp.async overwrites.
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      load_kv_tile<T, D>(sK, sV, K, V, j + 1, buf ^ 1, seq_k, d, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    const typename Sm::Lane k_addr(k_addr0, buf * kKVBytes);
    compute_s_m<T, D>(s, q_frag, q_addr, k_addr);

    if (p.scale_log2 < 0.0f) {  // negative scale: c * s = |c| * (-s), so the max stays a max
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][nt][e] = -s[m][nt][e];
    }

    // ---- (2) Mask: keys past seq_k, and (causal) keys after a row's last visible key. Uniform
    // per warp, so only the tiles at the ragged end or on the diagonal pay for it.
    if (k0 + kBc - 1 > warp_last_key) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        int lim[2];  // last visible key of each row, relative to k0, clamped to [-1, kBc]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // In 32 bits (the launcher keeps lengths below 2^31 - 256): causal_last_key's
          // row + seq_k - seq_q, capped at the last key.
          const int row = int(warp_row0) + 16 * m + g + 8 * h;
          int lk = int(p.seq_k) - 1;
          if (p.causal) lk = min(lk, row + int(p.seq_k - p.seq_q));
          const int r = lk - k0;
          lim[h] = r < -1 ? -1 : (r > kBc ? kBc : r);
        }
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = nt * 8 + 2 * t + (e & 1);
            if (col > lim[e >> 1]) s[m][nt][e] = kNegInf;
          }
      }
    }

    // ---- (3) Online softmax on rows g (h = 0) and g+8 (h = 1) of each m16 tile, the scale
    // c = |scale| * log2(e) inside the exponent's FMA. c is read from the kernel parameters
    // (constant memory) where it is used: kept in a register across the loop it pushed D = 64 past
    // its 128-register budget (at the time two blocks of 256 threads).
    const float c = fabsf(p.scale_log2);
    float alpha[kM][2];
    bool rescale[kM];  // whether m16 tile m's O is multiplied by alpha (a warp vote)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float m_new[2] = {m_run[m][0], m_run[m][1]};
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        m_new[0] = fmaxf(m_new[0], fmaxf(s[m][nt][0], s[m][nt][1]));
        m_new[1] = fmaxf(m_new[1], fmaxf(s[m][nt][2], s[m][nt][3]));
      }
      float base[2];  // c * m_new, in log2 units
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the 4 threads of a quad hold the whole row
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
        base[h] = m_new[h] == kNegInf ? 0.0f : m_new[h] * c;  // no key seen yet: no -inf - -inf
        // An unmoved max gives alpha = 1 exactly; else 0 when m_run = -inf.
        alpha[m][h] = m_new[h] == m_run[m][h] ? 1.0f : ex2_approx(fmaf(m_run[m][h], c, -base[h]));
        m_run[m][h] = m_new[h];
        l_run[m][h] *= alpha[m][h];
      }
      rescale[m] = !Tiles<D>::kSkipRescale ||
                   __any_sync(0xffffffffu, alpha[m][0] != 1.0f || alpha[m][1] != 1.0f);
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        s[m][nt][0] = ex2_approx(fmaf(s[m][nt][0], c, -base[0]));
        s[m][nt][1] = ex2_approx(fmaf(s[m][nt][1], c, -base[0]));
        s[m][nt][2] = ex2_approx(fmaf(s[m][nt][2], c, -base[1]));
        s[m][nt][3] = ex2_approx(fmaf(s[m][nt][3], c, -base[1]));
        l_run[m][0] += s[m][nt][0] + s[m][nt][1];
        l_run[m][1] += s[m][nt][2] + s[m][nt][3];
      }
    }

    // ---- (4) O = alpha * O + P V_j.
    const typename Sm::Lane v_addr(q_addr, v_from_q + buf * kKVBytes);
    rescale_o_add_pv_m<T, D>(o_acc, s, alpha, rescale, v_addr);
  }

  // ---- Epilogue, per m16 tile: finish the row sums (each thread summed only its own columns),
  // O through the tile's own 16 rows of sQ, then L. The O and L pointers are formed only here.
  T* O = static_cast<T*>(p.o) + bh * seq_q * d;
  float* Lse = p.lse + bh * seq_q;
  const float c = fabsf(p.scale_log2);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float inv_l[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 1);
      l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 2);
      inv_l[h] = l_run[m][h] > 0.0f ? 1.0f / l_run[m][h] : 0.0f;  // no visible key: O = 0
    }
    store_o_tile<T, D>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane, warp_row0 + 16 * m, seq_q, d);
    write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x the largest Br.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    std::string(kName) + ": sequence lengths must stay below 2^31 - 256");
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = s.softmax_scale() * 1.4426950408889634f;  // log2(e)
  p.d = int(s.head_dim);
  p.heads = s.heads;
  p.group = s.group();

  constexpr size_t smem = SmemLayout<D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_v4_kernel<T, D>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; also ask for the largest
  // shared-memory carveout so that two blocks fit per SM.
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), Tiles<D>::kThreads, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

// t15: every head dim up to 256, at the next instance.
template <class T>
void dispatch_head_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(d <= 0 || d > 256, std::string(kName) +
                                           ": takes every head dim from 1 to 256 (rounded up "
                                           "to 32, 64, 96, 128 or 256); not " +
                                           std::to_string(d));
  if (d <= 32) return launch<T, 32>(a, stream);
  if (d <= 64) return launch<T, 64>(a, stream);
  if (d <= 96) return launch<T, 96>(a, stream);
  if (d <= 128) return launch<T, 128>(a, stream);
  return launch<T, 256>(a, stream);
}

void attention_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(),
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<__nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<__half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::kName,
             fa::attention_fwd,
             "t15 with grouped K/V heads (GQA, MQA) at every head dim up to 256: query head h "
             "reads K/V head h / group in place, no copy",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/false,
             /*rounds_head_dim=*/true,
             /*head_dim_step=*/1});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128, 256>(
      d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
