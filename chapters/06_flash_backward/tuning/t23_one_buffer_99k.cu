// t23_one_buffer_99k.cu: 06/v3_atomic_dq with one Q buffer and one dO buffer instead of two each
// (06/t18's idea, on v3), so that the backward at D 128 fits a block of a GPU with 99 KiB of shared
// memory (sm_86, sm_89, sm_120: the RTX 30, 40 and 50 series). bf16 / fp16 in, mma.sync m16n8k16,
// fp32 accumulate. Not bitwise deterministic (dQ by atomics, as v3).
//
// Why. On such a GPU no backward ran at D 128: v5 needs 171 KiB a block, v4 155, v3 112, v2 more,
// and the dispatch refused with the shared-memory reason. A student with a desktop GPU could run
// the forward at D 128 and not train with it. FlashAttention-2 makes the same trade on small
// GPUs: it keeps Q single-buffered where shared memory is short ("A100, we don't do double
// buffering to save smem", csrc/flash_attn/src/flash_bwd_launch_template.h, run_mha_bwd_hdim256).
//
// What changed against v3 (one idea: the second buffers of Q and dO are gone):
//   * Shared memory: K_j, V_j, Q_i, dO_i (17 KiB each at D 128, rows of D + 8), L and D (two
//     buffers of 256 bytes each, as v3), dS^T (9 KiB): 78 KiB at D 128, where v3 takes 112.
//   * The copies of Q_{i+1} and dO_{i+1} can no longer start at the top of tile i, under all of
//     its products: they would overwrite the tile being read. They start after the barrier that
//     completes dS^T, which every warp reaches past its last read of Q_i (dK += dS^T Q) and dO_i
//     (dV += P^T dO, dP^T = V dO^T), and run under dQ = dS K and its atomics. The top of the loop
//     waits for them (cp.async.wait_group 0) before its barrier, which now also keeps the next
//     tile's dS^T stores behind this tile's dQ reads: v3's last barrier of the loop is gone.
// Everything else is v3's: the 64 x 64 tile of 4 warps, the products, the mask, dQ by atomics.
// On a GPU whose blocks have v3's 112 KiB the dispatch keeps v3 (or v4, v5), whose copies run
// under the whole tile; this step is for the head dim they cannot run there.
//
// Instantiated at D 128 only: at D 32, 64 and 96 v3 or v4 already fit 99 KiB, and at D 256 this
// layout needs 140 KiB (t18 serves D 256 where 147 KiB fit).
//
// Speed (H200, 2026-12-05; tuning/README.md): D 128 192.1-201.1 TFLOP/s at N 4096 and 8192,
// causal 1.00-1.01x v3, full 0.96x.
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
#include "mma.cuh"
#include "registry.h"

