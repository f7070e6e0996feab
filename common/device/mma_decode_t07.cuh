// mma_decode_t07.cuh: chapter 08's decoding kernel as the dispatch runs it,
// 08/t07_rounded_head_dims (08/v6_last_block_merge taking every head dim that is a multiple of 8 up
// to 128), as pieces a later rung calls instead of copying: the block's shape (one m16 tile of
// query rows, four warps of 16 keys each per 64-key step, two shared-memory stages), which
// (sequence, K/V head), row tile and split a block owns, each lane's rows and Q fragments, the
// ring's layout, one warp's 16-key step (S = Q K^T, the online softmax, O = alpha O + P V on
// mma.sync), the fold of the four warps' states (chapter 02's pair merge) into partials or O and
// L, the last block's fold of the splits, and the tile counters it counts on.
//
// Read them in 08/t07 first (chapters/08_decoding/tuning/t07_rounded_head_dims.cu), and the ideas
// in the rungs that introduce them (08/v3_mma_split: the split on tensor cores; v4: four warps on
// one K/V stream; v5: the swizzled ring; v6: the last block's merge): t07 carries its own copy, so
// that it reads top to bottom. Chapter 09's paged decode (09/paged_v1_decode) is t07 plus one idea
// (the ring's loader goes through the block table) and calls these pieces; what it keeps in its
// file is its table, its loader, its kernel and its launch. One thing here is not t07's: mma_rows
// and mma_keys take the sequence's length seq_k as a parameter where t07 reads p.seq_k (in a paged
// batch each sequence has its own). The paged decode compiles to the machine code it had when it
// carried a copy (the cubins' kernel sections compared for sm_80 and sm_90, CUDA 13.0).
//
// 08/t08_any_head_dim (t07 taking the head dims off the step of 8) adds one template flag,
// kAnyLength, to mma_rows, merge_warps and merge_splits (default false: t07's code), and the
// element-at-a-time stores and loads it needs (store_elements, load_elements); its element copies
// into the ring live in each loader, as t07's cp.async copies do. 09/paged_v4_decode_any_head_dim
// (t08 plus the block table) sets it. With the flag off every kernel that calls these pieces
// compiles to the machine code it had before the flag existed.
//
// The device pieces are in fa::ch08::t07 and take split_kv.cuh's Params (an anonymous namespace's:
// each module compiles its own); the tile counters, host code with a buffer, are in an anonymous
// namespace, so each module that includes this header has its own, as split_kv.cuh's workspace.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "online_softmax.cuh"   // Stats, merge, rescale: the pair merge (chapter 02)
#include "attention_tiles.cuh"  // the swizzle (fa::tiles::swizzled_offset, swizzle_xor)
#include "split_kv.cuh"         // Params, imin, kLn2
#include "buffer.h"
#include "check.h"
#include "mma.cuh"

