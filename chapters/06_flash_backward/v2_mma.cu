// v2_mma.cu: 06/v2_mma, the backward of v1 on tensor cores: mma.sync m16n8k16, bf16 / fp16 in,
// fp32 accumulate. Still two kernels and no atomics: every output element is written by exactly
// one thread, so the gradients are bitwise deterministic.
//
// What it adds to v1, and why. v1 runs the five products of the backward (S, dP, dV, dK, dQ) as
// scalar fp32 FMAs, about 13 TFLOP/s on an H100 whose tensor cores do 990. Here they run on
// tensor cores: 64 x 64 tiles arrive in shared memory by cp.async (double-buffered, so the next
// tile's copy overlaps this tile's math), fragments are loaded from there by ldmatrix, and the
// transposed products P^T dO and dS^T Q never transpose anything in memory (see "Fragment
// ownership"). The algorithm is v1's: P is recomputed from L, dS = P * (dP - D), D precomputed.
//
// The map (three launches on one stream):
//   1. launch_delta_preprocess: D = rowsum(dO * O)                    (ch06_preprocess.h)
//   2. dkdv_kernel: one block per (K/V tile of Bc = 64 keys, batch*head). K_j, V_j stay in
//      shared memory; the block walks the Q tiles that can see K_j (causal: it starts at the
//      first one, skipping Q tiles that are entirely masked) and for each Q_i:
//        S^T = K_j Q_i^T,  P^T = exp(scale S^T - L_i),  dV_j += P^T dO_i,
//        dP^T = V_j dO_i^T,  dS^T = P^T * (dP^T - D_i),  dK_j += dS^T Q_i
//      then writes dK_j * scale and dV_j.
//   3. dq_kernel: one block per (Q tile of Br = 64 queries, batch*head). Q_i, dO_i, L_i, D_i
//      stay put; it walks the visible K/V tiles:
//        S = Q_i K_j^T, P = exp(scale S - L_i), dP = dO_i V_j^T, dS = P * (dP - D_i),
//        dQ_i += dS K_j
//      then writes dQ_i * scale. (S and dP are computed twice, once per kernel: 7 matmuls
//      instead of 5. That is the price of determinism without an fp32 dQ accumulator in
//      global memory updated by atomics, which is v3's idea.)
// And in this file, top to bottom: the tiles and fragment loaders, Params, dkdv_kernel,
// dq_kernel, the launcher, the registration.
//
// Tiles: Br = Bc = 64, 4 warps (128 threads), at every head dim. Each warp owns 16 rows of the
// tile the block is about (keys in dkdv, queries in dq) and all the columns (D = 256: half of
// them, see "Head dim 256" below), so the reductions of the row (the accumulation of dK, dV, dQ)
// stay inside a thread and no warp ever talks to another: the only barriers are the ones that
// protect the double buffers. 64 x 64 keeps the fp32 accumulators (dK and dV: 2 x 16 x D per
// warp = 2 x 64 floats per thread at D = 128) in registers next to the S / dP pieces, and two
// blocks fit in one SM (registers and shared memory) up to D = 128.
// S^T and dP^T are computed 32 columns (kChunk) at a time: the reduction over queries (keys in
// dq) is split in two halves, which halves the live S/dP registers and keeps everything free of
// spills.
//
// Fragment ownership (layouts of common/mma.cuh, g = lane/4, t = lane%4; warp w):
//   dkdv: S^T is 64 keys x 64 queries. Warp w computes rows 16w..16w+15 (its keys) with
//     A = K_j rows 16w.. (ldmatrix) and B = Q_i^T (ldmatrix of Q rows, no transpose: the
//     col-major B operand is a row-major Q). The accumulator of n-tile nt holds
//     S^T[16w+g (+8)][8nt + 2t (+1)]. Two adjacent n-tiles of that accumulator ARE the A
//     fragment of P^T for a 16-query k-step (acc_to_a), so dV += P^T dO takes P^T straight from
//     registers, with B = dO loaded by ldmatrix.trans. The same holds for dP^T = V_j dO_i^T and
//     dK += dS^T Q_i. The thread owns dK/dV rows 16w+g and 16w+g+8, columns 8nt+2t, 8nt+2t+1.
//   dq: the mirror image: warp w owns queries 16w..16w+15, S = Q K^T with A = Q (ldmatrix),
//     B = K^T (ldmatrix of K rows); dS from registers is the A operand of dQ += dS K with
//     B = K by ldmatrix.trans. The thread owns dQ rows 16w+g, 16w+g+8. Its two L and D values
//     are in registers for the whole kernel.
//
// Shared memory (T = 16-bit dtype, tiles padded to D + 8 elements per row):
//   dkdv: K_j | V_j | Q_i x2 | dO_i x2 | L_i*log2(e) x2 | D_i x2   (6 tiles + 1 KiB)
//   dq:   Q_i | dO_i | K_j x2 | V_j x2                              (6 tiles)
//   = 103 KiB at D = 128, 55 KiB at D = 64 (opt-in above 48 KiB).
//
// Head dim 256: the accumulator columns are split over two blocks.
//   Registers: at D = 128 the dkdv kernel already holds dK + dV = 2 x 64 fp32 per thread and
//   ptxas reports 253 registers (no spills); at D = 256 dK + dV would be 256 registers by
//   themselves, and dQ 128 next to the S, dP pieces (the dq kernel takes 206 at D = 128 with 64).
//   So each block owns half of the accumulator columns (kAccCols = 128, kColSplits = 2): a dkdv
//   block owns one K/V tile and columns col0 .. col0 + 127 of dK and dV; a dq block owns one Q
//   tile and the same half of dQ. The accumulators are then exactly those of D = 128 (dkdv
//   253 registers, dq 198 at D = 256, no spills; sm_90 and sm_80).
//   What cannot be split: S = Q K^T and dP = dO V^T are sums over all 256 columns, so both
//   halves compute them in full (and read whole Q, K, V, dO tiles): S and dP are computed twice
//   more. Per (Q tile, K tile) pair, in units of one 64 x 64 x 256 product: dkdv was S + dP +
//   dV + dK = 4, now 2 x (1 + 1 + 1/2 + 1/2) = 6; dq was S + dP + dQ = 3, now 2 x 2.5 = 5: 11
//   instead of 7 (1.57x the tensor-core work of an unsplit D = 256, 2.2x the 5 of FA2's atomic
//   dQ). The two halves of a tile are neighbours in blockIdx.x, so the second read of each
//   tile mostly hits L2.
//   Shared memory: tiles are 64 x 264 elements (33 KiB); the 6 tiles need 198 KiB (dq) and
//   199 KiB (dkdv): one block per SM on an H100 (227 KiB per block), and more than an A100
//   (163 KiB) or an sm_86/89 GPU (99 KiB) allows: there the launcher refuses D = 256 as
//   UNSUPPORTED, naming the bytes. (Smaller Q/dO tiles in dkdv, or single buffers, would fit
//   them; not done.)
//   The grid gets the factor 2 on blockIdx.x (still 64-bit index arithmetic, so batch * heads
//   beyond 65535 works as before), and each output element is still written by one thread:
//   bitwise deterministic.
//
// Masking: out-of-range rows are zero-filled by cp.async; a query row that does not exist or
// sees no key (L = -inf) gets L' = +inf, so P = exp2(x - inf) = 0 with no test in the loop.
// Keys past seq_k and the causal triangle are masked only on the tiles that need it.
//
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 187.8 TFLOP/s, FlashAttention-2 289.7
// (fa_bench and PyTorch in one run, notes/measured/h100-2026-11-23d/bench_05v6.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
constexpr int kChunk = 32;  // columns of S^T (dkdv) / S (dq) held in registers at a time
static_assert(kBr == kWarps * 16 && kBc == kWarps * 16, "one warp per 16 rows");
static_assert(kBr % kChunk == 0 && kBc % kChunk == 0 && kChunk % 16 == 0, "chunking");

