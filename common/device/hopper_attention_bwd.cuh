// hopper_attention_bwd.cuh: what the Hopper backward kernels (chapter 07's sm90a/bwd_*.cu and
// tuning/bwd_*.cu, chapter 09's sm90a/hopper_bwd_*.cu) share beyond the forward's pieces
// (hopper_attention.cuh: tile layout, K-major descriptors, pack_p, TMA maps):
//   * the MN-major descriptor of a tile of any height (dO and Q as B of dV += P^T dO and
//     dK += dS^T Q, K as B of dQ += dS K), the forward's desc_v with the row count as a parameter,
//     optionally starting at a later 64-column strip (the column half of D = 256);
//   * L and D of a query row in the form the loops use;
//   * the store of a 64 x N accumulator (dK, dV, dQ, or a column half of them at D = 256) into a
//     row-major matrix of any row length, with predicated rows;
//   * host side: which shapes TMA can take, the fallback, and the D = rowsum(dO o O) preprocess
//     (chapter 06's kernel, compiled into this module from its header: the chapter 07 program
//     does not link chapter 06's objects, so it cannot call chapter 06's copy).
// Chapter 07 introduces them (notes/07_flash_hopper.md, 07/bwd_v1_tma_wgmma). Included by the
// sm_90a backward files only.
#pragma once
#include "hopper_attention.cuh"
#include "delta_preprocess.cuh"

namespace fa::ch07 {

constexpr float kLog2e = 1.4426950408889634f;

// MN-major operand, a [ROWS x D] tile read along its rows (k = row, n = d): k16 step kk starts at
// row 16 kk, 2 atoms further; n crosses the 64-column strips, LBO = the strip size ROWS * 128;
// SBO = 1024 (the next 8 rows). desc_v<D> of hopper_attention.cuh is desc_mn_major<Tiles<D>::kBc>.
// col0 (a multiple of 64) starts n at column col0: strip col0 / 64 of the tile, which begins
// (col0 / 64) * ROWS * 128 bytes in, on an atom boundary since ROWS % 8 == 0; the strips after it
// follow at the same LBO. That is how a wgmma of N = 128 reads columns 128 .. 255 of a D = 256
// tile.
template <int ROWS>
__device__ __forceinline__ uint64_t desc_mn_major(const unsigned char* tile, int kk, int col0 = 0) {
  static_assert(ROWS % 8 == 0, "strips start on swizzle atoms");
  return hopper::smem_desc_sw128(tile + (col0 / kSwizzleCols) * ROWS * 128 + kk * 2 * kAtomBytes,
                                 ROWS * 128, kAtomBytes);
}

// L * log2(e), or +inf for a row that does not exist or sees no key (L = -inf): then
// P = exp2(s * scale * log2(e) - L2) = exp2(-inf) = 0 for every key, with no test in the loops,
// and the row contributes nothing to any gradient (never (-inf) - (-inf) = NaN).
__device__ __forceinline__ float load_l2(const float* lse, int64_t row, int64_t seq_q) {
  if (row >= seq_q) return INFINITY;
  const float l = lse[row];
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// Store a warpgroup's 64 x N fp32 accumulator times `mul` into rows row0 .. row0+63, columns
// 0 .. N-1 of a row-major matrix of T with LD elements per row (out points at the first column
// to write: a column half of a D = 256 gradient passes out + 128 and LD = 256); rows at or past
// seq are skipped. Thread t holds rows 16w + g and 16w + g + 8, columns 8j + 2q, +1 in
// acc[4j + 2h], acc[4j + 2h + 1] (hopper.cuh). T = float stores the fp32 values themselves (the
// parts of a split sum, bwd_v1's grouped heads).
template <class T, int N, int LD>
__device__ __forceinline__ void store_acc_rows(T* out, const float (&acc)[N / 2], int64_t row0,
                                               int64_t seq, float mul, int t) {
  static_assert(N <= LD, "the accumulator's columns lie within a row");
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 16 * w + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * LD + 2 * q;
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      if constexpr (std::is_same_v<T, float>)
        *reinterpret_cast<float2*>(dst + 8 * j) =
            make_float2(acc[4 * j + 2 * h] * mul, acc[4 * j + 2 * h + 1] * mul);
      else
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            mma::pack2<T>(acc[4 * j + 2 * h] * mul, acc[4 * j + 2 * h + 1] * mul);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = 0.0f;
}

// ---- Host side -----------------------------------------------------------------------------------
// Shapes the TMA kernels cannot take run this registered kernel through the registry (as the
// forward's fallback, hopper_attention.cuh): it takes head dims 32, 64, 96, 128 and 256, so every
// head dim of this kernel has a fallback.
constexpr const char* kBwdFallback = "06/v2_mma";

// TMA's rules for Q, K, V, dO (16-byte aligned bases; D * 2 bytes per row is a multiple of 16;
// sizes and coordinates in int32; no empty sequence), and 4-byte aligned gradients for the
// paired stores. seq_q = 0 (dK = dV = 0) and seq_k = 0 (dQ = 0) go to the fallback too.
inline bool tma_can_load(const AttentionBwdArgs& a) {
  const AttentionShape& s = a.shape;
  return aligned(a.q, 16) && aligned(a.k, 16) && aligned(a.v, 16) && aligned(a.dout, 16) &&
         aligned(a.dq, 4) && aligned(a.dk, 4) && aligned(a.dv, 4) && s.seq_q > 0 && s.seq_k > 0 &&
         s.seq_q < INT_MAX - 512 && s.seq_k < INT_MAX - 512 && s.bh() < INT_MAX;
}

inline void run_fallback(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionBwdKernel* k = find_entry<AttentionBwdKernel>(kBwdFallback);
  FA_REQUIRE(k != nullptr, std::string(kBwdFallback) + " is not linked in");
  k->run(a, stream);
}

}  // namespace fa::ch07
