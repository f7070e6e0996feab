// bwd_v1_varlen.cu: 09/bwd_v1_varlen, chapter 06's final backward (06/v5_warp_tiles) over a
// variable-length batch: sequences of different lengths packed without padding (VarlenShape,
// common/shapes.h: head-major [heads, total, D], the offsets cu_seqlens_q and cu_seqlens_k on the
// device), each its own attention problem. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate,
// D 64 and 128, heads_kv == heads. Not bitwise deterministic (dQ by atomics, as in 06/v5). O and
// L come from 09/v1_varlen.
//
// What changed against 06/v5_warp_tiles, and why. One idea: an offset table in front of the tile
// loops. A block is still one K/V tile of one head, now of one sequence: the grid is sized for the
// longest sequence (batch x heads x key tiles of max_seq_k), and the kernel reads the lengths on
// the device, as FlashAttention's varlen kernels do. Each block reads its sequence's two offsets
// (cu_seqlens_q[b], cu_seqlens_k[b]) and lengths, returns at once when its key tile starts past
// that sequence's seq_k, and otherwise runs 06/v5's loop unchanged, with the sequence's seq_q and
// seq_k and base pointers moved to (sequence, head), 64-bit: Q, O, dO, dQ and the fp32 dQ
// workspace of head h of sequence b start at row h * total_q + cu_seqlens_q[b] of the packed slab,
// K, V, dK, dV at row h * total_k + cu_seqlens_k[b], L and D at element h * total_q +
// cu_seqlens_q[b]. Causal masking is per sequence, bottom-right aligned (shapes.h): `off` is the
// sequence's seq_k - seq_q.
//
// Nothing else had to change, because 06/v5 already bounds every access by seq_q and seq_k; with
// packing those bounds are what keeps one sequence out of the next:
//   * loads of rows past the sequence's end are zero-filled, nothing is read for them
//     (load_tile_async; the full-tile copy runs only when the whole tile lies inside): those rows
//     are the next sequence's, or past the allocation;
//   * such a row's L is +inf and its D 0 (load_l2), so its P and dS are exactly 0; keys past
//     seq_k are masked;
//   * the stores of dK and dV (store_rows) and the dQ atomics skip rows past seq_k and seq_q: with
//     packing those rows belong to the next sequence, and an atomic there would add into its dQ.
// The preprocess D = rowsum(dO o O) and the conversion of dQ need no change at all: over the
// packed layout D's rows are the heads * total_q rows of O and dO, one after the other, so chapter
// 06's preprocess (delta_preprocess.cuh, compiled here as chapter 07's backward does) runs on a
// batch of one with seq_q = total_q, and convert_dq_kernel runs over every element of the
// workspace (rows no key tile reached, those that see no key, are 0 there).
// 06/v5's D 32 and 96 (v4's dkdv_kernel) are left out: this rung keeps warp_tiles_kernel, at D 64
// and 128. The pieces it calls (the tile, the swizzled copies, the products of a warp tile, the dQ
// atomics and dQ's conversion) are 06/v5's, from common/device/mma_bwd_v5.cuh; 06/v5 carries its
// own copy of them, so that the rung reads top to bottom.
//
// From 06/v5 (what it added to v4, and why): each product of the backward gets the warp layout
// that loads the fewest fragments for it, and P and dS go through shared memory to get from the
// layout of one product to the next. warp_tiles_kernel:
//   * S = Q K^T and dP = dO V^T: warp (wm, wn) computes 32 queries x 32 keys (64 keys with
//     128-query tiles). Per k16 step it loads 2 A (Q) and 2 B (K) fragments for 8 MMAs.
//   * P and dS, 16-bit, into shared memory (queries x 128 keys each, padded rows), then a barrier.
//   * dV += P^T dO and dK += dS^T Q: warp (wk, wd) = (warp % 4, warp / 4) owns 32 keys x D / 2
//     columns. A = P^T (ldmatrix .trans of the P tile), 2 per k16 step; B = dO, D / 32 per step.
//   * dQ += dS K: 32 x 32 warp tiles, with A = dS read from the P tile.
//   * Two barriers per Q tile: wait for tile i's copies first, then one barrier says both "tile i
//     has arrived" and "every warp is done with tile i - 1", and only then the prefetch of tile
//     i + 1 goes into the buffer tile i - 1 used.
//   * At D 64, Q tiles of 128 queries (kBrW), as FlashAttention-2.
//
// The map (three launches on one stream, after the caller's memset of the workspace):
//   1. D = rowsum(dO o O) over the heads * total_q rows (chapter 06's preprocess).
//   2. warp_tiles_kernel, one block per (sequence, head, key tile): the offset table, return if
//      the key tile lies past seq_k; per Q tile: wait for the tile, barrier, prefetch the next one;
//      S = Q K^T, dP = dO V^T; P = exp(scale S - L), dS = P (dP - D) into shared memory; barrier;
//      dV += P^T dO, dK += dS^T Q; dQaccum += dS K by atomics; then dK, dV of the sequence's keys.
//   3. dQ = dQaccum * scale, every element.
// And in this file, top to bottom: the Params (the offset table's fields), warp_tiles_kernel; the
// launcher, the registration.
//
// Shared memory: 171 KiB at D 128, 178 KiB at D 64, as 06/v5: more than an A100's 163 KiB, where
// this rung reports those head dims as unsupported.
// ptxas (CUDA 13.0, sm_90): 252 registers at D 128, 255 at D 64, no spills (06/v5: 252 and 254).
//
// Speed: measured in chapters/09_serving/README.md
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"
#include "delta_preprocess.cuh"
#include "gpu.h"
#include "mma.cuh"
#include "mma_bwd_v5.cuh"
#include "registry.h"

