// v5_hoisted_addresses.cu: 06/v4_bc128_8warps plus one idea: every address the loop over Q tiles
// uses is computed once, before the loop, as a per-thread base; inside the loop an address is that
// base plus a compile-time constant. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not
// bitwise deterministic (dQ by atomics, as in v3 and v4). Chapter 08's 08/v4_hoisted_addresses
// is the same idea in the decoding kernel.
//
// Why. Nsight Compute's per-instruction counts of v4 (H100, bf16, D 128, N 8192, B 2, H 16;
// notes/06_flash_backward.md, section 5c) put 2.89 G instructions on the dK/dV kernel against
// FlashAttention-2's 2.12 G for the same 671 M tensor-core MMAs. The difference is integer work:
// LEA 316 M (FA2: 135 M), IMAD 280 M (65 M), LOP3 97 M (0.7 M), ISETP 86 M (2.3 M), SHF 60 M
// (0.5 M). Two places make most of it:
//   - the prefetch of Q_{i+1} and dO_{i+1}: load_tile_async's strided loop starts at the thread
//     index, so the compiler cannot count its trips; it emits a generic loop with a remainder
//     and a 64-bit bounds test per 16-byte copy: about 320 instructions per warp and Q tile for 8
//     cp.async (a fifth of the kernel's instructions);
//   - the ldmatrix addresses: at 255 registers the compiler does not keep the 30-odd row
//     addresses of the loop alive, and recomputes each from the lane index (LOP3, IMAD, LEA)
//     before its ldmatrix, every Q tile.
// What changes:
//   - TileCopy: thread tid copies chunk tid % (D / 8) of rows tid / (D / 8) + kRowsPerPass * i;
//     between passes the source moves by kRowsPerPass * D elements and the destination by
//     kRowsPerPass * (D + 8): constants. A full tile is kPasses cp.async with no test; only the
//     last tile of a sequence that ends inside it takes load_tile_async, which zero-fills.
//   - Eight 32-bit shared addresses per thread (K and V as A, K as B of dQ, Q and dO as B in both
//     forms, dS^T as A of dQ, and the store of dS^T) hold the lane's part of every ldmatrix; a
//     fragment's address is one of them plus (row * pitch + column) * 2, known at compile time.
// The arithmetic, the tiles and the order of every MMA are v4's; only the addresses changed.
//
// The map, the dQ split over the eight warps, shared memory and masking: as v4 (see there).
//
// Speed (H100, 2026-11-23, sixth session, call 4; as v4's header). D 128 full N 8192: v4 210.3,
// v5 214.4 (+2%); D 64: 182.7, 191.2 (+5%). Nsight Compute (call2_ncu_bwd_v5.txt, D 128 N
// 8192): 2.28 G instructions (v4: 2.89 G), LEA 316 M -> 59 M, IMAD 280 M -> 145 M; 14.98 ms
// (v4: 15.53). A fifth fewer instructions bought 4%: the kernel was not short of issue slots
// (issue active 24% -> 19%); its busiest unit is shared memory (L1 74%), as v8's header says.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ch06_preprocess.h"
#include "check.h"
#include "flash_bwd_tc.cuh"
#include "mma.cuh"
#include "registry.h"

namespace {

using fa::causal_last_key;
using fa::ceil_div;
using fa::bwd_tc::acc_to_a;
using fa::bwd_tc::kPad;
using fa::bwd_tc::load_tile_async;
using fa::bwd_tc::mma_pair;
using fa::mma::ldmatrix_x4;
using fa::mma::ldmatrix_x4_trans;
using fa::mma::smem_addr;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 64;     // query rows per tile
constexpr int kBc = 128;    // key rows per tile
constexpr int kChunk = 32;  // columns of S^T held in registers at a time
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBc == kWarps * 16, "one warp per 16 keys");
constexpr int kQWarps = kBr / 16;  // warps per column half of dQ (one per 16 query rows)
static_assert(kWarps == 2 * kQWarps, "dQ: two column halves of kQWarps warps");
static_assert(kBr % kChunk == 0 && kBc % kChunk == 0 && kChunk % 16 == 0, "chunking");

// Columns of the partial dQ held in registers at a time (16 x kDqCols per warp) before their
// atomics: 32 where it divides the warp's half of D (64, 128), 16 where it does not (32, 96).
template <int D>
constexpr int kDqCols = (D / 2) % 32 == 0 ? 32 : 16;
static_assert(kDqCols<128> == 32 && kDqCols<96> == 16 && kDqCols<32> == 16, "dQ chunks");

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
  return (2 * kBc + 4 * kBr) * (D + kPad) * 2;  // K_j, V_j; Q_i, dO_i double-buffered
}
constexpr int kLdS = kBr + kPad;  // row of the dS^T tile: kBr queries + padding
template <int D>
constexpr int dkdv_smem_bytes() {
  return smem_bytes_tiles<D>() + 4 * kBr * int(sizeof(float)) + kBc * kLdS * 2;
}