// Columns of the fp32 accumulators (dK and dV in dkdv, dQ in dq) that one block owns: all D up
// to 128; at D = 256 half of them, kColSplits = 2 blocks per tile (the header says why).
template <int D>
constexpr int kAccCols = D > 128 ? D / 2 : D;
template <int D>
constexpr int kColSplits = D / kAccCols<D>;
static_assert(kAccCols<256> == 128 && kColSplits<256> == 2 && kColSplits<128> == 1, "splits");

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  void* dq;
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // tiles per (batch, head): of keys (dkdv) or of queries (dq)
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  bool causal;
};

template <int D>
constexpr int smem_bytes_tiles() {
  return 6 * 64 * (D + kPad) * 2;
}
template <int D>
constexpr int dkdv_smem_bytes() {
  return smem_bytes_tiles<D>() + 4 * kBr * int(sizeof(float));
}
template <int D>
constexpr int dq_smem_bytes() {
  return smem_bytes_tiles<D>();
}

// ---- dK, dV --------------------------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) dkdv_kernel(Params p) {
  constexpr int kLd = D + kPad;
  constexpr int kTile = 64 * kLd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kTile;
  T* sQ = sV + kTile;                                     // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                               // two buffers of kBr: D

  constexpr int kDC = kAccCols<D>;  // columns of dK, dV this block accumulates
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
      load_tile_async<T, D, kBr, kThreads>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
      load_tile_async<T, D, kBr, kThreads>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      const int64_t row = q1 + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();
    fa::mma::cp_async_wait<1>();
    __syncthreads();

    const T* q_s = sQ + buf * kTile;
    const T* do_s = sdO + buf * kTile;
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

          // dK_j += dS^T Q, only this block's columns.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < kDC / 16; ++np) {
          uint32_t b[4];
          load_b_x<kLd>(b, q_s, c0 + kk * 16, col0 + np * 16, lane);
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
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
  store_rows<T, D, kDC>(dK, dk, k0 + kr0, col0, seq_k, p.scale, lane);
  store_rows<T, D, kDC>(dV, dv, k0 + kr0, col0, seq_k, 1.0f, lane);
}