namespace {

using namespace fa::ch06::v5;  // 06/v5's tile, copies, products, dQ atomics (mma_bwd_v5.cuh)
using fa::causal_last_key;
using fa::ceil_div;
using fa::mma::smem_addr;

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fp32 [heads][total_q][D], zero on entry (the caller's workspace)
  void* dk;
  void* dv;
  // The offset table: sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of each
  // head's slab of Q (and cu_seqlens_k of K), batch + 1 entries on the device.
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t total_q, total_k;  // rows of one head's slab: the sums of the lengths
  int64_t heads;
  int64_t n_tiles;   // key tiles per (sequence, head): those of the longest sequence
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  bool causal;
};

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) warp_tiles_kernel(Params p) {
  static_assert(D == 64 || D == 128, "swizzled 128-byte rows: D 64 or 128");
  static_assert(kWarps == 8 && kBr == 64 && kBc == 128, "warps: 2 x 4 (S, dQ), 4 x 2 (dK, dV)");
  constexpr int kBrT = kBrW<D>;       // queries per Q tile: 128 at D 64, 64 at D 128
  constexpr int kLd = D + kPad;       // 06/v4's padded tile places: rows of kLd, used D at a time
  constexpr int kTile = kBrT * kLd;   // a Q or dO buffer
  constexpr int kKvTile = kBc * kLd;  // K or V
  constexpr int kHalf = D / 2;        // columns of dK, dV per warp
  // Warps of S, dP and dQ: 32 queries each, kWm along the queries (2, or 4 with 128-query tiles)
  // by kWn along the keys of S (or the columns of dQ).
  constexpr int kWm = kBrT / 32, kWn = kWarps / kWm;
  constexpr int kKw = kBc / kWn;     // keys of S, dP per warp: 32 (or 64)
  constexpr int kSn = kKw / 8;       // their n8 tiles
  constexpr int kQuarter = D / kWn;  // columns of dQ per warp: D / 4 (or D / 2)
  static_assert((kTile * 2) % 128 == 0 && (kKvTile * 2) % 128 == 0, "aligned tiles");
  // Swizzled tiles start at 128-byte boundaries.
  extern __shared__ __align__(128) unsigned char smem_warp_tiles[];
  T* sK = reinterpret_cast<T*>(smem_warp_tiles);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBrT: L * log2(e)
  float* sD = sL + 2 * kBrT;                              // two buffers of kBrT: D
  T* sP = reinterpret_cast<T*>(sD + 2 * kBrT);            // P: kBrT queries x kBc keys
  T* sdS = sP + kBrT * kLdP;                              // dS: the same layout

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // (b * heads + h) * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t b = bh / p.heads, head = bh % p.heads;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;

  // The offset table: sequence b's first rows in the packed slabs and its lengths. The grid is
  // sized for the longest sequence; a key tile past this one's keys has nothing to do (the whole
  // block leaves, before any barrier).
  const int64_t cu_q = p.cu_seqlens_q[b], cu_k = p.cu_seqlens_k[b];
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - cu_q, seq_k = p.cu_seqlens_k[b + 1] - cu_k;
  if (k0 >= seq_k) return;
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off

  // (sequence b, head): rows head * total + cu of the packed [heads, total, D] tensors, 64-bit.
  const int64_t q_row0 = head * p.total_q + cu_q, k_row0 = head * p.total_k + cu_k;
  const T* Q = static_cast<const T*>(p.q) + q_row0 * D;
  const T* dO = static_cast<const T*>(p.dout) + q_row0 * D;
  const T* K = static_cast<const T*>(p.k) + k_row0 * D;
  const T* V = static_cast<const T*>(p.v) + k_row0 * D;
  float* dQacc = p.dq_accum + q_row0 * D;
  const float* lse = p.lse + q_row0;
  const float* delta = p.delta + q_row0;

  // The Q tiles that can see this K tile: with causal masking the first query to see key k0 is
  // k0 - off; every tile before the one holding it is entirely masked and skipped.
  const int64_t qt_end = ceil_div(seq_q, kBrT);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBrT;  // may be >= qt_end: no work

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_tile_async<T, D, kBc, kThreads>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBc, kThreads>(sV, V, k0, seq_k, tid);
  if (qt_begin < qt_end) {
    const int64_t q0 = qt_begin * kBrT;
    load_tile_async<T, D, kBrT, kThreads>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBrT, kThreads>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBrT - 1));
    if (tid < kBrT)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBrT)
      sD[tid - kBrT] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  // The three warp layouts.
  constexpr int kWnShift = kWn == 4 ? 2 : 1;  // warp / kWn as a shift (kWn is 4 or 2)
  static_assert(kWn == 1 << kWnShift, "kWn: 4 or 2");
  const int wm = warp >> kWnShift, wn = warp & (kWn - 1);  // S, dP: queries 32 wm, keys kKw wn
  const int wk = warp & 3, wd = warp >> 2;  // dK, dV: keys 32 wk .., columns kHalf wd ..
  const int wq = wm, wc = wn;               // dQ: queries 32 wq .., columns kQuarter wc ..

  float dv[2][kHalf / 8][4], dk[2][kHalf / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][nt][e] = dk[mt][nt][e] = 0.0f;

  // Every address of the loop as a base plus a compile-time offset; the swizzled tiles' reads
  // then flip bits 4-6 (swz_addr). Q, dO: buffer 0 (a tile adds its buffer's offset).
  // ldmatrix forms (lane_rows, lane_trans): A = tile, rows (lane_rows); B = tile^T (lane_trans);
  // A = tile^T, .trans (lane_trans); B = tile, .trans (lane_rows).
  const uint32_t swz = swizzle_xor(lane);
  const uint32_t rows_d = lane_rows<D>(lane), trans_d = lane_trans<D>(lane);
  const uint32_t q_a0 = smem_addr(sQ) + rows_d + at<D>(32 * wm, 0);       // S: A = Q
  const uint32_t do_a0 = smem_addr(sdO) + rows_d + at<D>(32 * wm, 0);     // dP: A = dO
  const uint32_t k_b = smem_addr(sK) + trans_d + at<D>(kKw * wn, 0);      // S: B = K^T
  const uint32_t v_b = smem_addr(sV) + trans_d + at<D>(kKw * wn, 0);      // dP: B = V^T
  const uint32_t do_x0 = smem_addr(sdO) + rows_d + at<D>(0, kHalf * wd);  // dV: B = dO
  const uint32_t q_x0 = smem_addr(sQ) + rows_d + at<D>(0, kHalf * wd);    // dK: B = Q
  const uint32_t k_x = smem_addr(sK) + rows_d + at<D>(0, kQuarter * wc);  // dQ: B = K
  const uint32_t p_at = smem_addr(sP) + lane_trans<kLdP>(lane) + at<kLdP>(0, 32 * wk);    // P^T
  const uint32_t ds_at = smem_addr(sdS) + lane_trans<kLdP>(lane) + at<kLdP>(0, 32 * wk);  // dS^T
  const uint32_t ds_a = smem_addr(sdS) + lane_rows<kLdP>(lane) + at<kLdP>(32 * wq, 0);    // dS
  // Where this thread stores its P and dS elements: row 32 wm + g, columns kKw wn + 2t.
  T* const p_st = sP + (32 * wm + g) * kLdP + kKw * wn + 2 * t;
  T* const ds_st = sdS + (32 * wm + g) * kLdP + kKw * wn + 2 * t;
  const TileCopy<T, D, kBrT> copy(tid);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);
  constexpr uint32_t kTileBytes = kTile * 2;

  for (int64_t qt = qt_begin; qt < qt_end; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBrT;
    const bool has_next = qt + 1 < qt_end;

    // One barrier for two things. Tile i is the only copy in flight here; once every warp has
    // it, every warp is also done with tile i - 1: its Q and dO buffer (which the prefetch below
    // overwrites), P, dS, L and D.
    fa::mma::cp_async_wait<0>();
    __syncthreads();

    // Prefetch Q_{i+1}, dO_{i+1} into the other buffer (always commit: the wait above then has
    // one group to wait for). L and D go through registers, stored after the math so their
    // latency hides behind it.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBrT;
      if (q1 + kBrT <= seq_q) {  // a full tile: the plan, no bounds test
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * D);
        copy.full(sdo_addr + next, dO + q1 * D);
      } else {  // the sequence ends inside it: rows past seq_q zero-filled
        load_tile_async<T, D, kBrT, kThreads>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
        load_tile_async<T, D, kBrT, kThreads>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      }
      const int64_t row = q1 + (tid & (kBrT - 1));
      if (tid < kBrT)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBrT)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();

    const uint32_t cur = uint32_t(buf) * kTileBytes;
    const uint32_t q_a = q_a0 + cur, do_a = do_a0 + cur, do_x = do_x0 + cur, q_x = q_x0 + cur;
    const float* l_s = sL + buf * kBrT;
    const float* d_s = sD + buf * kBrT;
    // Mask only where needed: keys past seq_k, or a tile crossing the causal diagonal (some key
    // of the tile lies beyond what the tile's first query sees).
    const bool need_mask = (k0 + kBc > seq_k) || (p.causal && k0 + kBc - 1 > q0 + off);

    // S = Q K^T and dP = dO V^T, 32 x kKw per warp: element (mt, nt, e) is query row
    // 32 wm + 16 mt + g + 8 (e / 2), key column kKw wn + 8 nt + 2t + e % 2 of the tile.
    float s[2][kSn][4], dp[2][kSn][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.0f;
    rows_times_keys<T, D, kSn>(s, q_a, k_b, swz);    // S = Q K^T
    rows_times_keys<T, D, kSn>(dp, do_a, v_b, swz);  // dP = dO V^T

    // P = exp(scale S - L), masked where needed; dS = P (dP - D). L and D belong to the query,
    // the row. Both into shared memory, 16-bit, for the products that follow.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 32 * wm + 16 * mt + g + 8 * h;
        const float l2 = l_s[row], dd = d_s[row];
#pragma unroll
        for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = 2 * h + c;
            float pv = ex2_ftz(fmaf(s[mt][nt][e], p.scale_log2, -l2));
            if (need_mask) {
              const int64_t key = k0 + kKw * wn + 8 * nt + 2 * t + c;
              if (key >= seq_k || (p.causal && key > q0 + row + off)) pv = 0.0f;
            }
            s[mt][nt][e] = pv;
            dp[mt][nt][e] = pv * (dp[mt][nt][e] - dd);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int o = (16 * mt + 8 * h) * kLdP + 8 * nt;
          *reinterpret_cast<uint32_t*>(p_st + o) =
              fa::mma::pack2<T>(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(ds_st + o) =
              fa::mma::pack2<T>(dp[mt][nt][2 * h], dp[mt][nt][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // P and dS complete

    // dV += P^T dO and dK += dS^T Q: 32 keys (two m16 tiles) x kHalf columns per warp; k runs
    // over the tile's queries, 16 at a time.
    keys_times_cols<T, D, kBrT, kHalf>(dv, p_at, do_x, swz);  // dV += P^T dO
    keys_times_cols<T, D, kBrT, kHalf>(dk, ds_at, q_x, swz);  // dK += dS^T Q

    // dQaccum_i += dS K_j: 32 queries x kQuarter columns per warp, k over the kBc keys.
    if (q0 + 32 * wq < seq_q) {  // else every row of this warp lies past seq_q
      float acc[2][kQuarter / 8][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kQuarter / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      keys_times_cols<T, D, kBc, kQuarter, false>(acc, ds_a, k_x, swz);  // dQ_i = dS K_j
      // Element (mt, nt, e): query row 32 wq + 16 mt + g + 8 (e / 2), column kQuarter wc + 8 nt
      // + 2t + e % 2; the two columns of a thread are adjacent, one float2 atomic (add_dq). Rows
      // past seq_q are skipped: they are the next sequence's rows of the workspace.
      const int64_t row0 = q0 + 32 * wq + g;
      float* const dst0 = dQacc + row0 * D + kQuarter * wc + 2 * t;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 16 * mt + 8 * h >= seq_q) continue;
#pragma unroll
          for (int nt = 0; nt < kQuarter / 8; ++nt)
            add_dq(dst0 + (16 * mt + 8 * h) * D + 8 * nt, acc[mt][nt][2 * h],
                   acc[mt][nt][2 * h + 1]);
        }
    }

    if (has_next) {  // L, D of the next tile into the other buffer
      if (tid < kBrT)
        sL[(buf ^ 1) * kBrT + tid] = next_ld;
      else if (tid < 2 * kBrT)
        sD[(buf ^ 1) * kBrT + tid - kBrT] = next_ld;
    }
  }
  fa::mma::cp_async_wait<0>();

  // Keys that no query sees (causal, or seq_q = 0) leave here with dK = dV = 0, as they must;
  // rows past seq_k are not written.
  T* dK = static_cast<T*>(p.dk) + k_row0 * D;
  T* dV = static_cast<T*>(p.dv) + k_row0 * D;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    store_rows<T, D, kHalf>(dK, dk[mt], k0 + 32 * wk + 16 * mt, kHalf * wd, seq_k, p.scale, lane);
    store_rows<T, D, kHalf>(dV, dv[mt], k0 + 32 * wk + 16 * mt, kHalf * wd, seq_k, 1.0f, lane);
  }
}

