// mma_fwd_t17.cuh: chapter 05's forward at every head dim up to 256 with grouped K/V heads,
// 05/t17_grouped_any_head_dim (chapter 05's tuning appendix: 05/v4 taking rows of any length d,
// computed at the next instance 32, 64, 96, 128 or 256), as pieces a later rung calls instead of
// copying: its tiles (four warps of one or two m16 tiles; Bc 64 or 32), its shared-memory layout
// (swizzled rows at D 64, 128, 256, padded at 32 and 96) and a lane's ldmatrix addresses into it,
// the tile loader for rows of d (16-byte cp.async, or element by element where d is no multiple
// of 8), S = Q K^T and O = alpha O + P V on a warp's m16 tiles, and the epilogue of O (rows of d)
// and L.
//
// Read them in 05/t17 first (chapters/05_flash_forward/tuning/t17_grouped_any_head_dim.cu), whose
// ladder runs 05/v4 -> t14 (rows of d) -> t15 (element by element) -> t17 (grouped heads): it
// carries its own copy, so that it reads top to bottom. Chapter 09's rungs for the head dims no
// other kernel takes (09/v3_varlen_any_head_dim, v4_window_any_head_dim,
// paged_v3_prefill_any_head_dim) are each t17 plus one idea (packed offsets, the window's tiles,
// the block table) and call these pieces; what each keeps in its file is its parameters, its K/V
// copies (load_kv_tile), its kernel and its launch. Each compiled to the machine code it had when
// it carried a copy (the cubins' kernel sections compared for sm_80 and sm_90, CUDA 13.0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"  // tiles::copy_chunk_by_elements (05/t15)
#include "mma.cuh"

namespace fa::ch05::t17 {

constexpr int kM16Rows = 16;  // rows of one m16 tile (mma.sync m16n8k16)

// The tiles of head dim D: 4 warps of kM m16 tiles each (05/v4's header says why).
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
  // O is rescaled only where some row's max moved, where that pays: Bc = 32 (05/v4's header says
  // why).
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
// boundary; else (D 32, 96) rows padded by kPad elements (05/v2's header says why).
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

}  // namespace fa::ch05::t17
