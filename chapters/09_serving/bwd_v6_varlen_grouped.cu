// bwd_v6_varlen_grouped.cu: 09/bwd_v3_varlen_any_head_dim with grouped K/V heads (GQA, MQA) as
// chapter 06's tuning steps t20 and t22 take them: a packed batch's backward at every head dim up
// to 128 where heads_kv K/V heads serve the heads query heads, query head h reading K/V head
// h / group, without a repeated copy of K and V. bf16 / fp16 in, mma.sync m16n8k16, fp32
// accumulate, any GPU from sm_80. Not bitwise deterministic (dQ, and dK, dV where split, by
// atomics). O and L come from 09/v3_varlen_any_head_dim, which takes grouped heads.
//
// Why. Before sm_90 no packed backward took grouped heads: the Python operator repeated K and V
// over the group in memory (group times their bytes), ran bwd_v3 or bwd_v1 and summed each
// group's dK and dV in another pass. On Hopper 09/hopper_bwd_v1_varlen walks the group itself.
//
// What changed vs bwd_v3: chapter 06's t16 -> t20 -> t22 lines, on bwd_v3.
//   * The grid: (key tile, sequence x heads_kv x split): a block's K, V (and its dK, dV) are those
//     of K/V head h_kv of sequence b, rows h_kv * total_k + cu_seqlens_k[b] of the packed
//     [heads_kv, total_k, d] slabs.
//   * t20's walk: the loop over Q tiles runs over query heads too, iteration it being Q tile
//     qt_begin + it % n_per of query head head0 + it / n_per (rows head * total_q +
//     cu_seqlens_q[b]); Q, dO, L, D and the dQ accumulator move to the iteration's head, the
//     prefetch reads the next iteration's. dK and dV sum over the heads in registers.
//   * t22's split: under the causal mask each query head has its own block (split = group), so the
//     grid is bwd_v3's, and the blocks' dK and dV are parts, added (unscaled, fp32) by atomics
//     into a buffer of the K/V heads' size and converted after; full attention walks the whole
//     group in one block (split 1) and stores dK and dV as bwd_v3 does, unless that grid leaves
//     the GPU's resident blocks idle (t22's full_split: few K/V heads and key tiles).
// At heads_kv == heads every line runs bwd_v3's work.
//
// 06/t17's pieces come from common/device/mma_bwd_t17.cuh, as in bwd_v3; t22's (the parts' atomic
// add, the choice of the split and its buffer) from common/device/group_split.cuh.
//
// Speed (H200, 2026-12-05; README.md): grouped 0.996-1.008x its MHA time per query head at H_kv
// 8, 4, 1, D 128; MHA at D 128 144.8-209.2 TFLOP/s on fa_bench's packed batches. Full attention
// at N 4096 and 8192 (H100, 2026-12-06): 0.987-1.005x, MQA at N 4096 included (1.96x before the
// full split).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ch09_bwd_args.h"
#include "check.h"
#include "delta_preprocess.cuh"
#include "group_split.cuh"
#include "gpu.h"
#include "mma.cuh"
#include "attention_tiles.cuh"
#include "mma_bwd_t17.cuh"
#include "registry.h"

