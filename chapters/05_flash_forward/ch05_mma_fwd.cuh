// ch05_mma_fwd.cuh: what the two tensor-core forward kernels, 05/v2_mma and
// 05/v3_fused_scale_warp_skip, share: the tile sizes, the shared-memory layout, the kernel
// parameters and the pieces of device code that are the same in both (loading Q fragments,
// S = Q K^T, O = alpha O + P V, writing the O tile). The ideas that tell them apart (the softmax
// in v3, the masks, the loop skip) stay in the kernels; read v2_mma.cu first: its header explains
// the map of the kernel, the padding, the fragment ownership and the register reuse of P that
// these functions implement. Device code only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention_tiles.cuh"
#include "mma.cuh"

namespace fa::fwd_mma {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 16;            // one m16 tile per warp
constexpr int kBr = kWarps * kRowsPerWarp;  // 128 query rows per block
constexpr int kBc = 64;                     // keys per K/V tile
constexpr int kSTiles = kBc / 8;            // n8 tiles of S (8)

template <int D>
struct SmemLayout {
  static constexpr int kPitch = tiles::kPitch<D>;  // elements between consecutive rows
  static constexpr int kQElems = kBr * kPitch;
  static constexpr int kKVElems = kBc * kPitch;               // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
};

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
// (common/attention_tiles.cuh; rows past seq are zero-filled).
template <int D, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int tid) {
  tiles::load_tile_async<D, ROWS, kThreads>(tile, gmem, row0, seq, tid);
}

template <int D>
constexpr int min_blocks_per_sm() {
  return D <= 64 ? 2 : 1;
}

// Q fragments of this warp's 16 rows, one A fragment per k16 slice, kept for the whole kernel.
// ldmatrix.x4, lane l addresses row l % 8 of matrix l / 8; the four 8x8 matrices are
//   m0 = rows 0-7, cols 0-7   -> a[0]      m1 = rows 8-15, cols 0-7  -> a[1]
//   m2 = rows 0-7, cols 8-15  -> a[2]      m3 = rows 8-15, cols 8-15 -> a[3]
// (cols relative to the slice), exactly the A fragment order of mma.cuh.
template <int D, class T>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q_frag)[D / 16][4], const T* sQ,
                                                 int warp, int lane) {
  const int row = warp * kRowsPerWarp + (lane % 8) + 8 * ((lane / 8) & 1);
  const int col = 8 * (lane / 16);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    mma::ldmatrix_x4(q_frag[kk], tile_row<D>(sQ, row) + kk * 16 + col);
}

// S = Q K_j^T: 16 x 64 per warp, fp32 accumulators. k_ld_row, k_ld_col: this lane's ldmatrix
// offsets into the K tile (see the kernel).
template <class T, int D>
__device__ __forceinline__ void compute_s(float (&s)[kSTiles][4],
                                          const uint32_t (&q_frag)[D / 16][4], const T* sKb,
                                          int k_ld_row, int k_ld_col) {
#pragma unroll
  for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < kSTiles / 2; ++np) {
      uint32_t kb[4];
      mma::ldmatrix_x4(kb, tile_row<D>(sKb, np * 16 + k_ld_row) + kk * 16 + k_ld_col);
      const uint32_t b_lo[2] = {kb[0], kb[1]};
      const uint32_t b_hi[2] = {kb[2], kb[3]};
      mma::mma_16816<T>(s[2 * np], q_frag[kk], b_lo);
      mma::mma_16816<T>(s[2 * np + 1], q_frag[kk], b_hi);
    }
  }
}

// The row max of S over the quad's 4 threads, starting from m (rows g and g + 8).
__device__ __forceinline__ void row_max(float (&m_new)[2], const float (&s)[kSTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < kSTiles; ++nt) {
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
                                                 const float (&s)[kSTiles][4],
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
  for (int kk = 0; kk < kBc / 16; ++kk) {
    // Two S accumulator tiles (2kk, 2kk+1) are one A fragment: see "Register reuse of P" (v2).
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
// fragments), and no cp.async targets sQ any more, so a warp-level sync is enough. Each thread
// writes 4 bytes at (row g or g+8, col 8dn + 2t): with the padded pitch these 32 writes fall in
// 32 different banks. Then each lane copies 16-byte chunks of whole rows to global memory.
template <class T, int D>
__device__ __forceinline__ void store_o_tile(T* O, const float (&o_acc)[D / 8][4],
                                             const float (&inv_l)[2], T* sQ, int warp, int lane,
                                             int64_t warp_row0, int64_t seq_q) {
  const int g = lane / 4, t = lane % 4;
  // Lanes of a warp may drift apart (independent thread scheduling): make sure every lane's
  // ldmatrix reads of these rows are done before any lane overwrites them (racecheck caught this).
  __syncwarp();
  T* sO = tile_row<D>(sQ, warp * kRowsPerWarp);
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    *reinterpret_cast<uint32_t*>(tile_row<D>(sO, g) + dn * 8 + 2 * t) =
        mma::pack2<T>(o_acc[dn][0] * inv_l[0], o_acc[dn][1] * inv_l[0]);
    *reinterpret_cast<uint32_t*>(tile_row<D>(sO, g + 8) + dn * 8 + 2 * t) =
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
          *reinterpret_cast<const uint4*>(tile_row<D>(sO, r) + ch * 8);
  }
}

}  // namespace fa::fwd_mma