// ---- launcher ------------------------------------------------------------------------------
template <class T, int D>
void launch(const fa::VarlenBwdArgs& a, float scale, cudaStream_t stream) {
  const fa::VarlenShape& s = a.shape;
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
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.total_q = s.total_q();
  p.total_k = s.total_k();
  p.heads = s.heads;
  p.scale = scale;
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;

  // Key tiles of the longest sequence, for every (sequence, head); shorter sequences' blocks
  // past their keys return at once.
  const int64_t n_kt = ceil_div(s.max_seq_k(), kBc);
  const int64_t blocks = n_kt * s.batch() * s.heads;
  FA_REQUIRE(blocks <= INT32_MAX, "batch * heads * key tiles must fit in gridDim.x");

  if (blocks > 0) {
    constexpr int kSmem = warp_tiles_smem_bytes<D>();
    const auto kernel = warp_tiles_kernel<T, D>;
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    kernel<<<static_cast<unsigned>(blocks), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace).
  const int64_t n4 = s.q_numel() / 4;
  if (n4 > 0) {
    constexpr int kConvThreads = 256;
    const int64_t conv_blocks = std::min<int64_t>(ceil_div(n4, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(conv_blocks), kConvThreads, 0, stream>>>(
        a.workspace, static_cast<T*>(a.dq), n4, p.scale);
    FA_CHECK_LAUNCH();
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <int D>
void run_head_dim(const fa::VarlenBwdArgs& a, cudaStream_t stream) {
  // 171 KiB per block at D = 128 and 178 KiB at D = 64: an H100 (227 KiB) has it, an A100
  // (163 KiB) or sm_86/89 (99 KiB) not. Refuse before anything runs, rather than fail in
  // cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(warp_tiles_smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    "09/bwd_v1_varlen: head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr, "09/bwd_v1_varlen needs the fp32 workspace (dQ accumulator)");
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr,
             "09/bwd_v1_varlen needs cu_seqlens_q and cu_seqlens_k on the device");
  const fa::VarlenShape& s = a.shape;

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream), over the packed layout:
  // one sequence of total_q queries per head (delta_preprocess.cuh).
  fa::delta_preprocess_launch_packed(a.o, a.dout, a.delta, s, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  const float scale = s.sequence(0).softmax_scale();
  if (a.dtype == fa::DType::BF16)
    launch<__nv_bfloat16, D>(a, scale, stream);
  else
    launch<__half, D>(a, scale, stream);
}

void varlen_bwd_v1(const fa::VarlenBwdArgs& a, cudaStream_t stream) {
  const fa::VarlenShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    "09/bwd_v1_varlen takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.is_gqa(), "09/bwd_v1_varlen takes heads_kv == heads only");
  FA_UNSUPPORTED_IF(s.window_left >= 0 || (!s.causal && s.window_right >= 0),
                    "09/bwd_v1_varlen has no sliding window (09/bwd_v2_window has)");
  switch (s.head_dim) {
    case 64:
      return run_head_dim<64>(a, stream);
    case 128:
      return run_head_dim<128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "09/bwd_v1_varlen is instantiated for head_dim 64 and 128 only");
  }
}

}  // namespace

FA_REGISTER(VarlenBwdKernel,
            {"09/bwd_v1_varlen",
             varlen_bwd_v1,
             "06/v5 over a packed variable-length batch: an offset table per (sequence, head) "
             "block, tails masked per sequence",
             {fa::DType::BF16, fa::DType::F16},
             {64, 128},
             80,
             /*window=*/false,
             /*deterministic=*/false,
             /*forward=*/"09/v1_varlen"});
FA_REGISTER_SMEM("09/bwd_v1_varlen", [](int d) {
  return fa::smem_at<64, 128>(d,
                              [](auto D) { return warp_tiles_smem_bytes<decltype(D)::value>(); });
});
