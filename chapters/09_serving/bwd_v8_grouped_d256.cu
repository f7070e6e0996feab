// bwd_v8_grouped_d256.cu: 09/bwd_v8_grouped_d256, 09/bwd_v5_window_d256 (the packed backward and
// its window at every head dim up to 256, on chapter 06's t21 kernel) with grouped K/V heads (GQA,
// MQA) as bwd_v6 takes them, chapter 06's t20 and t22 lines: query head h reads K/V head
// h / group in place, with a window or without. bf16 / fp16 in, mma.sync m16n8k16, fp32
// accumulate, every head dim computed at 256, any GPU from sm_80 with 147 KiB a block. Not bitwise
// deterministic (dQ, and dK, dV where split, by atomics). O and L come from
// 09/v4_window_any_head_dim, which takes grouped heads.
//
// Why. Above D 128 a packed backward with grouped heads ran only on Hopper
// (09/hopper_bwd_v1_varlen and v2_window, multiples of 8): before sm_90, or at a head dim such as
// 201, the Python operator repeated K and V over the group in memory, ran bwd_v5 and summed each
// group's dK and dV in another pass.
//
// What changed vs bwd_v5: bwd_v3 -> bwd_v6's lines, on bwd_v5.
//   * The grid: (key tile, sequence x heads_kv x split): a block's K, V (and its dK, dV) are those
//     of K/V head h_kv of sequence b, rows h_kv * total_k + cu_seqlens_k[b] of the packed
//     [heads_kv, total_k, d] slabs.
//   * t20's walk: the loop over the band's Q tiles runs over query heads too, iteration it being Q
//     tile qt_begin + it % n_per of query head head0 + it / n_per (rows head * total_q +
//     cu_seqlens_q[b]); Q, dO, L, D and the dQ accumulator move to the iteration's head, the
//     prefetch (t18: after dK += dS^T Q) reads the next iteration's. dK and dV sum over the heads
//     in registers.
//   * t22's split: under the causal mask (a causal band, with a window on the left or none) each
//     query head has its own block (split = group), so the grid is bwd_v5's, and the blocks' dK
//     and dV are parts, added (unscaled, fp32) by atomics into a buffer of the K/V heads' size
//     and converted after; otherwise the block walks the whole group (split 1) and stores dK and
//     dV as bwd_v5 does, unless that grid leaves the GPU's resident blocks idle (t22's
//     full_split).
// At heads_kv == heads every line runs bwd_v5's work.
//
// 06/v5's pieces come from common/device/mma_bwd_v5.cuh and t21's from mma_bwd_t21.cuh, as in
// bwd_v5; t22's from group_split.cuh, as in bwd_v6.
//
// Speed (H200, 2026-12-05; README.md): grouped 1.000-1.009x its MHA time per query head at H_kv
// 8, 4, 1, D 256; on MHA batches 0.99-1.01x bwd_v5 at D 192 and 256. Full attention at N 4096
// and 8192 (H100, 2026-12-06): 0.986-1.004x, as before the full split (blocks of 64 keys: MQA at
// N 4096 already has 128 blocks, and full_split keeps split 1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ch09_band.h"
#include "ch09_bwd_args.h"
#include "check.h"
#include "delta_preprocess.cuh"
#include "group_split.cuh"
#include "gpu.h"
#include "mma.cuh"
#include "mma_bwd_t21.cuh"
#include "mma_bwd_v5.cuh"
#include "registry.h"

namespace {

constexpr const char* kName = "09/bwd_v8_grouped_d256";  // the registered name

using namespace fa::ch06::v5;   // 06/v5's copies, products, dQ atomics (mma_bwd_v5.cuh)
using namespace fa::ch06::t21;  // t21's tile, rows of d, dQ's tail (mma_bwd_t21.cuh)
using fa::ceil_div;
using fa::ch06::t22::add_rows_of_d;  // t22's pieces (group_split.cuh)
using fa::ch06::t22::GroupSplit;
using fa::ch06::t22::resident_blocks;
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
  int64_t heads_kv;          // K/V heads: heads / group
  int group;                 // query heads per K/V head (1 without grouping)
  int split;         // blocks per K/V tile of a K/V head, each walking group / split query heads
  float* dk_parts;   // t22: fp32 [heads_kv][total_k][d], zero on entry (split > 1), else nullptr
  float* dv_parts;   // t22: the same for dV
  int64_t n_tiles;   // key tiles per (sequence, K/V head, part): those of the longest sequence
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  // The window as ch09_band.h's Band (causal is its right = 0), made once on the host with
  // "unlimited" written as Band::kUnlimited; seq_q and seq_k are filled in per sequence.
  fa::ch09::Band window;
  int d;  // t19: the real head dim, the length of a row in global memory (<= D)
};