namespace {

constexpr const char* kName = "09/bwd_v6_varlen_grouped";  // the registered name

using fa::causal_last_key;
using fa::ceil_div;
using fa::ch06::t22::add_rows_of_d;  // t22's pieces (group_split.cuh)
using fa::ch06::t22::GroupSplit;
using fa::ch06::t22::resident_blocks;
using fa::mma::ldmatrix_x4;
using fa::mma::ldmatrix_x4_trans;
using fa::mma::smem_addr;
using namespace fa::ch06::
    t17;  // 06/t17's tiles, loader, block, stores, dQ conversion (mma_bwd_t17.cuh)

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fp32 [heads][total_q][d], zero on entry (the caller's workspace)
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
  bool causal;
  int d;  // t16: the real head dim, the length of a row in global memory (<= D)
};

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(Params p) {
  constexpr int kChunk = kBr;  // S^T and dP^T for the whole Q tile at once
  constexpr int kLd = D + kPad;
  constexpr int kTile = kBr * kLd;    // a Q or dO tile (kBr rows)
  constexpr int kKvTile = kBc * kLd;  // a K or V tile (kBc rows: twice v3's)
  // The K, V, Q and dO tiles hold swizzled rows of kLdT = D elements (swizzled_offset) where a
  // row is whole 128-byte groups (D 64, 128); each keeps the place and size of a padded tile (its
  // last kPad * rows elements unused), and every tile starts at a multiple of 128 bytes. D 32 and
  // 96 keep padded rows.
  constexpr bool kSwz = D % 64 == 0;
  constexpr int kLdT = kSwz ? D : kLd;  // elements between rows inside a tile
  static_assert(!kSwz || (kTile * 2) % 128 == 0 && (kKvTile * 2) % 128 == 0, "aligned tiles");
  // Two arrays, one per alignment: one name declared with both (D 32/96 and D 64/128 in one
  // translation unit) is one array with the first alignment (nvcc warning 1886), and the PTX of
  // the swizzled kernel would not ask for the 128-byte base its tiles rely on.
  extern __shared__ __align__(16) unsigned char smem_padded[];
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sK = reinterpret_cast<T*>(kSwz ? smem_swizzled : smem_padded);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                               // two buffers of kBr: D
  T* sdS = reinterpret_cast<T*>(sD + 2 * kBr);            // dS^T: kBc keys x kBr queries

  // dQ in warp tiles of kDqRt m16 tiles (kDqRowTiles).
  constexpr int kDqRt = kDqRowTiles<D>;
  constexpr int kDqWc = kDqWarpCols<D>, kDqC = kDqChunk<D>;
  static_assert(kDqWc % kDqC == 0, "dQ chunks");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // ((b * heads_kv + h_kv) * split + part) * n_tiles + tile
  const int64_t unit = tile_bh / p.n_tiles;  // (sequence, K/V head, part)
  const int64_t kv_bh = unit / p.split;      // b * heads_kv + h_kv
  const int64_t b = kv_bh / p.heads_kv, h_kv = kv_bh % p.heads_kv;
  const int slice = p.group / p.split;  // the query heads this block walks, from head0 on
  const int64_t head0 = h_kv * p.group + (unit % p.split) * slice;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;

  // The offset table: sequence b's first rows in the packed slabs and its lengths. The grid is
  // sized for the longest sequence; a key tile past this one's keys has nothing to do (the whole
  // block leaves, before any barrier).
  const int64_t cu_q = p.cu_seqlens_q[b], cu_k = p.cu_seqlens_k[b];
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - cu_q, seq_k = p.cu_seqlens_k[b + 1] - cu_k;
  if (k0 >= seq_k) return;
  // Causal (bottom-right): query i sees keys j <= causal_last_key(i) = i + off (shapes.h).
  const int64_t off = causal_last_key(0, seq_q, seq_k);

  // (sequence b, K/V head h_kv): rows h_kv * total_k + cu_k of the packed [heads_kv, total_k, d]
  // K and V; a query head's rows head * total_q + cu_q of [heads, total_q, d] (q_row0). 64-bit.
  const int64_t k_row0 = h_kv * p.total_k + cu_k;
  const int d = p.d;  // rows of d elements in global memory
  const T* K = static_cast<const T*>(p.k) + k_row0 * d;
  const T* V = static_cast<const T*>(p.v) + k_row0 * d;
  auto q_row0 = [&](int64_t head) { return head * p.total_q + cu_q; };

  // The Q tiles that can see this K tile: with causal masking the first query to see key k0 is
  // k0 - off; every tile before the one holding it is entirely masked and skipped.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBr;  // may be >= n_qt: no work

  // t20's walk over the block's query heads: iteration it is Q tile qt_begin + it % n_per of
  // query head head0 + it / n_per.
  const int n_per = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;
  const int n_iter = n_per * slice;
  auto head_of = [&](int it) { return head0 + it / n_per; };
  auto row_of = [&](int it) { return (qt_begin + it % n_per) * kBr; };

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_tile_async<T, D, kBc, kThreads, kSwz>(sK, K, k0, seq_k, d, tid);
  load_tile_async<T, D, kBc, kThreads, kSwz>(sV, V, k0, seq_k, d, tid);
  if (n_iter > 0) {
    const int64_t q0 = row_of(0), r0 = q_row0(head_of(0));
    load_tile_async<T, D, kBr, kThreads, kSwz>(sQ, static_cast<const T*>(p.q) + r0 * d, q0, seq_q,
                                               d, tid);
    load_tile_async<T, D, kBr, kThreads, kSwz>(sdO, static_cast<const T*>(p.dout) + r0 * d, q0,
                                               seq_q, d, tid);
    const int64_t row = q0 + (tid & (kBr - 1));
    if (tid < kBr)
      sL[tid] = load_l2(p.lse + r0, row, seq_q);
    else if (tid < 2 * kBr)
      sD[tid - kBr] = row < seq_q ? p.delta[r0 + row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  float dv[D / 8][4], dk[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[nt][e] = dk[nt][e] = 0.0f;

  const int kr0 = warp * 16;                           // this warp's first key row in the tile
  const int qr0 = (warp % kDqRowWarps<D>)*16 * kDqRt;  // its first query row, for dQ,
  const int dq0 = (warp / kDqRowWarps<D>)*kDqWc;       // and its first column of dQ

  // The bases of every address in the loop, computed once. ldmatrix: K, V as A of S^T, dP^T
  // (this warp's rows); K as B of dQ (.trans, this warp's columns); Q, dO as B in both forms
  // (buffer 0; a tile adds its buffer's offset); dS^T as A of dQ (.trans, this warp's query
  // rows). The store of dS^T (rows kr0 + g, + 8; columns 2t, 2t + 1). The Q / dO copy plan.
  // Each ldmatrix base is a LaneAddr: padded, one base, and a read adds a constant. Swizzled:
  // every ldmatrix row of this lane is lane % 8 modulo 8 (fragments start at multiples of 16
  // rows), so the lane's address is the unswizzled one with bits 4-6 flipped by swz; four bases,
  // one per 16-column step modulo 4, keep every read a base plus a constant (LaneAddr says why).
  constexpr uint32_t kTileBytes = kTile * 2;
  const uint32_t swz = swizzle_xor(lane);
  using Lane = LaneAddr<kSwz>;
  const uint32_t rows_off = lane_rows<kLdT>(lane), trans_off = lane_trans<kLdT>(lane);
  const Lane k_a(smem_addr(sK) + rows_off + at<kLdT>(kr0, 0), swz);
  const Lane v_a(smem_addr(sV) + rows_off + at<kLdT>(kr0, 0), swz);
  const Lane k_x(smem_addr(sK) + rows_off + at<kLdT>(0, dq0), swz);
  const Lane q_t0(smem_addr(sQ) + trans_off, swz), q_x0(smem_addr(sQ) + rows_off, swz);
  const Lane do_t0(smem_addr(sdO) + trans_off, swz), do_x0(smem_addr(sdO) + rows_off, swz);
  const uint32_t ds_t = smem_addr(sdS) + lane_trans<kLdS>(lane) + at<kLdS>(0, qr0);
  T* const ds_st = sdS + (kr0 + g) * kLdS + 2 * t;
  const TileCopy<T, D, kSwz> copy(tid, d);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    const int64_t q0 = row_of(it);  // t20: this iteration's tile and head
    float* const dQacc = p.dq_accum + q_row0(head_of(it)) * d;
    const bool has_next = it + 1 < n_iter;

    // Prefetch Q_{i+1}, dO_{i+1} into the other buffer (always commit: an empty group keeps the
    // wait<1> below correct on the last tile). L and D go through registers, stored after the
    // math so their latency hides behind it.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = row_of(it + 1), r1 = q_row0(head_of(it + 1));  // t20: the next head's
      const T* Q = static_cast<const T*>(p.q) + r1 * d;
      const T* dO = static_cast<const T*>(p.dout) + r1 * d;
      if (q1 + kBr <= seq_q && d % 8 == 0) {  // a full tile: the plan, no bounds test
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * d);
        copy.full(sdo_addr + next, dO + q1 * d);
      } else {  // the sequence ends inside it (rows past seq_q zero-filled), or t17's rows
        load_tile_async<T, D, kBr, kThreads, kSwz>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, d, tid);
        load_tile_async<T, D, kBr, kThreads, kSwz>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, d, tid);
      }
      const int64_t row = q1 + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(p.lse + r1, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? p.delta[r1 + row] : 0.0f;
    }
    fa::mma::cp_async_commit();
    fa::mma::cp_async_wait<1>();
    __syncthreads();

    const uint32_t cur = uint32_t(buf) * kTileBytes;
    const Lane q_t(q_t0, cur), q_x(q_x0, cur), do_t(do_t0, cur), do_x(do_x0, cur);
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
        ldmatrix_x4(a, k_a.at(0, ks));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, q_t.at(at<kLdT>(c0 + np * 16, 0), ks));
          mma_pair<T>(s[2 * np], s[2 * np + 1], a, b);
        }
      }

      // P^T = exp(scale S^T - L), masked where needed: need_mask is tested once per chunk, and
      // tiles that need no mask run the exponentials alone. Element (nt, e): key row kr0 + g +
      // 8*(e/2), query column c0 + 8*nt + 2t + e%2.
      if (need_mask) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c0 + nt * 8 + 2 * t + (e & 1);
            const int64_t key = k0 + kr0 + g + 8 * (e >> 1);
            const int64_t query = q0 + col;
            const bool keep = key < seq_k && !(p.causal && key > query + off);
            s[nt][e] = keep ? ex2_ftz(fmaf(s[nt][e], p.scale_log2, -l_s[col])) : 0.0f;
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[nt][e] = ex2_ftz(fmaf(s[nt][e], p.scale_log2, -l_s[c0 + nt * 8 + 2 * t + (e & 1)]));
      }

      // dV_j += P^T dO: k runs over the chunk's queries, 16 at a time.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, do_x.at(at<kLdT>(c0 + kk * 16, 0), np));
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
        ldmatrix_x4(a, v_a.at(0, ks));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, do_t.at(at<kLdT>(c0 + np * 16, 0), ks));
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
          ldmatrix_x4_trans(b, q_x.at(at<kLdT>(c0 + kk * 16, 0), np));
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
        }
      }
    }

    // dQaccum_i += dS K_j: warp w takes query rows qr0 .. qr0 + 16 kDqRt - 1 and columns dq0 ..
    // dq0 + kDqWarpCols - 1, A = dS = sdS^T (all kBc keys, written by the eight warps), B = K_j;
    // kDqCols columns at a time; each B fragment feeds the kDqRt m-tiles.
    __syncthreads();         // sdS complete
    if (q0 + qr0 < seq_q) {  // else every row of this warp lies past seq_q
#pragma unroll
      for (int dc = 0; dc < kDqWc / kDqC; ++dc) {
        const int n0 = dq0 + dc * kDqC;  // first column of the chunk
        float acc[kDqRt][kDqC / 8][4];
#pragma unroll
        for (int mt = 0; mt < kDqRt; ++mt)
#pragma unroll
          for (int nt = 0; nt < kDqC / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kBc / 16; ++ks) {
          uint32_t a[kDqRt][4];
#pragma unroll
          for (int mt = 0; mt < kDqRt; ++mt)
            ldmatrix_x4_trans(a[mt], ds_t + at<kLdS>(ks * 16, mt * 16));
#pragma unroll
          for (int np = 0; np < kDqC / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, k_x.at(at<kLdT>(ks * 16, 0), dc * kDqC / 16 + np));
#pragma unroll
            for (int mt = 0; mt < kDqRt; ++mt)
              mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b);
          }
        }
        // Element (mt, nt, e): query row qr0 + 16 mt + g + 8*(e/2), column n0 + 8*nt + 2t + e%2.
