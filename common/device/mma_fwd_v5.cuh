// mma_fwd_v5.cuh: chapter 05's final forward, 05/v5_fewer_instructions, as pieces a later rung
// calls instead of copying: its tiles and swizzled shared-memory layout, the Q tile's copy, S = Q K^T
// and O = alpha O + P V on a warp's m16 tiles with software-pipelined fragment loads, and the
// epilogue of O and L. At head dims 64 and 128 (the swizzled ones: 05/v5's D 32 pads its rows).
//
// Read them in 05/v5 first (chapters/05_flash_forward/v5_fewer_instructions.cu): it carries its own
// copy, so that the rung reads top to bottom. Chapter 09's mma.sync forwards (09/v1_varlen,
// v2_window, paged_v2_prefill) are each 05/v5 plus one idea (packed offsets, the window's tiles, the
// block table), and call these pieces; what each keeps in its file is its parameters, its K/V copy
// plan, its kernel and its launch. Two things here are not 05/v5's: store_o_tile, the O epilogue
// through shared memory for GPUs without stmatrix (chapter 09's rungs run from sm_80; 05/v5 is an
// sm_90 rung), and the row bounds of the epilogue, which never write rows at or past seq_q (in a
// packed batch those are the next sequence's). The rungs compile to the machine code they had
// when each carried a copy (the cubins' kernel sections compared, CUDA 13.0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention_tiles.cuh"  // tiles::LaneAddr, a lane's ldmatrix addresses (05/v4)
#include "mma.cuh"

namespace fa::ch05::v5 {

constexpr int kM16Rows = 16;  // rows of one m16 tile (mma.sync m16n8k16)

// The tiles of head dim D (64 or 128): 4 warps of 2 m16 tiles each.
template <int D>
struct Tiles {
  static_assert(D == 64 || D == 128, "the pieces take head dims 64 and 128 (05/v5 pads D 32)");
  static constexpr int kM = 2;  // m16 tiles per warp
  static constexpr int kRowsPerWarp = kM16Rows * kM;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;       // two blocks per SM at up to 255 registers
  static constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block: 128
  static constexpr int kBc = 64;                     // keys per K/V tile
  static constexpr int kSTiles = kBc / 8;            // n8 tiles of S per m16 tile
  static constexpr bool kQInRegs = kM * D <= 128;    // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // O is rescaled only where some row's max moved, at D 128: with Bc = 64 ptxas spills 100 bytes
  // without the skip (05/v5's header).
  static constexpr bool kSkipRescale = D >= 96;
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

// Shared memory: the Q tile, then K and V double-buffered, 16-bit elements, swizzled rows of D
// elements (a row holds whole 128-byte groups at D 64 and 128), every tile at a 128-byte boundary.
template <int D>
struct SmemLayout {
  static constexpr int kPitch = D;  // elements between consecutive rows
  static constexpr int kQElems = Tiles<D>::kBr * kPitch;
  static constexpr int kKVElems = Tiles<D>::kBc * kPitch;     // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
  static_assert((kQElems * 2) % 128 == 0 && (kKVElems * 2) % 128 == 0,
                "swizzled tiles start at 128-byte boundaries");
  using Lane = tiles::LaneAddr<true>;
};

// Row `row` of a shared tile: the ldmatrix lane addresses (unswizzled: LaneAddr makes the lane's
// read addresses from it) and the epilogue start from it.
template <int D, class T>
__device__ __forceinline__ T* tile_row(T* tile, int row) {
  return tile + row * SmemLayout<D>::kPitch;
}

// Element offset of 16-byte chunk ch (8 elements) of row r in a shared tile, where the copies
// write and the 16-byte reads of the epilogue read.
template <int D>
__device__ __forceinline__ int chunk_at(int r, int ch) {
  return swizzled_offset<D>(r, ch);
}

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Copy rows [row0, row0 + ROWS) of the row-major [seq, D] matrix `gmem` into the shared tile
// `tile`, one 16-byte cp.async per chunk, the block's threads splitting the ROWS * D / 8 chunks
// evenly. Rows at or past `seq` are zero-filled: cp.async with src-size 0 reads nothing (an
// in-range pointer is still passed: the matrix's first row). The copies are only issued; the
// caller commits and waits (mma::cp_async_commit / cp_async_wait) before reading the tile.
template <int D, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int tid) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  constexpr int kThreads = Tiles<D>::kThreads;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % kThreads == 0, "the tile must split evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    const bool valid = grow < seq;
    const T* src = gmem + (valid ? grow * D + ch * 8 : 0);
    mma::cp_async_16(tile + swizzled_offset<D>(r, ch), src, valid);
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
  uint32_t p_frag[kSlices][Tl::kM][4];  // two S tiles of one m16 tile are one A fragment (05/v2)
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
// row is row0), rows at or past seq_q not at all (in a packed batch, the next sequence's). O is staged in the
// same 16 rows of sQ: only this warp ever read them (its Q fragments), and no cp.async targets sQ
// any more, so a warp-level sync is enough. Each thread writes 4 bytes at (row g or g+8, col
// 8dn + 2t): in a swizzled tile these 32 writes fall in 32 different banks (chunk dn of row g at
// dn ^ g). Then each lane copies 16-byte chunks of whole rows to global memory, read back through
// the same layout. (The epilogue of builds for GPUs without stmatrix.)
template <class T, int D>
__device__ __forceinline__ void store_o_tile(T* O, const float (&o_acc)[D / 8][4],
                                             const float (&inv_l)[2], T* sQ, int slab, int lane,
                                             int64_t row0, int64_t seq_q) {
  const int g = lane / 4, t = lane % 4;
  // Lanes of a warp may drift apart (independent thread scheduling): make sure every lane's
  // ldmatrix reads of these rows are done before any lane overwrites them (racecheck caught this).
  __syncwarp();
  T* const sO = sQ + slab * kM16Rows * SmemLayout<D>::kPitch;
  // Chunk ch (8 elements) of row r of those 16 rows (their first row is a multiple of 8).
  const auto chunk = [sO](int r, int ch) { return sO + swizzled_offset<D>(r, ch); };
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
    if (grow < seq_q)
      *reinterpret_cast<uint4*>(O + grow * D + ch * 8) =
          *reinterpret_cast<const uint4*>(chunk(r, ch));
  }
}