// L in the form the loops want: L * log2(e), or +inf for a row that does not exist or sees no
// key (L = -inf), which makes every P of that row exp2(finite - inf) = 0.
__device__ __forceinline__ float load_l2(const float* lse, int64_t row, int64_t seq_q) {
  if (row >= seq_q) return INFINITY;
  const float l = lse[row];
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// Store a 16 x D fp32 accumulator, times `mul`: rows r0 + g, r0 + g + 8 of a [seq, D] matrix.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* out, const float (&acc)[D / 8][4], int64_t r0,
                                           int64_t seq, float mul, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * int64_t(D) + 2 * t;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      *reinterpret_cast<uint32_t*>(dst + 8 * nt) =
          fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
    }
  }
}

// ---- the addresses, computed once ------------------------------------------------------------
// The lane's part of the two ldmatrix x4 address patterns of flash_bwd_tc.cuh, in bytes, for a
// tile of pitch LD elements (lane l gives row r = l % 8 of matrix i = l / 8):
//   lane_rows:  (r + 8 (i % 2)) LD + 8 (i / 2)   load_a, load_b_x: A = the tile, B = the tile
//   lane_trans: (r + 8 (i / 2)) LD + 8 (i % 2)   load_b_xt, load_a_xt: B = tile^T, A = tile^T
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

// store_a of flash_bwd_tc.cuh from the lane's address p = s + (m0 + g) LD + k0 + 2t.
template <int LD, class T>
__device__ __forceinline__ void store_a_at(T* p, const uint32_t (&a)[4]) {
  *reinterpret_cast<uint32_t*>(p) = a[0];
  *reinterpret_cast<uint32_t*>(p + 8 * LD) = a[1];
  *reinterpret_cast<uint32_t*>(p + 8) = a[2];
  *reinterpret_cast<uint32_t*>(p + 8 * LD + 8) = a[3];
}

