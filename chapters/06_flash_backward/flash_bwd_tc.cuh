// flash_bwd_tc.cuh: the shared-memory tile loader, the fragment loaders, the exponential, L in
// log2 form and the write-out of a 16-row accumulator: what the tensor-core backward kernels
// (06/v2_mma to 06/v9) are built from. Device code only.
//
// Shared-memory tiles are the padded tiles of common/attention_tiles.cuh (row-major
// [rows][D + kPad] in the 16-bit dtype, the layout chapter 05's tensor-core forward uses): the
// padding of 8 elements (16 bytes) makes every ldmatrix 8x8 matrix free of bank conflicts, with or
// without .trans, and keeps every 16-byte cp.async destination aligned.
//
// The fragment layouts are those of common/mma.cuh (g = lane / 4, t = lane % 4). Each loader
// below is one ldmatrix.x4; lane l gives the row address of matrix i = l / 8, row r = l % 8.
#pragma once
#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"
#include "mma.cuh"

namespace fa::bwd_tc {

using fa::tiles::kPad;  // elements of padding per shared-memory row (16 bytes)

// Copy rows [row0, row0 + ROWS) of a [seq, D] row-major matrix `g` into the padded tile `s`,
// 16 bytes per cp.async. Rows at or past `seq` are zero-filled (nothing is read for them). The
// same copies as fa::tiles::load_tile_async, in the strided loop these kernels were tuned with
// (attention_tiles.cuh says why there are two). kSwizzled (06/v10): into a swizzled tile of D
// elements per row instead (fa::tiles::swizzled_offset).
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
      fa::mma::cp_async_16(s + fa::tiles::swizzled_offset<D>(r, cc), src, valid);
    else
      fa::mma::cp_async_16(s + r * kLd + cc * 8, src, valid);
  }
}

// A fragment of the 16x16 block A[m0.., k0..] of a row-major tile (A = the tile itself).
// Matrices: 0 = rows 0-7 / cols 0-7 -> a[0], 1 = rows 8-15 / cols 0-7 -> a[1],
//           2 = rows 0-7 / cols 8-15 -> a[2], 3 = rows 8-15 / cols 8-15 -> a[3].
template <int LD, class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* s, int m0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4(a, s + (m0 + r + (i & 1) * 8) * LD + k0 + (i >> 1) * 8);
}

// B fragments of two adjacent n-tiles (n0..n0+7 and n0+8..n0+15, k0..k0+15) when B = X^T, i.e.
// B[k][n] = X[n][k] with X the row-major tile (rows are n). Used for S = Q K^T (X = K) and its
// relatives: the "col-major B" of mma.sync is exactly a row-major X, so no transpose is needed.
// b[0], b[1] -> n-tile n0;  b[2], b[3] -> n-tile n0 + 8.
template <int LD, class T>
__device__ __forceinline__ void load_b_xt(uint32_t (&b)[4], const T* s, int n0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4(b, s + (n0 + r + (i >> 1) * 8) * LD + k0 + (i & 1) * 8);
}

// B fragments of two adjacent n-tiles when B = X, i.e. B[k][n] = X[k][n] with X the row-major
// tile (rows are k). mma.sync wants pairs along k, which are a column of X: ldmatrix .trans
// hands thread (g, t) the elements X[2t][g], X[2t+1][g] of each 8x8 matrix. Used for dV += P^T dO
// (X = dO), dK += dS^T Q (X = Q), dQ += dS K (X = K).
// b[0], b[1] -> n-tile n0;  b[2], b[3] -> n-tile n0 + 8.
template <int LD, class T>
__device__ __forceinline__ void load_b_x(uint32_t (&b)[4], const T* s, int k0, int n0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4_trans(b, s + (k0 + r + (i & 1) * 8) * LD + n0 + (i >> 1) * 8);
}

// The C fragments of two adjacent n-tiles (16 columns) of a 16 x N accumulator, rounded to 16
// bits, are exactly the A fragment of the 16x16 block with those columns as k:
//   a[0] = C[g][2t..]   (tile j, c[0..1])    a[1] = C[g+8][2t..]   (tile j, c[2..3])
//   a[2] = C[g][2t+8..] (tile j+1, c[0..1])  a[3] = C[g+8][2t+8..] (tile j+1, c[2..3])
// This is why P and dS never go through shared memory.
template <class T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4]) {
  a[0] = fa::mma::pack2<T>(c0[0], c0[1]);
  a[1] = fa::mma::pack2<T>(c0[2], c0[3]);
  a[2] = fa::mma::pack2<T>(c1[0], c1[1]);
  a[3] = fa::mma::pack2<T>(c1[2], c1[3]);
}

template <class T>
__device__ __forceinline__ void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]};
  const uint32_t b1[2] = {b[2], b[3]};
  fa::mma::mma_16816<T>(d0, a, b0);
  fa::mma::mma_16816<T>(d1, a, b1);
}

// A fragment of the 16x16 block A[m0.., k0..] when A = X^T, i.e. A[m][k] = X[k][m] with X the
// row-major tile (rows are k). ldmatrix .trans hands thread (g, t) X[2t][g], X[2t+1][g] of each
// 8x8 matrix, which is A[g][2t], A[g][2t+1]. Matrices: 0 = k 0-7 / m 0-7 -> a[0],
// 1 = k 0-7 / m 8-15 -> a[1], 2 = k 8-15 / m 0-7 -> a[2], 3 = k 8-15 / m 8-15 -> a[3].
// Used for dQ += dS K with dS^T in shared memory (06/v3_atomic_dq: X = dS^T, rows are keys).
template <int LD, class T>
__device__ __forceinline__ void load_a_xt(uint32_t (&a)[4], const T* s, int m0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4_trans(a, s + (k0 + r + (i >> 1) * 8) * LD + m0 + (i & 1) * 8);
}

// Store an A fragment (as acc_to_a makes it) as the 16x16 block [m0.., k0..] of a row-major tile:
// the inverse of load_a. Four 32-bit stores per thread; in a padded tile (LD = 8 mod 16 elements)
// the 32 lanes of each store hit 32 different banks.
template <int LD, class T>
__device__ __forceinline__ void store_a(T* s, const uint32_t (&a)[4], int m0, int k0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  T* p = s + (m0 + g) * LD + k0 + 2 * t;
  *reinterpret_cast<uint32_t*>(p) = a[0];
  *reinterpret_cast<uint32_t*>(p + 8 * LD) = a[1];
  *reinterpret_cast<uint32_t*>(p + 8) = a[2];
  *reinterpret_cast<uint32_t*>(p + 8 * LD + 8) = a[3];
}

// 2^x by the MUFU unit alone (ex2.approx.ftz.f32: results below 2^-126 flush to 0). exp2f
// without --use_fast_math wraps the same instruction in a guard for results in the denormal range
// (a compare and two predicated multiplies: four instructions instead of one); a probability that
// small changes no sum here. Used by 06/v6 on: chapter 05's forward kernels do the same
// (ch05_mma_fwd.cuh, ex2_approx). exp2(-inf) is +0, which the masking relies on.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// L in the form the loops want: L * log2(e), or +inf for a row that does not exist or sees no
// key (L = -inf), which makes every P of that row exp2(finite - inf) = 0.
__device__ __forceinline__ float load_l2(const float* lse, int64_t row, int64_t seq_q) {
  constexpr float kLog2e = 1.4426950408889634f;
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

}  // namespace fa::bwd_tc
