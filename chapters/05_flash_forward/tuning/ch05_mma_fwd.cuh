// ch05_mma_fwd.cuh: the pieces of the tuning step 05/t03_fused_scale_warp_skip that are
// v2_mma.cu's, line for line: the tile sizes, the shared-memory layout, the kernel parameters,
// loading Q fragments, S = Q K^T, O = alpha O + P V, writing the O tile. The flag kernel of t04 to
// t11 (ch05_mtiles_kernel.cuh) reuses Params, ex2_approx, q_lane_ptr and store_o_tile. The ideas
// of t03 (the softmax, the masks, the loop skip) stay in its kernel; read v2_mma.cu first: its
// header explains the map of the kernel, the padding, the fragment ownership and the register
// reuse of P that these functions implement. Device code, plus one host helper (the shared-memory
// limit).
//
// Tiles per head dim (Tiles<D> below)
//   D <= 128: Br = 128 (8 warps x 16 rows), Bc = 64, Q fragments in registers for the whole
//   kernel (v2_mma.cu's header has the register count).
//   D = 256: Br = 64 (4 warps x 16 rows), Bc = 32, Q read from shared memory at every k16 slice.
//   Why: per thread the O accumulator is 16 x 256 fp32 / 32 lanes = 128 registers by itself. Q
//   fragments kept in registers would add 16 x 256 x 2 B / 32 / 4 B = 64 more, and S at Bc = 64
//   another 32: 224 before a single address or loop variable, at the 255 limit (spills). With Q
//   in shared memory (one ldmatrix.x4 per k16 slice, 4 live registers) and Bc = 32 (S = 16 x 32
//   fp32 = 16 registers; P packs into 8 of them, reused in place) the live set is about
//   128 + 16 + 8 (Q, K fragments) + the softmax state and addresses, well under 255.
//   Shared memory, padded rows of 256 + 8 elements (528 B): sQ 64 rows = 33 KiB, K and V double
//   buffered 4 x 32 rows = 66 KiB, in all 99 KiB = 101376 B, exactly the opt-in limit of sm_86 and
//   sm_89 (99 KiB), so D = 256 runs on every GPU from sm_80 on; on an H100 (227 KiB) two blocks
//   fit per SM, and __launch_bounds__(128, 2) caps registers at 255 (2 x 128 x 256 = the SM's
//   65536). Br = 128 would double sQ (132 KiB: too big for sm_86/89, one block per H100 SM) and
//   Bc = 64 would double the K/V buffers (165 KiB): the same 8 warps per H100 SM or fewer, and
//   GPUs refused. The price of Br = 64: each K/V tile is reused by 64 query rows instead of 128
//   (twice the K/V reads, mostly from L2); of Q in shared memory: one more ldmatrix per 2 (K)
//   per k16 slice of S.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention_tiles.cuh"
#include "check.h"
#include "gpu.h"
#include "mma.cuh"

namespace fa::fwd_mma {

constexpr int kRowsPerWarp = 16;  // one m16 tile per warp

// The tiles of head dim D (the header says how they were chosen).
template <int D>
struct Tiles {
  static constexpr bool kWide = D > 128;  // D = 256: fewer rows, fewer keys, Q not in registers
  static constexpr int kWarps = kWide ? 4 : 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block: 128, or 64 (D = 256)
  static constexpr int kBc = kWide ? 32 : 64;        // keys per K/V tile
  static constexpr int kSTiles = kBc / 8;            // n8 tiles of S: 8, or 4 (D = 256)
  static constexpr bool kQInRegs = !kWide;           // Q fragments live in registers
  // Register arrays of Q fragments: one A fragment per k16 slice, or a single unused one.
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // Blocks per SM asked of __launch_bounds__: 2 caps registers at 128 for 256 threads (D <= 64)
  // and at 255 for 128 threads (D = 256); D = 96, 128 need up to 255 with 256 threads: 1.
  static constexpr int kMinBlocksPerSm = (D <= 64 || kWide) ? 2 : 1;
  static_assert(kBc % 16 == 0, "P V takes the keys 16 at a time");
};

template <int D>
struct SmemLayout {
  static constexpr int kPitch = tiles::kPitch<D>;  // elements between consecutive rows
  static constexpr int kQElems = Tiles<D>::kBr * kPitch;
  static constexpr int kKVElems = Tiles<D>::kBc * kPitch;     // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
};
static_assert(SmemLayout<256>::kBytes == 99 * 1024, "D = 256 is sized for sm_86/89's 99 KiB");

// The dynamic shared memory one block may opt in to on the current device (gpu.h). Host code.
using fa::smem_optin_bytes;

// The single address function for shared tiles: cp.async writes and ldmatrix reads both use it.
template <int D, class T>
__device__ __forceinline__ T* tile_row(T* tile, int row) {
  return tiles::padded_row<D>(tile, row);
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
};

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ROWS rows of a [seq, D] tensor from row0 into a padded shared tile, by the whole block
// (common/device/attention_tiles.cuh; rows past seq are zero-filled).
template <int D, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int tid) {
  tiles::load_tile_async<D, ROWS, Tiles<D>::kThreads>(tile, gmem, row0, seq, tid);
}