#pragma unroll
        for (int mt = 0; mt < kDqRt; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t row = q0 + qr0 + 16 * mt + g + 8 * h;
            if (row >= seq_q) continue;
            float* dst = dQacc + row * d + n0 + 2 * t;
#pragma unroll
            for (int nt = 0; nt < kDqC / 8; ++nt) {
              if (n0 + 8 * nt >= d) break;  // rows of d: the zero columns past it are not added
              if (d % 8 != 0) {  // t17: rows not 8-byte aligned: one float at a time, below d
                const int col = n0 + 8 * nt + 2 * t;
                if (col < d) atomicAdd(dst + 8 * nt, acc[mt][nt][2 * h]);
                if (col + 1 < d) atomicAdd(dst + 8 * nt + 1, acc[mt][nt][2 * h + 1]);
                continue;
              }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
              // sm_90 adds a float2 in one atomic (the two columns are adjacent and 8-byte
              // aligned: 2t is even): half the atomic instructions and L2 sector updates of two
              // scalar ones (Nsight Compute, H100: 1.61 G reduction sectors with scalar atomics).
              atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                        make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
#else
              atomicAdd(dst + 8 * nt, acc[mt][nt][2 * h]);
              atomicAdd(dst + 8 * nt + 1, acc[mt][nt][2 * h + 1]);
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

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must. t20: the
  // sums over the walked heads, into the block's K/V head; t22: parts, added into the buffer.
  if (p.split == 1) {
    T* dK = static_cast<T*>(p.dk) + k_row0 * d;
    T* dV = static_cast<T*>(p.dv) + k_row0 * d;
    store_rows<T, D, D>(dK, dk, k0 + kr0, 0, seq_k, p.scale, d, lane);
    store_rows<T, D, D>(dV, dv, k0 + kr0, 0, seq_k, 1.0f, d, lane);
  } else {
    add_rows_of_d<D>(p.dk_parts + k_row0 * d, dk, k0 + kr0, 0, seq_k, d, d % 8 != 0, lane);
    add_rows_of_d<D>(p.dv_parts + k_row0 * d, dv, k0 + kr0, 0, seq_k, d, d % 8 != 0, lane);
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
  p.causal = s.causal;
  p.d = int(s.head_dim);
  p.heads_kv = s.kv_heads();
  p.group = p.heads_kv > 0 ? int(s.heads / p.heads_kv) : 1;

  // Key tiles of the longest sequence, for every (sequence, K/V head, part); shorter sequences'
  // blocks past their keys return at once.
  const int64_t n_kt = ceil_div(s.max_seq_k(), kBc);
  constexpr int kSmem = dkdv_smem_bytes<D>();
  const int64_t slots = resident_blocks<dkdv_kernel<T, D>, kSmem>(kThreads);

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
    FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    dkdv_kernel<T, D><<<static_cast<unsigned>(blocks), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace); t22:
  // dK = scale * (sum of the parts), dV = the sum, by the same conversion.
  constexpr int kConvThreads = 256;
  auto convert = [&](const float* acc, void* out, int64_t n, float mul) {
    if (n <= 0) return;
    const int64_t blocks = std::min<int64_t>(ceil_div(n / 4 + 1, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        acc, static_cast<T*>(out), n, mul);
    FA_CHECK_LAUNCH();
  };
  convert(a.workspace, a.dq, s.q_numel(), p.scale);
  if (p.split > 1) {
    convert(p.dk_parts, a.dk, kv_n, p.scale);
    convert(p.dv_parts, a.dv, kv_n, 1.0f);
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <int D>
void run_head_dim(const fa::VarlenBwdArgs& a, cudaStream_t stream) {
  // 155 KiB per block at D = 128: an H100 (227 KiB) or an A100 (163 KiB) has it, sm_86/89
  // (99 KiB) not. Refuse before anything runs, rather than fail in cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(dkdv_smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  fa::ch09::require_rows_of_d_bwd_args(a, kName);
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

// t17: every head dim up to 128, at the next instance (06/v4's header says why not 256).
void varlen_bwd_v6(const fa::VarlenBwdArgs& a, cudaStream_t stream) {
  const fa::VarlenShape& s = a.shape;
  const int64_t d = s.head_dim;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.heads_kv < 0 || (s.kv_heads() > 0 && s.heads % s.kv_heads() != 0),
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(s.window_left >= 0 || (!s.causal && s.window_right >= 0),
                    std::string(kName) + " has no sliding window");
  FA_UNSUPPORTED_IF(d <= 0 || d > 128, std::string(kName) +
                                           " takes every head dim from 1 to 128 (rounded up to "
                                           "32, 64, 96 or 128); not " +
                                           std::to_string(d));
  if (d <= 32) return run_head_dim<32>(a, stream);
  if (d <= 64) return run_head_dim<64>(a, stream);
  if (d <= 96) return run_head_dim<96>(a, stream);
  return run_head_dim<128>(a, stream);
}

}  // namespace

FA_REGISTER(VarlenBwdKernel,
            {kName,
             varlen_bwd_v6,
             "bwd_v3 with grouped K/V heads as 06/t20 and t22 take them: a block walks query "
             "heads of its K/V head (causal: one each, the dK and dV parts added by atomics)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             /*min_sm=*/80,
             /*window=*/false,
             /*deterministic=*/false,
             /*forward=*/"09/v3_varlen_any_head_dim",
             /*rounds_head_dim=*/true,
             /*gqa=*/true,
             /*head_dim_step=*/1});
FA_REGISTER_SMEM(kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128>(d,
                                      [](auto D) { return dkdv_smem_bytes<decltype(D)::value>(); });
});