// The copies of a full Q or dO tile (kBr rows), planned once per thread: thread tid copies the
// 16-byte chunk tid % kChunksPerRow of rows row + kRowsPerPass * i, i < kPasses. Threads past
// kRowsPerPass * kChunksPerRow (D = 96: 12 chunks a row, 21 rows a pass) copy nothing.
template <class T, int D>
struct TileCopy {
  static constexpr int kLd = D + kPad;
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (kBr + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr bool kExact = kThreads % kChunksPerRow == 0 && kBr % kRowsPerPass == 0;
  int row;       // this thread's first row (kBr: none)
  int src;       // its first chunk, in elements from the tile's first row in global memory
  uint32_t dst;  // and in bytes from the tile's start in shared memory

  __device__ __forceinline__ explicit TileCopy(int tid) {
    row = tid < kRowsPerPass * kChunksPerRow ? tid / kChunksPerRow : kBr;
    const int col = (tid % kChunksPerRow) * 8;
    src = row * D + col;
    dst = at<kLd>(row, col);
  }
  // Rows [0, kBr) of the tile whose first row is `g` into the tile at shared address `s`.
  __device__ __forceinline__ void full(uint32_t s, const T* g) const {
#pragma unroll
    for (int i = 0; i < kPasses; ++i)
      if (kExact || row + i * kRowsPerPass < kBr)
        fa::mma::cp_async_16(s + dst + at<kLd>(i * kRowsPerPass, 0),
                             g + src + i * kRowsPerPass * D);
  }
};

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(Params p) {
  constexpr int kLd = D + kPad;
  constexpr int kTile = kBr * kLd;    // a Q or dO tile (kBr rows)
  constexpr int kKvTile = kBc * kLd;  // a K or V tile (kBc rows: twice v3's)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                               // two buffers of kBr: D
  T* sdS = reinterpret_cast<T*>(sD + 2 * kBr);            // dS^T: kBc keys x kBr queries

  constexpr int kDqHalf = D / 2;  // columns of dQ one warp adds
  static_assert(kDqHalf % kDqCols<D> == 0, "dQ chunks");
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

  float dv[D / 8][4], dk[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[nt][e] = dk[nt][e] = 0.0f;

  const int kr0 = warp * 16;                   // this warp's first key row in the tile
  const int qr0 = (warp % kQWarps) * 16;       // its first query row, for dQ,
  const int dq0 = (warp / kQWarps) * kDqHalf;  // and its first column of dQ

  // v5: the bases of every address in the loop. ldmatrix: K, V as A of S^T, dP^T (this warp's
  // rows); K as B of dQ (.trans, this warp's columns); Q, dO as B in both forms (buffer 0; a
  // tile adds its buffer's offset); dS^T as A of dQ (.trans, this warp's query rows). store_a's
  // address of dS^T (rows kr0 + g, + 8; columns 2t, 2t + 1). The Q / dO copy plan.
  constexpr uint32_t kTileBytes = kTile * 2;
  const uint32_t rows_off = lane_rows<kLd>(lane), trans_off = lane_trans<kLd>(lane);
  const uint32_t k_a = smem_addr(sK) + rows_off + at<kLd>(kr0, 0);
  const uint32_t v_a = smem_addr(sV) + rows_off + at<kLd>(kr0, 0);
  const uint32_t k_x = smem_addr(sK) + rows_off + at<kLd>(0, dq0);
  const uint32_t q_t0 = smem_addr(sQ) + trans_off, q_x0 = smem_addr(sQ) + rows_off;
  const uint32_t do_t0 = smem_addr(sdO) + trans_off, do_x0 = smem_addr(sdO) + rows_off;
  const uint32_t ds_t = smem_addr(sdS) + lane_trans<kLdS>(lane) + at<kLdS>(0, qr0);
  T* const ds_st = sdS + (kr0 + g) * kLdS + 2 * t;
  const TileCopy<T, D> copy(tid);
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
        load_tile_async<T, D, kBr, kThreads>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
        load_tile_async<T, D, kBr, kThreads>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
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
    const uint32_t q_t = q_t0 + cur, q_x = q_x0 + cur, do_t = do_t0 + cur, do_x = do_x0 + cur;
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
        ldmatrix_x4(a, k_a + at<kLd>(0, ks * 16));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, q_t + at<kLd>(c0 + np * 16, ks * 16));
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

      // dV_j += P^T dO: k runs over the chunk's queries, 16 at a time.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, do_x + at<kLd>(c0 + kk * 16, np * 16));
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
        ldmatrix_x4(a, v_a + at<kLd>(0, ks * 16));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, do_t + at<kLd>(c0 + np * 16, ks * 16));
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
          ldmatrix_x4_trans(b, q_x + at<kLd>(c0 + kk * 16, np * 16));
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
        }
      }
    }

    // dQaccum_i += dS K_j: warp w takes query rows qr0.. and columns dq0 .. dq0 + D/2 - 1, A =
    // dS = sdS^T (all kBc keys, written by the eight warps), B = K_j; kDqCols columns at a time.
    __syncthreads();         // sdS complete
    if (q0 + qr0 < seq_q) {  // else every row of this warp lies past seq_q
#pragma unroll
      for (int dc = 0; dc < kDqHalf / kDqCols<D>; ++dc) {
        const int n0 = dq0 + dc * kDqCols<D>;  // first column of the chunk
        float acc[kDqCols<D> / 8][4];
#pragma unroll
        for (int nt = 0; nt < kDqCols<D> / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kBc / 16; ++ks) {
          uint32_t a[4];
          ldmatrix_x4_trans(a, ds_t + at<kLdS>(ks * 16, 0));
#pragma unroll
          for (int np = 0; np < kDqCols<D> / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, k_x + at<kLd>(ks * 16, dc * kDqCols<D> + np * 16));
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
          for (int nt = 0; nt < kDqCols<D> / 8; ++nt) {
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
    __syncthreads();  // everyone is done with `buf` before the next prefetch overwrites it
  }
  fa::mma::cp_async_wait<0>();

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
  store_rows<T, D>(dK, dk, k0 + kr0, seq_k, p.scale, lane);
  store_rows<T, D>(dV, dv, k0 + kr0, seq_k, 1.0f, lane);
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
  FA_REQUIRE(n_kt * s.bh() <= INT32_MAX, "batch * heads * key tiles must fit in gridDim.x");

  if (n_kt > 0 && s.bh() > 0) {
    constexpr int kSmem = dkdv_smem_bytes<D>();
    FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    dkdv_kernel<T, D><<<static_cast<unsigned>(n_kt * s.bh()), kThreads, kSmem, stream>>>(p);
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

// The dynamic shared memory one block may opt in to on the current device.
size_t smem_optin_bytes() {
  int dev = 0, bytes = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return size_t(bytes);
}

template <int D>
void run_head_dim(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  // D = 128 needs 155 KiB per block: an H100 (227 KiB) or an A100 (163 KiB) has it, sm_86/89
  // (99 KiB) does not. Refuse before anything runs, rather than fail in cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(dkdv_smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    "06/v5_hoisted_addresses: head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr,
             "06/v5_hoisted_addresses needs the fp32 workspace (dQ accumulator)");

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream).
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  if (a.dtype == fa::DType::BF16)
    launch<__nv_bfloat16, D>(a, stream);
  else
    launch<__half, D>(a, stream);
}

void attention_bwd_v5(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    "06/v5_hoisted_addresses takes bf16 and fp16 only");
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
                        "06/v5_hoisted_addresses is instantiated for head_dim 32, 64, 96 and 128 "
                        "only (06/v3 has 256)");
  }
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {"06/v5_hoisted_addresses",
             attention_bwd_v5,
             "v4 + every address of the loop computed once (copy plan, ldmatrix bases)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