namespace fa::ch08::t07 {

constexpr int kWarp = 32;      // threads per warp
constexpr int kTileRows = 16;  // query rows per block: one m16 tile
constexpr int kKeys = 16;      // keys per warp per step: two n8 tiles of S, one k16 slice of P V
constexpr int kWarps = 4;      // warps per block, each its own kKeys of every tile
constexpr int kThreads = kWarps * kWarp;  // threads per block
constexpr int kTile = kWarps * kKeys;     // keys per block per step: one 16 KB burst of K at D 128
constexpr int kStages = 2;                // shared-memory stages per block (one in flight)

struct MmaTile {
  int64_t split;   // which split of the keys
  int64_t r0;      // first row of the tile among the group * seq_q rows of the K/V head
  int64_t bkv;     // b * heads_kv + kv head
  int64_t b, kvh;  // sequence, K/V head
  int nrows;       // real rows in the tile (<= 16); the rest is padding
};

// Which (sequence, K/V head), row tile and split block `bid` owns (64-bit, as in v1).
__device__ __forceinline__ MmaTile mma_tile(const Params& p, int64_t bid) {
  MmaTile t;
  t.split = bid % p.num_splits;
  const int64_t rest = bid / p.num_splits;
  t.r0 = (rest % p.row_tiles) * kTileRows;
  t.bkv = rest / p.row_tiles;
  t.b = t.bkv / p.heads_kv;
  t.kvh = t.bkv % p.heads_kv;
  t.nrows = int(imin(kTileRows, p.rows_per_kv - t.r0));
  return t;
}

// This lane's two rows: r0 + r = i * group + gq is query i of query head kvh * group + gq, which
// sees keys up to last (seq_k: the sequence's length). Rows past the group's (padding) see no key
// (last = -1) and are never written. Then Q as A fragments, straight from global memory (mma.cuh:
// a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8,
// 2t+9] of each k16 slice), zero in padding rows, kept for the whole kernel (Q is read once, a few
// KB against megabytes of K/V). kAnyLength (08/t08, d no multiple of 8): a row may start at an
// odd element, and each of a pair's two elements is loaded alone.
template <class T, int D, bool kAnyLength = false>
__device__ __forceinline__ void mma_rows(const Params& p, const MmaTile& t, int64_t seq_k, int d,
                                         int g, int t4, int64_t (&out_row)[2], int64_t (&last)[2],
                                         uint32_t (&qf)[D / 16][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t rr = t.r0 + r;
    const int64_t i = rr / p.group, qh = t.kvh * p.group + rr % p.group;
    out_row[h] = (t.b * p.heads + qh) * p.seq_q + i;
    last[h] = r >= t.nrows ? -1 : p.causal ? i + (seq_k - p.seq_q) : seq_k - 1;
  }
  const T* q = static_cast<const T*>(p.q);
  const uint32_t* qrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    qrow[h] = g + 8 * h < t.nrows ? reinterpret_cast<const uint32_t*>(q + out_row[h] * d) : nullptr;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t* src = qrow[j & 1];
      const int col = kk * 16 + 8 * (j / 2) + 2 * t4;  // even: one 32-bit word, two elements
      if constexpr (kAnyLength) {
        const unsigned short* e = reinterpret_cast<const unsigned short*>(src);
        const uint32_t lo = e != nullptr && col < d ? __ldg(e + col) : 0u;
        const uint32_t hi = e != nullptr && col + 1 < d ? __ldg(e + col + 1) : 0u;
        qf[kk][j] = lo | hi << 16;
      } else {
        qf[kk][j] = src != nullptr && col < d ? __ldg(src + col / 2) : 0u;  // d even: pairs whole
      }
    }
}

// The block's keys [k_begin, k_end): its split, cut at the sequence's end (seq_k) and at the last
// key any of its rows sees. Empty (k_end <= k_begin) for a split past the sequence's end.
__device__ __forceinline__ void mma_keys(const Params& p, const MmaTile& t, int64_t seq_k,
                                         int64_t& k_begin, int64_t& k_end) {
  k_begin = t.split * p.split_len;
  k_end = imin(seq_k, k_begin + p.split_len);
  if (p.causal) {
    const int64_t last_i = (t.r0 + t.nrows - 1) / p.group;
    k_end = imin(k_end, last_i + (seq_k - p.seq_q) + 1);
  }
}

// The ring: kStages stages, each kRows keys of K in swizzled rows of D elements (no padding: 16-byte
// chunk c of row r at chunk c ^ (r % 8) of its 128-byte group, fa::tiles::swizzled_offset), then
// kRows of V.
template <int D, int kRows, int kStages>
struct Ring {
  static constexpr int kPitch = D;                                    // elements per row
  static constexpr int kStageElems = 2 * kRows * kPitch;              // K rows, then V rows
  static constexpr size_t kSmem = size_t(kStages) * kStageElems * 2;  // 16-bit elements
  static constexpr uint32_t kStageBytes = kStageElems * 2, kVBytes = kRows * kPitch * 2;
};

// 2 stages x (K + V) x 64 keys x D x 2 B = 65536 B at D 128: past the 48 KiB default, so
// the launcher opts in (sm_80 and later allow it).
template <int D>
using MmaLayout = Ring<D, kTile, kStages>;