// The warp's kM x 16 rows of O = o_acc * inv_l (16-bit) to global memory at O_warp (its first
// row), rows_left = seq_q - that row (the rows at or past seq_q, in a packed batch the next sequence's, are not
// written), with no address arithmetic per element.
// * Into shared memory: two n8 accumulator tiles, packed to 16 bits, are an A fragment (the layout
//   P V relies on), so stmatrix (the inverse of ldmatrix) stores them at the lane addresses Q was
//   read through: q_addr.at(...) is a base plus a constant, 8 stores of 16 columns per m16 tile.
//   The rows are this warp's own slabs of sQ (only it ever read them, and no copy targets sQ any
//   more), so __syncwarp is the only barrier.
// * Into global memory: the warp's rows are contiguous there, so its chunk c (16 bytes, row-major
//   over its rows) lies at O_warp + 8 c, and lane l copies chunks l + 32 i: a base plus a
//   constant again. Chunk c belongs to row c / (D / 8), so c < rows_left * D / 8 is exactly "its
//   row is below seq_q" (rows_left <= 0: nothing). All shared loads are issued before the first
//   global store.
template <class T, int D>
__device__ __forceinline__ void store_o_m(T* O_warp, int64_t rows_left,
                                          const float (&o_acc)[Tiles<D>::kM][D / 8][4],
                                          const float (&inv_l)[Tiles<D>::kM][2],
                                          const typename SmemLayout<D>::Lane& q_addr,
                                          const T* sQ_warp, int lane) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  constexpr int kChunks = D / 8;                             // 16-byte chunks per row
  constexpr int kPerLane = Tl::kRowsPerWarp * kChunks / 32;  // chunks each lane copies
  static_assert(Tl::kRowsPerWarp * kChunks % 32 == 0, "the warp's chunks split evenly");
  __syncwarp();  // every lane's ldmatrix reads of these rows (Q) are done
#pragma unroll
  for (int m = 0; m < Tl::kM; ++m)
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      const uint32_t a[4] = {
          mma::pack2<T>(o_acc[m][2 * j][0] * inv_l[m][0], o_acc[m][2 * j][1] * inv_l[m][0]),
          mma::pack2<T>(o_acc[m][2 * j][2] * inv_l[m][1], o_acc[m][2 * j][3] * inv_l[m][1]),
          mma::pack2<T>(o_acc[m][2 * j + 1][0] * inv_l[m][0], o_acc[m][2 * j + 1][1] * inv_l[m][0]),
          mma::pack2<T>(o_acc[m][2 * j + 1][2] * inv_l[m][1],
                        o_acc[m][2 * j + 1][3] * inv_l[m][1])};
      mma::stmatrix_x4(q_addr.at(16 * kRowBytes * m, j), a);
    }
  __syncwarp();
  uint4 chunk[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i, r = c / kChunks, ch = c % kChunks;
    chunk[i] = *reinterpret_cast<const uint4*>(sQ_warp + chunk_at<D>(r, ch));
  }
  // __stwb is a plain (write-back) 16-byte store. Assigning chunk[i] through a uint4 pointer
  // compiled to four 32-bit stores (nvcc 13.0: the values live in registers by then), four times
  // the L2 sectors in Nsight Compute.
  const int64_t valid = rows_left * kChunks;  // chunks of rows before seq_q
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < valid)
      __stwb(reinterpret_cast<uint4*>(O_warp + 8 * (lane + 32 * i)), chunk[i]);
}

// L = ln(sum_j exp(s_j)) of rows row0 + g and row0 + g + 8 of one m16 tile (l, m: this lane's
// row sums, already reduced over the quad, and raw-score maxima), written by the quad's first lane
// (t = 0); rows at or past seq_q (in a packed batch, the next sequence's) are not.
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

// S = -S, for a negative softmax scale: c * s = |c| * (-s), so the running max stays a max.
template <int D>
__device__ __forceinline__ void negate_s_m(float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m)
#pragma unroll
    for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = -s[m][nt][e];
}

}  // namespace fa::ch05::v5