// A key's column offset x within a row of `cols` columns, clamped to [-1, cols]: one past either
// end compares with every column 0 .. cols - 1 as x itself does, and fits in 32 bits.
__device__ __forceinline__ int clamp_cols(int64_t x, int cols) {
  return int(x < -1 ? -1 : (x > cols ? cols : x));
}

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
// kWholeRows: d == D == 256, a compile-time row length (06/t18's strides; the launcher's third
// instance, for D 256 itself).
// kAnyLength: t21's element-by-element rows, for the head dims that are no multiple of 8 (the
// launcher compiles both and picks by d: without it, this is t19's code at the multiples of 8).
template <class T, int D, bool kAnyLength, bool kWholeRows>
__global__ void __launch_bounds__(kThreads, 1) warp_tiles_kernel(Params p) {
  static_assert(D == kD256, "t21's one instance: every head dim computed at 256");
  static_assert(kWarps == 8 && kBr == 64 && kKeys == 32 << kKeyShift,
                "warps: 2 x 4 (S, dQ), 2 x 4 (dK, dV)");
  constexpr int kBrT = kBr;                        // queries per Q tile
  constexpr int kLd = kTileRows;                   // t18: rows of D, no padding place
  constexpr int kTile = kBrT * kLd;                // the Q or the dO buffer
  constexpr int kKvTile = kKeys * kLd;             // K or V
  constexpr int kKeyWarps = 1 << kKeyShift;        // t14: 2 warps along the keys
  constexpr int kHalf = D / (kWarps / kKeyWarps);  // columns of dK, dV per warp: D / 4
  // Warps of S, dP and dQ: 32 queries each, kWm along the queries by kWn along the keys of S (or
  // the columns of dQ).
  constexpr int kWm = kBrT / 32, kWn = kWarps / kWm;
  constexpr int kKw = kKeys / kWn;   // keys of S, dP per warp: 16
  constexpr int kSn = kKw / 8;       // their n8 tiles
  constexpr int kQuarter = D / kWn;  // columns of dQ per warp: D / 4
  static_assert((kTile * 2) % 128 == 0 && (kKvTile * 2) % 128 == 0, "aligned tiles");
  // Swizzled tiles start at 128-byte boundaries.
  extern __shared__ __align__(128) unsigned char smem_warp_tiles[];
  T* sK = reinterpret_cast<T*>(smem_warp_tiles);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                               // t18: one buffer
  T* sdO = sQ + kTile;                                // t18: one buffer
  float* sL = reinterpret_cast<float*>(sdO + kTile);  // two buffers of kBrT: L * log2(e)
  float* sD = sL + 2 * kBrT;                          // two buffers of kBrT: D
  T* sP = reinterpret_cast<T*>(sD + 2 * kBrT);        // P: kBrT queries x kKeys keys
  T* sdS = sP + kBrT * kLdP64;                        // dS: the same layout

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // ((b * heads_kv + h_kv) * split + part) * n_tiles + tile
  const int64_t unit = tile_bh / p.n_tiles;  // (sequence, K/V head, part)
  const int64_t kv_bh = unit / p.split;      // b * heads_kv + h_kv
  const int64_t b = kv_bh / p.heads_kv, h_kv = kv_bh % p.heads_kv;
  const int slice = p.group / p.split;  // the query heads this block walks, from head0 on
  const int64_t head0 = h_kv * p.group + (unit % p.split) * slice;
  const int64_t k0 = (tile_bh % p.n_tiles) * kKeys;

  // The offset table: sequence b's first rows in the packed slabs and its lengths. The grid is
  // sized for the longest sequence; a key tile past this one's keys has nothing to do (the whole
  // block leaves, before any barrier).
  const int64_t cu_q = p.cu_seqlens_q[b], cu_k = p.cu_seqlens_k[b];
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - cu_q, seq_k = p.cu_seqlens_k[b + 1] - cu_k;
  if (k0 >= seq_k) return;
  // The sequence's band: query i sees keys j with band.visible(i, j).
  fa::ch09::Band band = p.window;
  band.seq_q = seq_q;
  band.seq_k = seq_k;

  // (sequence b, K/V head h_kv): rows h_kv * total_k + cu_k of the packed [heads_kv, total_k, d]
  // K and V; a query head's rows head * total_q + cu_q of [heads, total_q, d] (q_row0). 64-bit.
  const int64_t k_row0 = h_kv * p.total_k + cu_k;
  // t19: rows of d elements in global memory (D in shared memory); D itself where kWholeRows.
  const int d = kWholeRows ? D : p.d;
  const T* K = static_cast<const T*>(p.k) + k_row0 * d;
  const T* V = static_cast<const T*>(p.v) + k_row0 * d;
  auto q_row0 = [&](int64_t head) { return head * p.total_q + cu_q; };

  // The Q tiles that can see this K tile: those holding the rows from the first that sees key
  // k0 to the last that sees key k0 + kKeys - 1; every tile outside is entirely masked and
  // skipped. Empty (qt_begin >= qt_end) when no row sees any key of the tile.
  const fa::ch09::TileRange q_tiles = fa::ch09::query_tiles(band, k0, k0 + kKeys, kBrT);
  const int64_t qt_begin = q_tiles.begin, qt_end = q_tiles.end;

  // t20's walk over the block's query heads: iteration it is Q tile qt_begin + it % n_per of
  // query head head0 + it / n_per.
  const int n_per = qt_begin < qt_end ? int(qt_end - qt_begin) : 0;
  const int n_iter = n_per * slice;
  auto head_of = [&](int it) { return head0 + it / n_per; };
  auto row_of = [&](int it) { return (qt_begin + it % n_per) * kBrT; };

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_rows_of_d<T, D, kKeys, kAnyLength>(sK, K, k0, seq_k, d, tid);
  load_rows_of_d<T, D, kKeys, kAnyLength>(sV, V, k0, seq_k, d, tid);
  if (n_iter > 0) {
    const int64_t q0 = row_of(0), r0 = q_row0(head_of(0));
    load_rows_of_d<T, D, kBrT, kAnyLength>(sQ, static_cast<const T*>(p.q) + r0 * d, q0, seq_q, d,
                                           tid);
    load_rows_of_d<T, D, kBrT, kAnyLength>(sdO, static_cast<const T*>(p.dout) + r0 * d, q0, seq_q,
                                           d, tid);
    const int64_t row = q0 + (tid & (kBrT - 1));
    if (tid < kBrT)
      sL[tid] = load_l2(p.lse + r0, row, seq_q);
    else if (tid < 2 * kBrT)
      sD[tid - kBrT] = row < seq_q ? p.delta[r0 + row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  // The three warp layouts.
  constexpr int kWnShift = 2;  // warp / kWn as a shift
  static_assert(kWn == 1 << kWnShift, "kWn: 4");
  const int wm = warp >> kWnShift, wn = warp & (kWn - 1);  // S, dP: queries 32 wm, keys kKw wn
  // dK, dV: keys 32 wk .., columns kHalf wd ..
  const int wk = warp & (kKeyWarps - 1), wd = warp >> kKeyShift;
  const int wq = wm, wc = wn;  // dQ: queries 32 wq .., columns kQuarter wc ..

  float dv[2][kHalf / 8][4], dk[2][kHalf / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][nt][e] = dk[mt][nt][e] = 0.0f;

  // Every address of the loop as a base plus a compile-time offset; the swizzled tiles' reads
  // then flip bits 4-6 (swz_addr). Q and dO have one buffer each (t18).
  // ldmatrix forms (lane_rows, lane_trans): A = tile, rows (lane_rows); B = tile^T (lane_trans);
  // A = tile^T, .trans (lane_trans); B = tile, .trans (lane_rows).
  const uint32_t swz = swizzle_xor(lane);
  const uint32_t rows_d = lane_rows<D>(lane), trans_d = lane_trans<D>(lane);
  const uint32_t q_a = smem_addr(sQ) + rows_d + at<D>(32 * wm, 0);        // S: A = Q
  const uint32_t do_a = smem_addr(sdO) + rows_d + at<D>(32 * wm, 0);      // dP: A = dO
  const uint32_t k_b = smem_addr(sK) + trans_d + at<D>(kKw * wn, 0);      // S: B = K^T
  const uint32_t v_b = smem_addr(sV) + trans_d + at<D>(kKw * wn, 0);      // dP: B = V^T
  const uint32_t do_x = smem_addr(sdO) + rows_d + at<D>(0, kHalf * wd);   // dV: B = dO
  const uint32_t q_x = smem_addr(sQ) + rows_d + at<D>(0, kHalf * wd);     // dK: B = Q
  const uint32_t k_x = smem_addr(sK) + rows_d + at<D>(0, kQuarter * wc);  // dQ: B = K
  const uint32_t p_at = smem_addr(sP) + lane_trans<kLdP64>(lane) + at<kLdP64>(0, 32 * wk);  // P^T
  const uint32_t ds_at =
      smem_addr(sdS) + lane_trans<kLdP64>(lane) + at<kLdP64>(0, 32 * wk);                   // dS^T
  const uint32_t ds_a = smem_addr(sdS) + lane_rows<kLdP64>(lane) + at<kLdP64>(32 * wq, 0);  // dS
  // Where this thread stores its P and dS elements: row 32 wm + g, columns kKw wn + 2t.
  T* const p_st = sP + (32 * wm + g) * kLdP64 + kKw * wn + 2 * t;
  T* const ds_st = sdS + (32 * wm + g) * kLdP64 + kKw * wn + 2 * t;

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;         // L and D: two buffers
    const int64_t q0 = row_of(it);  // t20: this iteration's tile and head
    float* const dQacc = p.dq_accum + q_row0(head_of(it)) * d;
    const bool has_next = it + 1 < n_iter;
    // t20: the next iteration's tile and head (its L, D now; its Q, dO after dK += dS^T Q).
    const int64_t q1 = has_next ? row_of(it + 1) : 0, r1 = has_next ? q_row0(head_of(it + 1)) : 0;

    // One barrier for two things. Tile i is the only copy in flight here; once every warp has
    // it, every warp is also done with tile i - 1: P, dS, L and D.
    fa::mma::cp_async_wait<0>();
    __syncthreads();

    // L and D of the next tile go through registers, stored after the math so their latency
    // hides behind it (t18: its Q and dO come after dK += dS^T Q, below).
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t row = q1 + (tid & (kBrT - 1));
      if (tid < kBrT)
        next_ld = load_l2(p.lse + r1, row, seq_q);
      else if (tid < 2 * kBrT)
        next_ld = row < seq_q ? p.delta[r1 + row] : 0.0f;
    }

    const float* l_s = sL + buf * kBrT;
    const float* d_s = sD + buf * kBrT;
    // Mask only where needed: rows past seq_q or keys past seq_k, or a tile crossed by an edge
    // of the band (some pair of it lies outside the window).
    const bool need_mask = fa::ch09::tile_needs_mask(band, q0, q0 + kBrT, k0, k0 + kKeys);

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
        // The keys row q0 + row sees: band.visible(i, j) is first_key(i) <= j <= last_key(i),
        // here as columns from this thread's first key k0 + kKw wn + 2t, once per row; the
        // elements then compare 32-bit columns.
        int first = 0, last = kKw;
        if (need_mask) {
          const int64_t key0 = k0 + kKw * wn + 2 * t;
          first = clamp_cols(band.first_key(q0 + row) - key0, kKw);
          last = clamp_cols(band.last_key(q0 + row) - key0, kKw);
        }
#pragma unroll
        for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = 2 * h + c;
            float pv = ex2_ftz(fmaf(s[mt][nt][e], p.scale_log2, -l2));
            if (need_mask && (8 * nt + c < first || 8 * nt + c > last)) pv = 0.0f;
            s[mt][nt][e] = pv;
            dp[mt][nt][e] = pv * (dp[mt][nt][e] - dd);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int o = (16 * mt + 8 * h) * kLdP64 + 8 * nt;
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
    keys_times_cols<T, D, kBrT, kHalf, true, kLdP64>(dv, p_at, do_x, swz);  // dV += P^T dO
    keys_times_cols<T, D, kBrT, kHalf, true, kLdP64>(dk, ds_at, q_x, swz);  // dK += dS^T Q

    // t18: this tile's last reads of Q and dO were the two products above; once every warp is
    // past them, the next tile's copies go into the one buffer, under dQ and its atomics.
    if (has_next) {  // block-uniform: the barrier is safe
      __syncthreads();
      load_rows_of_d<T, D, kBrT, kAnyLength>(sQ, static_cast<const T*>(p.q) + r1 * d, q1, seq_q, d,
                                             tid);
      load_rows_of_d<T, D, kBrT, kAnyLength>(sdO, static_cast<const T*>(p.dout) + r1 * d, q1, seq_q,
                                             d, tid);
      fa::mma::cp_async_commit();
    }

    // dQaccum_i += dS K_j: 32 queries x kQuarter columns per warp, k over the kKeys keys.
    if (q0 + 32 * wq < seq_q) {  // else every row of this warp lies past seq_q
      float acc[2][kQuarter / 8][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kQuarter / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      keys_times_cols<T, D, kKeys, kQuarter, false, kLdP64>(acc, ds_a, k_x,
                                                            swz);  // dQ_i = dS K_j
      // Element (mt, nt, e): query row 32 wq + 16 mt + g + 8 (e / 2), column kQuarter wc + 8 nt
      // + 2t + e % 2. Rows past seq_q are skipped: they are the next sequence's rows of the
      // workspace; columns at or past d too (t19).
      const int64_t row0 = q0 + 32 * wq + g;
      float* const dst0 = dQacc + row0 * d + kQuarter * wc + 2 * t;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 16 * mt + 8 * h >= seq_q) continue;
#pragma unroll
          for (int nt = 0; nt < kQuarter / 8; ++nt) {
            float* const dst = dst0 + (16 * mt + 8 * h) * d + 8 * nt;
            const int col = kQuarter * wc + 8 * nt + 2 * t;
            if constexpr (kAnyLength) {  // t21: rows not 8-byte aligned: one float at a time
              if (col < d) atomicAdd(dst, acc[mt][nt][2 * h]);
              if (col + 1 < d) atomicAdd(dst + 1, acc[mt][nt][2 * h + 1]);
            } else if (col < d) {
              add_dq(dst, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
            }
          }
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

  // Keys that no query sees (outside every row's window, or seq_q = 0) leave here with dK =
  // dV = 0, as they must; rows past seq_k and columns past d are not written. t20: the sums over
  // the walked heads, into the block's K/V head; t22: parts, added into the buffer.
  if (p.split == 1) {
    T* dK = static_cast<T*>(p.dk) + k_row0 * d;
    T* dV = static_cast<T*>(p.dv) + k_row0 * d;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int64_t r0 = k0 + 32 * wk + 16 * mt;
      store_rows_of_d<T, kHalf, kAnyLength>(dK, dk[mt], r0, kHalf * wd, seq_k, p.scale, d, lane);
      store_rows_of_d<T, kHalf, kAnyLength>(dV, dv[mt], r0, kHalf * wd, seq_k, 1.0f, d, lane);
    }
  } else {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int64_t r0 = k0 + 32 * wk + 16 * mt;
      add_rows_of_d<kHalf>(p.dk_parts + k_row0 * d, dk[mt], r0, kHalf * wd, seq_k, d, kAnyLength,
                           lane);
      add_rows_of_d<kHalf>(p.dv_parts + k_row0 * d, dv[mt], r0, kHalf * wd, seq_k, d, kAnyLength,
                           lane);
    }
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
  p.scale = scale;
  p.scale_log2 = p.scale * kLog2e;
  p.window = fa::ch09::Band::make(0, 0, s.causal, s.window_left, s.window_right);
  p.d = int(s.head_dim);
  p.heads_kv = s.kv_heads();
  p.group = p.heads_kv > 0 ? int(s.heads / p.heads_kv) : 1;

  // Key tiles of the longest sequence, for every (sequence, K/V head, part); shorter sequences'
  // blocks past their keys return at once.
  const int64_t n_kt = ceil_div(s.max_seq_k(), kKeys);
  constexpr int kSmem = smem_bytes();
  const auto kernel = p.d == D       ? warp_tiles_kernel<T, D, false, true>
                      : p.d % 8 == 0 ? warp_tiles_kernel<T, D, false, false>
                                     : warp_tiles_kernel<T, D, true, false>;
  const int64_t slots =
      p.d == D       ? resident_blocks<warp_tiles_kernel<T, D, false, true>, kSmem>(kThreads)
      : p.d % 8 == 0 ? resident_blocks<warp_tiles_kernel<T, D, false, false>, kSmem>(kThreads)
                     : resident_blocks<warp_tiles_kernel<T, D, true, false>, kSmem>(kThreads);

  // t22's split (group_split.cuh): causal, a block per query head; full attention, t20's walk of
  // the whole group unless that grid leaves the GPU's resident blocks idle (full_split). The dK
  // and dV parts zeroed in a stream-ordered buffer, kept until they are converted, below.
  const int64_t kv_n = s.k_numel();
  const GroupSplit split(s.causal, p.group, n_kt * s.batch() * p.heads_kv, slots, a.dk, a.dv, kv_n,
                         stream);
  p.split = split.split();
  p.dk_parts = split.dk_parts();
  p.dv_parts = split.dv_parts();
  const int64_t blocks = n_kt * s.batch() * p.heads_kv * p.split;
  FA_REQUIRE(blocks <= INT32_MAX, "batch * heads_kv * split * key tiles must fit in gridDim.x");
  FA_REQUIRE(ceil_div(s.max_seq_q(), kBr) * p.group <= INT32_MAX,
             "a block's Q tiles over its group must fit in an int");

  if (blocks > 0) {
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    kernel<<<static_cast<unsigned>(blocks), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace): groups
  // of four, then t21's last 1-3 elements; t22: dK = scale * (sum of the parts), dV = the sum, by
  // the same conversion.
  auto convert = [&](const float* acc, void* out, int64_t n, float mul) {
    const int64_t n4 = n / 4;
    if (n4 > 0) {
      constexpr int kConvThreads = 256;
      const int64_t conv_blocks = std::min<int64_t>(ceil_div(n4, kConvThreads), int64_t(1) << 20);
      convert_dq_kernel<T><<<static_cast<unsigned>(conv_blocks), kConvThreads, 0, stream>>>(
          acc, static_cast<T*>(out), n4, mul);
      FA_CHECK_LAUNCH();
    }
    if (const int tail = int(n - 4 * n4); tail > 0) {
      convert_dq_tail_kernel<T><<<1, 4, 0, stream>>>(acc, static_cast<T*>(out), 4 * n4, tail, mul);
      FA_CHECK_LAUNCH();
    }
  };
  convert(a.workspace, a.dq, s.q_numel(), p.scale);
  if (p.split > 1) {
    convert(p.dk_parts, a.dk, kv_n, p.scale);
    convert(p.dv_parts, a.dv, kv_n, 1.0f);
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

void run_d256(const fa::VarlenBwdArgs& a, cudaStream_t stream) {
  // 147 KiB per block: an H100 (227 KiB) or an A100 (163 KiB) has it, sm_86/89 (99 KiB) not.
  // Refuse before anything runs, rather than fail in cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(smem_bytes());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(a.shape.head_dim) +
                        " (computed at 256) needs " + std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  fa::ch09::require_rows_of_d_bwd_args(a, kName);
  const fa::VarlenShape& s = a.shape;

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream), over the packed layout:
  // one sequence of total_q queries per head (delta_preprocess.cuh).
  fa::delta_preprocess_launch_packed(a.o, a.dout, a.delta, s, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  const float scale = s.sequence(0).softmax_scale();
  if (a.dtype == fa::DType::BF16)
    launch<__nv_bfloat16, kD256>(a, scale, stream);
  else
    launch<__half, kD256>(a, scale, stream);
}

void varlen_bwd_v8(const fa::VarlenBwdArgs& a, cudaStream_t stream) {
  const fa::VarlenShape& s = a.shape;
  const int64_t d = s.head_dim;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.heads_kv < 0 || (s.kv_heads() > 0 && s.heads % s.kv_heads() != 0),
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(d <= 0 || d > kD256, std::string(kName) +
                                             ": takes the head dims up to 256, computed at 256; "
                                             "not " +
                                             std::to_string(d));
  run_d256(a, stream);
}

}  // namespace

FA_REGISTER(VarlenBwdKernel,
            {kName,
             varlen_bwd_v8,
             "bwd_v5 with grouped K/V heads as bwd_v6 takes them: a block walks query heads of "
             "its K/V head (causal: one each, the dK and dV parts added by atomics)",
             {fa::DType::BF16, fa::DType::F16},
             {256},
             /*min_sm=*/80,
             /*window=*/true,
             /*deterministic=*/false,
             /*forward=*/"09/v4_window_any_head_dim",
             /*rounds_head_dim=*/true,
             /*gqa=*/true,
             /*head_dim_step=*/1});
FA_REGISTER_SMEM(kName,
                 [](int d) { return fa::smem_at<256>(d, [](auto) { return smem_bytes(); }); });