// One step over keys [k0, k0 + 16) for the warp's 16 rows. k_ld and v_ld are this lane's 32-bit
// shared addresses (bytes) of its ldmatrix rows in the step's K and V tiles (rows of kPitch
// elements): K by ldmatrix x4 = keys 0-7 / 8-15 times columns 0-7 / 8-15 of a k16 slice
// (b of n8 tiles 0 and 1); V by ldmatrix x4 .trans = keys 0-7 / 8-15 times columns 0-7 / 8-15 of
// a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1). m (log2 units) and l are the running max
// and this lane's share of the running sum of its two rows; o the accumulator tiles.
// The tiles are swizzled: k_ld and v_ld are the addresses the lane would read without the
// swizzle, and each read goes to that address ^ swz (fa::tiles::swizzle_xor of the lane's rows,
// which all have the same row % 8).
template <class T, int D>
__device__ __forceinline__ void mma_step(const uint32_t (&qf)[D / 16][4], uint32_t k_ld,
                                         uint32_t v_ld, int64_t k0, int64_t k_end,
                                         const int64_t (&last)[2], float scale_log2, int t4,
                                         float (&m)[2], float (&l)[2], float (&o)[D / 8][4],
                                         uint32_t swz) {
  constexpr float kNegInf = -INFINITY;
  // S = Q K^T: 16 rows x 16 keys, two n8 accumulator tiles.
  float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t kb[4];
    fa::mma::ldmatrix_x4(kb, (k_ld + kk * 16 * 2) ^ swz);
    const uint32_t b_lo[2] = {kb[0], kb[1]}, b_hi[2] = {kb[2], kb[3]};
    fa::mma::mma_16816<T>(s[0], qf[kk], b_lo);
    fa::mma::mma_16816<T>(s[1], qf[kk], b_hi);
  }

  // Scale to log2 units and mask: s[nt][e] is row g + 8 (e / 2), key 8 nt + 2 t4 + e % 2.
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t key = k0 + 8 * nt + 2 * t4 + (e & 1);
      s[nt][e] = (key < k_end && key <= last[e / 2]) ? s[nt][e] * scale_log2 : kNegInf;
    }

  // The online softmax of both rows over this step: the quad's 4 lanes hold a row's 16 keys.
  float m_use[2], alpha[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = fmaxf(
        m[h], fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1])));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    m_use[h] = mx == kNegInf ? 0.0f : mx;  // nothing seen yet: no -inf - -inf
    alpha[h] = exp2f(m[h] - m_use[h]);
    m[h] = mx;
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = exp2f(s[nt][e] - m_use[e / 2]);  // masked: 0
#pragma unroll
  for (int h = 0; h < 2; ++h)
    l[h] = l[h] * alpha[h] + ((s[0][2 * h] + s[0][2 * h + 1]) + (s[1][2 * h] + s[1][2 * h + 1]));

    // O = alpha O + P V: P packed to 16 bits is the A fragment of this k16 slice of keys.
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    o[dn][0] *= alpha[0];
    o[dn][1] *= alpha[0];
    o[dn][2] *= alpha[1];
    o[dn][3] *= alpha[1];
  }
  const uint32_t pa[4] = {fa::mma::pack2<T>(s[0][0], s[0][1]), fa::mma::pack2<T>(s[0][2], s[0][3]),
                          fa::mma::pack2<T>(s[1][0], s[1][1]), fa::mma::pack2<T>(s[1][2], s[1][3])};
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    uint32_t vb[4];
    fa::mma::ldmatrix_x4_trans(vb, (v_ld + dp * 16 * 2) ^ swz);
    const uint32_t b_lo[2] = {vb[0], vb[1]}, b_hi[2] = {vb[2], vb[3]};
    fa::mma::mma_16816<T>(o[2 * dp], pa, b_lo);
    fa::mma::mma_16816<T>(o[2 * dp + 1], pa, b_hi);
  }
}