namespace {

constexpr const char* kName = "06/t23_one_buffer_99k";  // the registered name
constexpr int kD128 = 128;                              // the one head dim of this step

using fa::causal_last_key;
using fa::ceil_div;

// ---- shared-memory tiles and fragments ------------------------------------------------------
// A tile holds ROWS rows of a row-major [seq, D] matrix (Q, K, V or dO) in the 16-bit dtype,
// stored as [ROWS][D + kPad]: the 8 elements (16 bytes) of padding per row shift each row by 16
// bytes modulo 128, so the eight row addresses of one ldmatrix 8x8 matrix fall into eight
// different 16-byte bank groups (no bank conflicts, with or without .trans), and every 16-byte
// cp.async destination stays aligned.
//
// The fragment layouts are those of common/mma.cuh (g = lane / 4, t = lane % 4). Each loader
// below is one ldmatrix.x4; lane l gives the row address of matrix i = l / 8, row r = l % 8.
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

// Copy rows [row0, row0 + ROWS) of a [seq, D] row-major matrix `g` into the padded tile `s`,
// 16 bytes per cp.async. Rows at or past `seq` are zero-filled (nothing is read for them).
template <class T, int D, int ROWS, int THREADS>
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

// Two MMAs sharing one A fragment: d0 += a b[0..1], d1 += a b[2..3] (two adjacent n-tiles).
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
// Used for dQ += dS K with dS^T in shared memory (X = dS^T, rows are keys).
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

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 64;     // query rows per tile
constexpr int kBc = 64;     // key rows per tile
constexpr int kChunk = 32;  // columns of S^T held in registers at a time
static_assert(kBr == kWarps * 16 && kBc == kWarps * 16, "one warp per 16 rows");
static_assert(kBr % kChunk == 0 && kBc % kChunk == 0 && kChunk % 16 == 0, "chunking");

// Columns of the fp32 accumulators (dK, dV and the partial dQ) that one block owns: all D up to
// 128; at D = 256 half of them, kColSplits = 2 blocks per tile (the header says why).
template <int D>
constexpr int kAccCols = D > 128 ? D / 2 : D;
template <int D>
constexpr int kColSplits = D / kAccCols<D>;
static_assert(kAccCols<256> == 128 && kColSplits<256> == 2 && kColSplits<128> == 1, "splits");
// Columns of the partial dQ held in registers at a time (16 x kDqCols per warp) before their
// atomics: 32 divides every kAccCols (32, 64, 96, 128).
constexpr int kDqCols = 32;

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

template <int D>
constexpr int smem_bytes_tiles() {
  return 4 * 64 * (D + kPad) * 2;  // K, V, Q, dO: one buffer each
}
constexpr int kLdS = kBr + kPad;  // row of the dS^T tile: kBr queries + padding
template <int D>
constexpr int dkdv_smem_bytes() {
  return smem_bytes_tiles<D>() + 4 * kBr * int(sizeof(float)) + kBc * kLdS * 2;
}

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) dkdv_kernel(Params p) {
  constexpr int kLd = D + kPad;
  constexpr int kTile = 64 * kLd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kTile;
  T* sQ = sV + kTile;                                 // one buffer
  T* sdO = sQ + kTile;                                // one buffer
  float* sL = reinterpret_cast<float*>(sdO + kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                           // two buffers of kBr: D
  T* sdS = reinterpret_cast<T*>(sD + 2 * kBr);        // dS^T: kBc keys x kBr queries

  constexpr int kDC = kAccCols<D>;  // columns of dK, dV (and dQ) this block accumulates
  static_assert(kDC % kDqCols == 0, "dQ chunks");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  // blockIdx.x = (bh * n_tiles + key tile) * kColSplits + column half: the two halves of one
  // K/V tile are neighbours in the grid, so their second reads of K, V, Q, dO come from L2.
  const int64_t tile_bh = int64_t(blockIdx.x) / kColSplits<D>;
  const int col0 = int(int64_t(blockIdx.x) % kColSplits<D>) * kDC;  // first owned column
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
  load_tile_async<T, D, kBc, kThreads>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBc, kThreads>(sV, V, k0, seq_k, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBr;
    load_tile_async<T, D, kBr, kThreads>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBr, kThreads>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBr - 1));
    if (tid < kBr)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBr)
      sD[tid - kBr] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  float dv[kDC / 8][4], dk[kDC / 8][4];  // columns col0 .. col0 + kDC - 1 only
#pragma unroll
  for (int nt = 0; nt < kDC / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[nt][e] = dk[nt][e] = 0.0f;

  const int kr0 = warp * 16;  // this warp's first key row in the tile
  const int qr0 = warp * 16;  // and its first query row, for dQ

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBr;
    const bool has_next = qt + 1 < n_qt;

    // Q_i, dO_i (copied at the prologue, or under the previous tile's dQ) have landed; once every
    // warp is here, every warp is also done with the previous tile's dS^T and L, D.
    fa::mma::cp_async_wait<0>();
    __syncthreads();

    // L and D of the next tile go through registers, stored after the math so their latency
    // hides behind it (its Q and dO come after dK += dS^T Q, below).
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t row = q0 + kBr + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }

    const T* q_s = sQ;
    const T* do_s = sdO;
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
        load_a<kLd>(a, sK, kr0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          load_b_xt<kLd>(b, q_s, c0 + np * 16, ks * 16, lane);
          mma_pair<T>(s[2 * np], s[2 * np + 1], a, b);
        }
      }

      // P^T = exp(scale S^T - L), masked. Element (nt, e): key row kr0 + g + 8*(e/2), query
      // column c0 + 8*nt + 2t + e%2.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = c0 + nt * 8 + 2 * t + (e & 1);
          float pv = exp2f(fmaf(s[nt][e], p.scale_log2, -l_s[col]));
          if (need_mask) {
            const int64_t key = k0 + kr0 + g + 8 * (e >> 1);
            const int64_t query = q0 + col;
            if (key >= seq_k || (p.causal && key > query + off)) pv = 0.0f;
          }
          s[nt][e] = pv;
        }
      }

      // dV_j += P^T dO: k runs over the chunk's queries, 16 at a time; only this block's columns.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < kDC / 16; ++np) {
          uint32_t b[4];
          load_b_x<kLd>(b, do_s, c0 + kk * 16, col0 + np * 16, lane);
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
        load_a<kLd>(a, sV, kr0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          load_b_xt<kLd>(b, do_s, c0 + np * 16, ks * 16, lane);
          mma_pair<T>(dp[2 * np], dp[2 * np + 1], a, b);
        }
      }

      // dS^T = P^T * (dP^T - D): D belongs to the query, the column.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dp[nt][e] = s[nt][e] * (dp[nt][e] - d_s[c0 + nt * 8 + 2 * t + (e & 1)]);

          // dK_j += dS^T Q, only this block's columns; the same 16-bit dS^T into sdS for dQ.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, dp[2 * kk], dp[2 * kk + 1]);
        store_a<kLdS>(sdS, a, kr0, c0 + kk * 16, lane);