// This lane's ldmatrix.x4 address for the A fragment of k16 slice 0 of this warp's 16 Q rows
// (slice kk is kk * 16 elements further along). Lane l addresses row l % 8 of matrix l / 8; the
// four 8x8 matrices are
//   m0 = rows 0-7, cols 0-7   -> a[0]      m1 = rows 8-15, cols 0-7  -> a[1]
//   m2 = rows 0-7, cols 8-15  -> a[2]      m3 = rows 8-15, cols 8-15 -> a[3]
// (cols relative to the slice), exactly the A fragment order of mma.cuh.
// kPitch: elements between rows (t07's swizzled tiles: D; the address is then the unswizzled one,
// from which tiles::LaneAddr makes the swizzled reads, ch05_mma_fwd_mtiles.cuh).
template <int D, int kPitch = tiles::kPitch<D>, class T>
__device__ __forceinline__ const T* q_lane_ptr(const T* sQ, int warp, int lane) {
  const int row = warp * kRowsPerWarp + (lane % 8) + 8 * ((lane / 8) & 1);
  const int col = 8 * (lane / 16);
  return sQ + row * kPitch + col;
}

// Q fragments of this warp's 16 rows, one A fragment per k16 slice, kept for the whole kernel
// (D <= 128 only: at D = 256 they would take 64 registers, see the header).
template <int D, class T>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q_frag)[Tiles<D>::kQRegSlices][4],
                                                 const T* sQ, int warp, int lane) {
  static_assert(Tiles<D>::kQInRegs, "Q stays in shared memory at this head dim");
  const T* q_lane = q_lane_ptr<D>(sQ, warp, lane);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma::ldmatrix_x4(q_frag[kk], q_lane + kk * 16);
}

// S += Q K_j^T for one k16 slice kk of the head dim, qa = the A fragment of that slice.
template <class T, int D>
__device__ __forceinline__ void add_s_slice(float (&s)[Tiles<D>::kSTiles][4],
                                            const uint32_t (&qa)[4], const T* sKb, int kk,
                                            int k_ld_row, int k_ld_col) {
#pragma unroll
  for (int np = 0; np < Tiles<D>::kSTiles / 2; ++np) {
    uint32_t kb[4];
    mma::ldmatrix_x4(kb, tile_row<D>(sKb, np * 16 + k_ld_row) + kk * 16 + k_ld_col);
    const uint32_t b_lo[2] = {kb[0], kb[1]};
    const uint32_t b_hi[2] = {kb[2], kb[3]};
    mma::mma_16816<T>(s[2 * np], qa, b_lo);
    mma::mma_16816<T>(s[2 * np + 1], qa, b_hi);
  }
}

// S = Q K_j^T: 16 x Bc per warp, fp32 accumulators. Q comes from q_frag (registers) where
// Tiles<D>::kQInRegs, else from shared memory at q_lane (q_lane_ptr), one ldmatrix.x4 per k16
// slice; the other argument is then unused. k_ld_row, k_ld_col: this lane's ldmatrix offsets into
// the K tile (see the kernel).
template <class T, int D>
__device__ __forceinline__ void compute_s(float (&s)[Tiles<D>::kSTiles][4],
                                          const uint32_t (&q_frag)[Tiles<D>::kQRegSlices][4],
                                          const T* q_lane, const T* sKb, int k_ld_row,
                                          int k_ld_col) {
#pragma unroll
  for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    if constexpr (Tiles<D>::kQInRegs) {
      add_s_slice<T, D>(s, q_frag[kk], sKb, kk, k_ld_row, k_ld_col);
    } else {
      uint32_t qa[4];
      mma::ldmatrix_x4(qa, q_lane + kk * 16);
      add_s_slice<T, D>(s, qa, sKb, kk, k_ld_row, k_ld_col);
    }
  }
}