// ---- dQ ------------------------------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) dq_kernel(Params p) {
  constexpr int kLd = D + kPad;
  constexpr int kTile = 64 * kLd;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + kTile;
  T* sK = sdO + kTile;     // two buffers
  T* sV = sK + 2 * kTile;  // two buffers

  constexpr int kDC = kAccCols<D>;  // columns of dQ this block accumulates
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  // blockIdx.x = (bh * n_tiles + reversed query tile) * kColSplits + column half (as in dkdv).
  const int64_t tile_bh = int64_t(blockIdx.x) / kColSplits<D>;
  const int col0 = int(int64_t(blockIdx.x) % kColSplits<D>) * kDC;  // first owned column
  const int64_t bh = tile_bh / p.n_tiles;
  // Heaviest tiles first under causal masking (the last query tiles see the most keys).
  const int64_t qt = p.n_tiles - 1 - tile_bh % p.n_tiles;
  const int64_t q0 = qt * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;

  // The K/V tiles this Q tile sees: all of them, or (causal) up to the one holding the last key
  // that the tile's last query sees. None at all if that key is negative.
  const int64_t n_kt_all = ceil_div(seq_k, kBc);
  int64_t n_kt = n_kt_all;
  if (p.causal) {
    const int64_t last_q = (q0 + kBr < seq_q ? q0 + kBr : seq_q) - 1;
    const int64_t last_key = last_q + off;
    n_kt = last_key < 0 ? 0 : (last_key / kBc + 1 < n_kt_all ? last_key / kBc + 1 : n_kt_all);
  }

  const int qr0 = warp * 16;  // this warp's first query row in the tile
  float l2[2], dd[2];         // L * log2(e) and D of rows qr0 + g and qr0 + g + 8
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = q0 + qr0 + g + 8 * h;
    l2[h] = load_l2(p.lse + bh * seq_q, row, seq_q);
    dd[h] = row < seq_q ? p.delta[bh * seq_q + row] : 0.0f;
  }

  load_tile_async<T, D, kBr, kThreads>(sQ, Q, q0, seq_q, tid);
  load_tile_async<T, D, kBr, kThreads>(sdO, dO, q0, seq_q, tid);
  if (n_kt > 0) {
    load_tile_async<T, D, kBc, kThreads>(sK, K, 0, seq_k, tid);
    load_tile_async<T, D, kBc, kThreads>(sV, V, 0, seq_k, tid);
  }
  fa::mma::cp_async_commit();

  float dq[kDC / 8][4];  // columns col0 .. col0 + kDC - 1 only