// The row sums over the quad: afterwards every lane of a quad holds its two rows' whole l.
__device__ __forceinline__ void quad_sum(float (&l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
}

// 08/t08: the first n (at most 4) of v's elements, times mul, into a row of O (16-bit) or of the
// partials (fp32) at `to`, one element at a time: at a d that is no multiple of 8 a row may start
// at any element, where t07's 4-byte and 16-byte accesses need an aligned one.
template <class T>
__device__ __forceinline__ void store_elements(T* to, float4 v, float mul, int n) {
  const uint32_t pair[2] = {fa::mma::pack2<T>(v.x * mul, v.y * mul),
                            fa::mma::pack2<T>(v.z * mul, v.w * mul)};
  unsigned short* const e = reinterpret_cast<unsigned short*>(to);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (i < n)
      e[i] = static_cast<unsigned short>(i % 2 == 0 ? pair[i / 2] & 0xffffu : pair[i / 2] >> 16);
}
__device__ __forceinline__ void store_elements(float* to, float4 v, float mul, int n) {
  const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (i < n) to[i] = x[i] * mul;
}

// The kWarps warps of the block each hold the state (m, l, o) of the tile's 16 rows over
// their share of the keys; chapter 02's pair merge folds them into one per row, through `smem`
// (at least kWarps * 16 * (D + 2) floats, free: nothing in flight, and the barrier below waits
// for every warp's last read of it), and the block writes one partial per row and split, or O and
// L with a single split, as write_rows does. l must hold whole rows (quad_sum) already.
// kAnyLength (08/t08): a row of O or of the partials may start anywhere, and each element is
// stored alone (store_elements).
template <class T, int D, int kWarps, bool kAnyLength = false>
__device__ __forceinline__ void merge_warps(const Params& p, const MmaTile& t, unsigned char* smem,
                                            int d, int tid, int g, int t4, const float (&m)[2],
                                            const float (&l)[2], const float (&o)[D / 8][4]) {
  constexpr float kNegInf = -INFINITY;
  constexpr int kBlockThreads = kWarps * kWarp;
  const int warp = tid / kWarp;
  using ch02::gpu::Stats;
  float* const red_o = reinterpret_cast<float*>(smem);  // [kWarps][kTileRows][D]
  Stats* const red_ml = reinterpret_cast<Stats*>(red_o + kWarps * kTileRows * D);
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * kTileRows + g + 8 * h;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<float2*>(red_o + r * D + dn * 8 + 2 * t4) =
          make_float2(o[dn][2 * h], o[dn][2 * h + 1]);
    if (t4 == 0) red_ml[r] = Stats{m[h] == kNegInf ? kNegInf : m[h] * kLn2, l[h]};  // natural log
  }
  __syncthreads();

  // Thread tid folds row tid / kPerRow, columns [c0, c0 + kCols): 8 threads per row.
  constexpr int kPerRow = kBlockThreads / kTileRows, kCols = D / kPerRow;
  static_assert(kCols % 4 == 0, "float4 columns");
  const int r = tid / kPerRow, c0 = (tid % kPerRow) * kCols;
  if (r >= t.nrows) return;  // padding rows write nothing
  Stats acc = ch02::gpu::empty_stats();
  for (int w = 0; w < kWarps; ++w) acc = ch02::gpu::merge(acc, red_ml[w * kTileRows + r]);
  float f[kWarps];  // each warp's o rescaled by the factor that rescaled its l
  for (int w = 0; w < kWarps; ++w) f[w] = ch02::gpu::rescale(red_ml[w * kTileRows + r].m, acc.m);
  const int64_t rr = t.r0 + r;
  const int64_t row =
      (t.b * p.heads + t.kvh * p.group + rr % p.group) * p.seq_q + rr / p.group;  // as mma_rows
  const float inv = acc.l > 0.0f ? 1.0f / acc.l : 0.0f;
#pragma unroll
  for (int c = c0; c < c0 + kCols; c += 4) {
    if (c >= d) break;  // columns past the real head dim (zero) are not written
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(red_o + (w * kTileRows + r) * D + c);
      v.x += f[w] * x.x;
      v.y += f[w] * x.y;
      v.z += f[w] * x.z;
      v.w += f[w] * x.w;
    }
    if constexpr (kAnyLength) {
      if (p.num_splits == 1)
        store_elements(static_cast<T*>(p.o) + row * d + c, v, inv, d - c);
      else
        store_elements(p.ws_o + (t.split * p.total_rows + row) * d + c, v, 1.0f, d - c);
    } else if (p.num_splits == 1) {
      uint32_t* const out = reinterpret_cast<uint32_t*>(static_cast<T*>(p.o) + row * d + c);
      out[0] = fa::mma::pack2<T>(v.x * inv, v.y * inv);  // 4-byte stores: O need only be 4-byte
      out[1] = fa::mma::pack2<T>(v.z * inv, v.w * inv);  // aligned, as in v3
    } else {
      *reinterpret_cast<float4*>(p.ws_o + (t.split * p.total_rows + row) * d + c) = v;
    }
  }
  if (tid % kPerRow == 0) {
    if (p.num_splits == 1)
      p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : kNegInf;
    else
      p.ws_ml[t.split * p.total_rows + row] = make_float2(acc.m, acc.l);
  }
}

// v6: the last block of a row tile folds the num_splits partials of each of its rows (the
// workspace, written by this launch's split blocks) into O and L, split 0 first: chapter 02's pair
// merge, o rescaled by the factors that rescale l, as v2's merge kernel folded them. Thread tid
// takes row tid / kPerRow and kCols columns of it, as merge_warps does; kBatch splits' loads are
// issued before any of them is folded, so that their round trips to L2 overlap: 8 splits of
// float4 columns are 128 registers at D 128 (kVecs = 4), which the main loop's accumulators have
// given back by now (ptxas: 216 registers, 214 with batches of 4; still two blocks per SM), and
// the protocol's plans cut a row into 4 or 16 splits: one or two batches. __ldcg reads through L2 only: the partials are other SMs'
// stores of this launch. kAnyLength (08/t08): a partial's row may start anywhere, and its
// elements are loaded one by one (load_elements), O stored as merge_warps stores it. At D 256
// (08/t09_d256's instance) a thread folds 32 columns, and 8 splits of them would be 256
// registers: batches of 4 there.
template <int D>
constexpr int batch() {
  return D <= 128 ? 8 : 4;
}