// The row max of S over the quad's 4 threads, starting from m (rows g and g + 8).
template <int D>
__device__ __forceinline__ void row_max(float (&m_new)[2], const float (&s)[Tiles<D>::kSTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt) {
    m_new[0] = fmaxf(m_new[0], fmaxf(s[nt][0], s[nt][1]));
    m_new[1] = fmaxf(m_new[1], fmaxf(s[nt][2], s[nt][3]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the 4 threads of a quad hold the whole row
    m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
    m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
  }
}

// O = alpha * O + P V_j, P (in s, already exponentiated) straight from registers.
// v_ld_row, v_ld_col: this lane's ldmatrix .trans offsets into the V tile (see the kernel).
template <class T, int D>
__device__ __forceinline__ void rescale_o_add_pv(float (&o_acc)[D / 8][4],
                                                 const float (&s)[Tiles<D>::kSTiles][4],
                                                 const float (&alpha)[2], const T* sVb,
                                                 int v_ld_row, int v_ld_col) {
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    o_acc[dn][0] *= alpha[0];
    o_acc[dn][1] *= alpha[0];
    o_acc[dn][2] *= alpha[1];
    o_acc[dn][3] *= alpha[1];
  }
#pragma unroll
  for (int kk = 0; kk < Tiles<D>::kBc / 16; ++kk) {
    // Two S accumulator tiles (2kk, 2kk+1) are one A fragment: see "Register reuse of P" (v2_mma.cu).
    const uint32_t p_frag[4] = {mma::pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                                mma::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                mma::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                mma::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      mma::ldmatrix_x4_trans(vb, tile_row<D>(sVb, kk * 16 + v_ld_row) + dp * 16 + v_ld_col);
      const uint32_t b_lo[2] = {vb[0], vb[1]};
      const uint32_t b_hi[2] = {vb[2], vb[3]};
      mma::mma_16816<T>(o_acc[2 * dp], p_frag, b_lo);
      mma::mma_16816<T>(o_acc[2 * dp + 1], p_frag, b_hi);
    }
  }
}

// Write this warp's 16 rows of O = o_acc * inv_l (16-bit) to global memory, rows past seq_q not
// at all. O is staged in the warp's own 16 rows of sQ: only this warp ever read them (its Q
// fragments, once before the loop or, at D = 256, at every tile), and no cp.async targets sQ any
// more, so a warp-level sync is enough. Each thread writes 4 bytes at (row g or g+8, col
// 8dn + 2t): with the padded pitch these 32 writes fall in 32 different banks. Then each lane copies 16-byte chunks of whole rows to global memory.
// kSwizzled (t07): sQ holds swizzled rows of D elements; the O rows go there the same way (chunk
// dn of row g at dn ^ g: again 32 different banks), and are read back through the same map.
template <class T, int D, bool kSwizzled = false>
__device__ __forceinline__ void store_o_tile(T* O, const float (&o_acc)[D / 8][4],
                                             const float (&inv_l)[2], T* sQ, int warp, int lane,
                                             int64_t warp_row0, int64_t seq_q) {
  const int g = lane / 4, t = lane % 4;
  // Lanes of a warp may drift apart (independent thread scheduling): make sure every lane's
  // ldmatrix reads of these rows are done before any lane overwrites them (racecheck caught this).
  __syncwarp();
  T* const sO = kSwizzled ? sQ + warp * kRowsPerWarp * D : tile_row<D>(sQ, warp * kRowsPerWarp);
  // Chunk ch (8 elements) of row r of the warp's 16 rows (their first row is a multiple of 8).
  const auto chunk = [sO](int r, int ch) {
    if constexpr (kSwizzled)
      return sO + tiles::swizzled_offset<D>(r, ch);
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
  static_assert((kRowsPerWarp * kChunks) % 32 == 0, "O rows must split evenly over the warp");
#pragma unroll
  for (int i = 0; i < kRowsPerWarp * kChunks / 32; ++i) {
    const int c = lane + 32 * i;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = warp_row0 + r;
    if (grow < seq_q)
      *reinterpret_cast<uint4*>(O + grow * D + ch * 8) =
          *reinterpret_cast<const uint4*>(chunk(r, ch));
  }
}

}  // namespace fa::fwd_mma