#pragma unroll
  for (int nt = 0; nt < kDC / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[nt][e] = 0.0f;

  for (int64_t kt = 0; kt < n_kt; ++kt) {
    const int buf = int(kt & 1);
    const int64_t k0 = kt * kBc;
    if (kt + 1 < n_kt) {
      load_tile_async<T, D, kBc, kThreads>(sK + (buf ^ 1) * kTile, K, k0 + kBc, seq_k, tid);
      load_tile_async<T, D, kBc, kThreads>(sV + (buf ^ 1) * kTile, V, k0 + kBc, seq_k, tid);
    }
    fa::mma::cp_async_commit();
    fa::mma::cp_async_wait<1>();
    __syncthreads();

    const T* k_s = sK + buf * kTile;
    const T* v_s = sV + buf * kTile;
    const bool need_mask = (k0 + kBc > seq_k) || (p.causal && k0 + kBc - 1 > q0 + off);

#pragma unroll
    for (int kc = 0; kc < kBc / kChunk; ++kc) {
      constexpr int kNt = kChunk / 8;
      const int c0 = kc * kChunk;  // first key column of the chunk, within the tile

      // S = Q K^T over this chunk of keys.
      float s[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        load_a<kLd>(a, sQ, qr0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          load_b_xt<kLd>(b, k_s, c0 + np * 16, ks * 16, lane);
          mma_pair<T>(s[2 * np], s[2 * np + 1], a, b);
        }
      }

      // P = exp(scale S - L), masked. Element (nt, e): query row qr0 + g + 8*(e/2), key column
      // c0 + 8*nt + 2t + e%2.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float pv = exp2f(fmaf(s[nt][e], p.scale_log2, -l2[e >> 1]));
          if (need_mask) {
            const int64_t key = k0 + c0 + nt * 8 + 2 * t + (e & 1);
            const int64_t query = q0 + qr0 + g + 8 * (e >> 1);
            if (key >= seq_k || (p.causal && key > query + off)) pv = 0.0f;
          }
          s[nt][e] = pv;
        }
      }

      // dP = dO V^T over the chunk.
      float dp[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        load_a<kLd>(a, sdO, qr0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          load_b_xt<kLd>(b, v_s, c0 + np * 16, ks * 16, lane);
          mma_pair<T>(dp[2 * np], dp[2 * np + 1], a, b);
        }
      }

      // dS = P * (dP - D): D belongs to the query, the row.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = s[nt][e] * (dp[nt][e] - dd[e >> 1]);

          // dQ += dS K: k runs over the chunk's keys, B = K rows by ldmatrix.trans; only this
          // block's columns.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < kDC / 16; ++np) {
          uint32_t b[4];
          load_b_x<kLd>(b, k_s, c0 + kk * 16, col0 + np * 16, lane);
          mma_pair<T>(dq[2 * np], dq[2 * np + 1], a, b);
        }
      }
    }
    __syncthreads();  // everyone is done with `buf` before the next prefetch overwrites it
  }
  fa::mma::cp_async_wait<0>();

  T* dQ = static_cast<T*>(p.dq) + bh * seq_q * D;
  store_rows<T, D, kDC>(dQ, dq, q0 + qr0, col0, seq_q, p.scale, lane);
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
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;

  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  const int64_t n_qt = ceil_div(s.seq_q, kBr);
  constexpr int64_t kSplits = kColSplits<D>;
  FA_REQUIRE(n_kt * s.bh() * kSplits <= INT32_MAX && n_qt * s.bh() * kSplits <= INT32_MAX,
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
  if (n_qt > 0 && s.bh() > 0) {
    constexpr int kSmem = dq_smem_bytes<D>();
    FA_CUDA_CHECK(
        cudaFuncSetAttribute(dq_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_qt;
    dq_kernel<T, D><<<static_cast<unsigned>(n_qt * s.bh() * kSplits), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <int D>
void run_head_dim(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  // D = 256 needs 199 KiB per block: an H100 (227 KiB) has it, an A100 (163 KiB) and sm_86/89
  // (99 KiB) do not. Refuse before anything runs, rather than fail in cudaFuncSetAttribute.
  constexpr size_t kSmem =
      size_t(dkdv_smem_bytes<D>() > dq_smem_bytes<D>() ? dkdv_smem_bytes<D>() : dq_smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    "06/v2_mma: head_dim " + std::to_string(D) + " needs " + std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");

  // 1. D = rowsum(dO * O), before the two kernels that read it (same stream).
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);

  // 2. dK, dV and 3. dQ.
  if (a.dtype == fa::DType::BF16)
    launch<__nv_bfloat16, D>(a, stream);
  else
    launch<__half, D>(a, stream);
}

void attention_bwd_v2(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    "06/v2_mma takes bf16 and fp16 only");
  switch (s.head_dim) {  // every D here is a multiple of 16, which the mma loops need
    case 32:
      return run_head_dim<32>(a, stream);
    case 64:
      return run_head_dim<64>(a, stream);
    case 96:
      return run_head_dim<96>(a, stream);
    case 128:
      return run_head_dim<128>(a, stream);
    case 256:
      return run_head_dim<256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true,
                        "06/v2_mma is instantiated for head_dim 32, 64, 96, 128 and 256 only");
  }
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {"06/v2_mma",
             attention_bwd_v2,
             "tensor cores (mma.sync), dK/dV kernel over key tiles + dQ kernel, no atomics",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80,
             true});
FA_REGISTER_SMEM("06/v2_mma", [](int d) {
  return fa::smem_at<32, 64, 96, 128, 256>(d, [](auto D) {
    return std::max(dkdv_smem_bytes<decltype(D)::value>(), dq_smem_bytes<decltype(D)::value>());
  });
});