#pragma unroll
        for (int np = 0; np < kDC / 16; ++np) {
          uint32_t b[4];
          load_b_x<kLd>(b, q_s, c0 + kk * 16, col0 + np * 16, lane);
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
        }
      }
    }

    // dQaccum_i += dS K_j: warp w takes query rows qr0.. of the tile, A = dS = sdS^T (all kBc
    // keys, written by the four warps), B = K_j; kDqCols of this block's columns at a time.
    __syncthreads();  // sdS complete, and every warp past its last read of Q_i and dO_i
    // The next tile's Q and dO into the one buffer, under dQ and its atomics.
    if (has_next) {
      load_tile_async<T, D, kBr, kThreads>(sQ, Q, q0 + kBr, seq_q, tid);
      load_tile_async<T, D, kBr, kThreads>(sdO, dO, q0 + kBr, seq_q, tid);
      fa::mma::cp_async_commit();
    }
    if (q0 + qr0 < seq_q) {  // else every row of this warp lies past seq_q
#pragma unroll
      for (int dc = 0; dc < kDC / kDqCols; ++dc) {
        const int n0 = col0 + dc * kDqCols;  // first column of the chunk
        float acc[kDqCols / 8][4];
#pragma unroll
        for (int nt = 0; nt < kDqCols / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kBc / 16; ++ks) {
          uint32_t a[4];
          load_a_xt<kLdS>(a, sdS, qr0, ks * 16, lane);
#pragma unroll
          for (int np = 0; np < kDqCols / 16; ++np) {
            uint32_t b[4];
            load_b_x<kLd>(b, sK, ks * 16, n0 + np * 16, lane);
            mma_pair<T>(acc[2 * np], acc[2 * np + 1], a, b);
          }
        }
        // Element (nt, e): query row qr0 + g + 8*(e/2), column n0 + 8*nt + 2t + e%2.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = q0 + qr0 + g + 8 * h;
          if (row >= seq_q) continue;
          float* dst = dQacc + row * D + n0 + 2 * t;
#pragma unroll
          for (int nt = 0; nt < kDqCols / 8; ++nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            // sm_90 adds a float2 in one atomic (the two columns are adjacent and 8-byte
            // aligned: 2t is even): half the atomic instructions and L2 sector updates of two
            // scalar ones (Nsight Compute, H100: 1.61 G reduction sectors with scalar atomics).
            atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                      make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]));
#else
            atomicAdd(dst + 8 * nt, acc[nt][2 * h]);
            atomicAdd(dst + 8 * nt + 1, acc[nt][2 * h + 1]);
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
  }
  fa::mma::cp_async_wait<0>();

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
  store_rows<T, D, kDC>(dK, dk, k0 + kr0, col0, seq_k, p.scale, lane);
  store_rows<T, D, kDC>(dV, dv, k0 + kr0, col0, seq_k, 1.0f, lane);
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
  constexpr int64_t kSplits = kColSplits<D>;
  FA_REQUIRE(n_kt * s.bh() * kSplits <= INT32_MAX,
             "batch * heads * tiles * column splits must fit in gridDim.x");

  if (n_kt > 0 && s.bh() > 0) {
    constexpr int kSmem = dkdv_smem_bytes<D>();
    FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    dkdv_kernel<T, D>
        <<<static_cast<unsigned>(n_kt * s.bh() * kSplits), kThreads, kSmem, stream>>>(p);
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
  // 78 KiB per block at D 128: every GPU from sm_80 has it. Refuse before anything runs, rather
  // than fail in cudaFuncSetAttribute.
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

void attention_bwd_t23(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.head_dim != kD128, std::string(kName) +
                                             " is instantiated for head_dim 128 only (the header "
                                             "says why); not " +
                                             std::to_string(s.head_dim));
  run_head_dim<kD128>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {kName,
             attention_bwd_t23,
             "v3 with one Q and one dO buffer (t18's idea on v3): 78 KiB at D 128, for GPUs with "
             "99 KiB a block",
             {fa::DType::BF16, fa::DType::F16},
             {128},
             80,
             false});
FA_REGISTER_SMEM(kName, [](int d) {
  return fa::smem_at<128>(d, [](auto) { return dkdv_smem_bytes<128>(); });
});