// 08/t08: the first n (at most 4) floats at `from`, one load each, zeros past n.
__device__ __forceinline__ float4 load_elements(const float* from, int n) {
  return make_float4(n > 0 ? __ldcg(from) : 0.0f, n > 1 ? __ldcg(from + 1) : 0.0f,
                     n > 2 ? __ldcg(from + 2) : 0.0f, n > 3 ? __ldcg(from + 3) : 0.0f);
}

template <class T, int D, bool kAnyLength = false>
__device__ __forceinline__ void merge_splits(const Params& p, const MmaTile& t, int d, int tid) {
  using ch02::gpu::Stats;
  constexpr int kPerRow = kThreads / kTileRows, kCols = D / kPerRow, kVecs = kCols / 4;
  constexpr int kBatch = batch<D>();
  static_assert(kCols % 4 == 0, "float4 columns");
  const int r = tid / kPerRow, c0 = (tid % kPerRow) * kCols;
  if (r >= t.nrows) return;  // padding rows have no partials and no output
  const int64_t rr = t.r0 + r;
  const int64_t row =
      (t.b * p.heads + t.kvh * p.group + rr % p.group) * p.seq_q + rr / p.group;  // as mma_rows
  Stats acc = ch02::gpu::empty_stats();
  float4 o[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) o[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t s0 = 0; s0 < p.num_splits; s0 += kBatch) {
    float2 ml[kBatch];
    float4 part[kBatch][kVecs];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t w = (s0 + u) * p.total_rows + row;
      const bool in = s0 + u < p.num_splits;
      ml[u] = in ? __ldcg(p.ws_ml + w) : make_float2(-INFINITY, 0.0f);  // identity past the end
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {  // partials have rows of d: none read past it
        if constexpr (kAnyLength)
          part[u][v] = load_elements(p.ws_o + w * d + c0 + 4 * v, in ? d - (c0 + 4 * v) : 0);
        else
          part[u][v] = in && c0 + 4 * v < d
                           ? __ldcg(reinterpret_cast<const float4*>(p.ws_o + w * d + c0) + v)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const Stats s{ml[u].x, ml[u].y};
      const Stats merged = ch02::gpu::merge(acc, s);
      const float fa = ch02::gpu::rescale(acc.m, merged.m);
      const float fb = ch02::gpu::rescale(s.m, merged.m);
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        o[v].x = o[v].x * fa + part[u][v].x * fb;
        o[v].y = o[v].y * fa + part[u][v].y * fb;
        o[v].z = o[v].z * fa + part[u][v].z * fb;
        o[v].w = o[v].w * fa + part[u][v].w * fb;
      }
      acc = merged;
    }
  }
  // A row that saw no key in any split: l = 0, O = 0 and L = -inf.
  const float inv = acc.l > 0.0f ? 1.0f / acc.l : 0.0f;
  if constexpr (kAnyLength) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      if (c0 + 4 * v >= d) break;  // rows of d
      store_elements(static_cast<T*>(p.o) + row * d + c0 + 4 * v, o[v], inv, d - (c0 + 4 * v));
    }
  } else {
    uint32_t* const out = reinterpret_cast<uint32_t*>(static_cast<T*>(p.o) + row * d + c0);
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      if (c0 + 4 * v >= d) break;                                  // rows of d
      out[2 * v] = fa::mma::pack2<T>(o[v].x * inv, o[v].y * inv);  // 4-byte stores, as merge_warps
      out[2 * v + 1] = fa::mma::pack2<T>(o[v].z * inv, o[v].w * inv);
    }
  }
  if (tid % kPerRow == 0) p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : -INFINITY;
}

}  // namespace fa::ch08::t07

// The tile counters are host code with a buffer of their own: in an anonymous namespace, as
// split_kv.cuh's workspace, so that each module that includes this header has its own.
namespace {

// v6: the counters, one per row tile, zero between launches (the last block resets its own): one
// buffer per process, zeroed when it is allocated or grown, as the workspace of the partials is
// one buffer (split_kv.cuh).
unsigned* tile_counters(int64_t tiles) {
  static fa::DeviceBuffer buf;
  const size_t bytes = size_t(tiles) * sizeof(unsigned);
  if (buf.bytes() < bytes) {
    FA_CUDA_CHECK(cudaDeviceSynchronize());  // a smaller buffer may still be in use
    buf = fa::DeviceBuffer(bytes);
    buf.zero();
  }
  return buf.as<unsigned>();
}

}  // namespace
