// ch08_mma_split.cuh: what the tensor-core split kernels of chapter 08 (08/v3_mma_split to
// 08/v7_swizzled_ring) share, device code and launch helpers, in an anonymous namespace like
// ch08_split_kv.cuh (each including .cu file compiles its own copy). Each rung keeps what its
// header names: its copy plan, its ring of stages and its main loop.
//
//   mma_tile      which (sequence, K/V head), m16 tile of query rows and split a block owns
//   mma_rows      this lane's two rows (g, g + 8): output row, last key seen, Q as A fragments
//   mma_keys      the block's keys: its split, cut at the last key any of its rows sees
//   Ring          the shared-memory ring of K/V stages (v3: 4 x 16 keys; v5-v7: 2 x 64)
//   RingCopy      v4-v7's copies into it, planned once per thread (v4's idea)
//   mma_step      one 16-key step of S = Q K^T, the online softmax and O = alpha O + P V, reading
//                 K and V through 32-bit shared addresses (v4 on; v3 keeps its own step)
//   write_rows    one warp's rows out: a partial (m, l, o) per row, or O and L with one split
//   merge_warps   v5-v7: the block's warps' states folded with chapter 02's merge, then written
//   launch_warp_split   v3, v4's launcher: one warp per block and split, then v2's merge
//   mma_split_forward   the host side: checks, then the dtype and head-dim dispatch
//
// The fragment layouts are mma.cuh's (m16n8k16): a lane holds rows g = lane / 4 and g + 8 and
// columns 2 t4, 2 t4 + 1 (t4 = lane % 4) of every accumulator tile. Moving these pieces here
// from the rung files changed no instruction: the PTX of 08/v3-v6 is the same before and after,
// up to the order of two independent integer instructions (virtual register names and
// anonymous-namespace tags normalised).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../02_online_softmax/ch02_softmax_device.cuh"  // Stats, merge, rescale: the pair merge
#include "attention_tiles.cuh"                           // padded tiles and their cp.async loader
#include "ch08_parallel_merge.cuh"                       // v2's merge of the splits
#include "ch08_split_kv.cuh"                             // Params, imin, kLn2
#include "check.h"
#include "mma.cuh"

namespace {

constexpr int kWarp = 32;      // threads per warp
constexpr int kTileRows = 16;  // query rows per block: one m16 tile
constexpr int kKeys = 16;      // keys per warp per step: two n8 tiles of S, one k16 slice of P V

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

// This lane's two rows: r0 + r = i * group + gq is query i of query head kvh * group + gq. Rows
// past the group's (padding) see no key (last = -1) and are never written. Then Q as A fragments,
// straight from global memory (mma.cuh: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] =
// A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9] of each k16 slice), zero in padding rows, kept for
// the whole kernel (Q is read once, a few KB against megabytes of K/V).
template <class T, int D>
__device__ __forceinline__ void mma_rows(const Params& p, const MmaTile& t, int g, int t4,
                                         int64_t (&out_row)[2], int64_t (&last)[2],
                                         uint32_t (&qf)[D / 16][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t rr = t.r0 + r;
    const int64_t i = rr / p.group, qh = t.kvh * p.group + rr % p.group;
    out_row[h] = (t.b * p.heads + qh) * p.seq_q + i;
    last[h] = r >= t.nrows ? -1 : p.causal ? i + (p.seq_k - p.seq_q) : p.seq_k - 1;
  }
  const T* q = static_cast<const T*>(p.q);
  const uint32_t* qrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    qrow[h] = g + 8 * h < t.nrows ? reinterpret_cast<const uint32_t*>(q + out_row[h] * D) : nullptr;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t* src = qrow[j & 1];
      const int col = kk * 16 + 8 * (j / 2) + 2 * t4;  // even: one 32-bit word, two elements
      qf[kk][j] = src != nullptr ? __ldg(src + col / 2) : 0u;
    }
}

// The block's keys [k_begin, k_end): its split, cut at the last key any of its rows sees.
__device__ __forceinline__ void mma_keys(const Params& p, const MmaTile& t, int64_t& k_begin,
                                         int64_t& k_end) {
  k_begin = t.split * p.split_len;
  k_end = imin(p.seq_k, k_begin + p.split_len);
  if (p.causal) {
    const int64_t last_i = (t.r0 + t.nrows - 1) / p.group;
    k_end = imin(k_end, last_i + (p.seq_k - p.seq_q) + 1);
  }
}

// The ring: kStages stages, each kRows keys of K in padded rows (fa::tiles::kPitch), then kRows of V.
// kSwizzle (v7): unpadded swizzled rows instead (fa::tiles::swizzled_offset), D elements apart.
template <int D, int kRows, int kStages, bool kSwizzle = false>
struct Ring {
  static constexpr int kPitch = kSwizzle ? D : fa::tiles::kPitch<D>;  // elements per row
  static constexpr int kStageElems = 2 * kRows * kPitch;              // K rows, then V rows
  static constexpr size_t kSmem = size_t(kStages) * kStageElems * 2;  // 16-bit elements
  static constexpr uint32_t kStageBytes = kStageElems * 2, kVBytes = kRows * kPitch * 2;
};

// One 16-byte copy of a full step: plain (v4, v5) or with the .L2::128B prefetch hint (v6, v7).
template <bool kL2Hint>
__device__ __forceinline__ void copy16(uint32_t dst, const void* src) {
  if constexpr (kL2Hint)
    fa::mma::cp_async_16_l2_128(dst, src);
  else
    fa::mma::cp_async_16(dst, src);
}

// The copies of v4-v7, planned once (v4's header tells why). A step's K (and V) is kRows rows of
// kChunks 16-byte chunks; thread tid of kThreads copies chunk cp_col / 8 of rows cp_row +
// kRowsPerPass * i, i < kPasses. From one i to the next its global source moves by kRowsPerPass * D
// elements and its shared destination by kRowsPerPass * kPitch: compile-time constants that ptxas
// folds into the instruction. From one step to the next the source moves by kRows * D and the
// stage by kStageBytes. So a full step is 2 * kPasses cp.async and a few adds; only the split's
// last step, which may hold fewer than kRows keys, tests each row (fa::tiles::load_tile_async
// zero-fills the rows past k_end).
template <class T, int D, int kRows, int kStages, int kThreads, bool kL2Hint, bool kSwizzle = false>
struct RingCopy {
  using R = Ring<D, kRows, kStages, kSwizzle>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static_assert(kThreads % kChunks == 0 && kRows % kRowsPerPass == 0, "chunks must tile");

  T* stages;
  const T *kbase, *vbase;  // K and V of the block's (sequence, K/V head)
  int64_t k_begin, k_end, nsteps;
  int tid;
  uint32_t dst;            // this thread's first chunk in stage 0 (32-bit shared address)
  const T *k_src, *v_src;  // ... and its source at the split's first key

  __device__ __forceinline__ RingCopy(T* stages_, const T* kbase_, const T* vbase_,
                                      int64_t k_begin_, int64_t k_end_, int64_t nsteps_, int tid_)
      : stages(stages_),
        kbase(kbase_),
        vbase(vbase_),
        k_begin(k_begin_),
        k_end(k_end_),
        nsteps(nsteps_),
        tid(tid_) {
    const int cp_row = tid / kChunks, cp_col = (tid % kChunks) * 8;
    // Swizzled: the chunk moves within its row by cp_row % 8, the same for every pass (kRowsPerPass
    // is a multiple of 8), so the per-pass offsets stay constants.
    static_assert(!kSwizzle || kRowsPerPass % fa::tiles::kSwizzleRows == 0,
                  "one XOR for all passes");
    const int cp_at =
        kSwizzle ? fa::tiles::swizzled_offset<D>(cp_row, cp_col / 8) : cp_row * R::kPitch + cp_col;
    dst = fa::mma::smem_addr(stages) + uint32_t(cp_at) * 2;
    k_src = kbase + (k_begin + cp_row) * D + cp_col;
    v_src = vbase + (k_begin + cp_row) * D + cp_col;
  }

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last
  // step, so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  __device__ __forceinline__ void issue(int64_t st) const {
    if (st < nsteps) {
      const uint32_t d = dst + uint32_t(st % kStages) * R::kStageBytes;
      const int64_t off = st * (kRows * D);
      const int64_t left = k_end - (k_begin + st * kRows);  // keys of the split from this step on
      if (left >= kRows) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          copy16<kL2Hint>(d + i * kRowsPerPass * R::kPitch * 2, k_src + off + i * kRowsPerPass * D);
          copy16<kL2Hint>(d + R::kVBytes + i * kRowsPerPass * R::kPitch * 2,
                          v_src + off + i * kRowsPerPass * D);
        }
      } else {
        T* sk = stages + int(st % kStages) * R::kStageElems;
        const int64_t k0 = k_begin + st * kRows;
        fa::tiles::load_tile_async<D, kRows, kThreads, kSwizzle>(sk, kbase, k0, k_end, tid);
        fa::tiles::load_tile_async<D, kRows, kThreads, kSwizzle>(sk + kRows * R::kPitch, vbase, k0,
                                                                 k_end, tid);
      }
    }
    fa::mma::cp_async_commit();
  }
};

// One step over keys [k0, k0 + 16) for the warp's 16 rows. k_ld and v_ld are this lane's 32-bit
// shared addresses (bytes) of its ldmatrix rows in the step's K and V tiles (padded rows of
// kPitch elements): K by ldmatrix x4 = keys 0-7 / 8-15 times columns 0-7 / 8-15 of a k16 slice
// (b of n8 tiles 0 and 1); V by ldmatrix x4 .trans = keys 0-7 / 8-15 times columns 0-7 / 8-15 of
// a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1). m (log2 units) and l are the running max
// and this lane's share of the running sum of its two rows; o the accumulator tiles.
// kSwizzle (v7): the tiles are swizzled; k_ld and v_ld are the addresses the lane would read
// without the swizzle, and each read goes to that address ^ swz (fa::tiles::swizzle_xor of the
// lane's rows, which all have the same row % 8).
template <class T, int D, bool kSwizzle = false>
__device__ __forceinline__ void mma_step(const uint32_t (&qf)[D / 16][4], uint32_t k_ld,
                                         uint32_t v_ld, int64_t k0, int64_t k_end,
                                         const int64_t (&last)[2], float scale_log2, int t4,
                                         float (&m)[2], float (&l)[2], float (&o)[D / 8][4],
                                         uint32_t swz = 0) {
  const auto at = [swz](uint32_t plain) { return kSwizzle ? plain ^ swz : plain; };
  constexpr float kNegInf = -INFINITY;
  // S = Q K^T: 16 rows x 16 keys, two n8 accumulator tiles.
  float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t kb[4];
    fa::mma::ldmatrix_x4(kb, at(k_ld + kk * 16 * 2));
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
    fa::mma::ldmatrix_x4_trans(vb, at(v_ld + dp * 16 * 2));
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

// One warp's real rows out (v3, v4: the warp is the block): the partial (m, l, o) of split
// t.split (m in natural-log units), or with a single split O = o / l and L = m + ln l directly.
// A row that saw no key gives (-inf, 0, 0), or O = 0 and L = -inf.
template <class T, int D>
__device__ __forceinline__ void write_rows(const Params& p, const MmaTile& t,
                                           const int64_t (&out_row)[2], int g, int t4,
                                           const float (&m)[2], const float (&l)[2],
                                           const float (&o)[D / 8][4]) {
  constexpr float kNegInf = -INFINITY;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (g + 8 * h >= t.nrows) continue;  // padding rows write nothing
    const int64_t row = out_row[h];
    if (p.num_splits == 1) {
      const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
      T* orow = static_cast<T*>(p.o) + row * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<uint32_t*>(orow + dn * 8 + 2 * t4) =
            fa::mma::pack2<T>(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv);
      if (t4 == 0) p.lse[row] = l[h] > 0.0f ? (m[h] + log2f(l[h])) * kLn2 : kNegInf;
    } else {
      const int64_t w = t.split * p.total_rows + row;
      float* wrow = p.ws_o + w * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<float2*>(wrow + dn * 8 + 2 * t4) =
            make_float2(o[dn][2 * h], o[dn][2 * h + 1]);
      if (t4 == 0) p.ws_ml[w] = make_float2(m[h] == kNegInf ? kNegInf : m[h] * kLn2, l[h]);
    }
  }
}

// v5-v7: the kWarps warps of the block each hold the state (m, l, o) of the tile's 16 rows over
// their share of the keys; chapter 02's pair merge folds them into one per row, through `smem`
// (at least kWarps * 16 * (D + 2) floats, free: nothing in flight, and the barrier below waits
// for every warp's last read of it), and the block writes one partial per row and split, or O and
// L with a single split, as write_rows does. l must hold whole rows (quad_sum) already.
template <class T, int D, int kWarps>
__device__ __forceinline__ void merge_warps(const Params& p, const MmaTile& t, unsigned char* smem,
                                            int tid, int g, int t4, const float (&m)[2],
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
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(red_o + (w * kTileRows + r) * D + c);
      v.x += f[w] * x.x;
      v.y += f[w] * x.y;
      v.z += f[w] * x.z;
      v.w += f[w] * x.w;
    }
    if (p.num_splits == 1) {
      uint32_t* const out = reinterpret_cast<uint32_t*>(static_cast<T*>(p.o) + row * D + c);
      out[0] = fa::mma::pack2<T>(v.x * inv, v.y * inv);  // 4-byte stores: O need only be 4-byte
      out[1] = fa::mma::pack2<T>(v.z * inv, v.w * inv);  // aligned, as in v3 and v4
    } else {
      *reinterpret_cast<float4*>(p.ws_o + (t.split * p.total_rows + row) * D + c) = v;
    }
  }
  if (tid % kPerRow == 0) {
    if (p.num_splits == 1)
      p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : kNegInf;
    else
      p.ws_ml[t.split * p.total_rows + row] = make_float2(acc.m, acc.l);
  }
}

inline bool aligned4(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 4 == 0;
}

// The launcher of the rungs whose block is one warp (v3, v4): plan the splits for kKeys-key steps
// and the kernel's residency (smem bytes a block), launch, then v2's merge of the splits.
template <class T, int D, class Kernel>
void launch_warp_split(Kernel kernel, size_t smem, const fa::AttentionFwdArgs& a,
                       cudaStream_t stream) {
  const fa::ch08::SplitPlan plan =
      fa::ch08::plan_split_kv(a.shape, kKeys, resident_blocks((const void*)kernel, kWarp, smem));
  // The plan tiles group * seq_q rows by at most 16 (kMaxRows): one m16 tile per tile.
  FA_REQUIRE(plan.row_tiles == fa::ceil_div(a.shape.group() * a.shape.seq_q, kTileRows),
             "internal: the plan's row tiles and the kernel's m16 tiles disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kWarp, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
  launch_parallel_merge<T, D>(p, stream);
}

// The host side of every tensor-core rung: refuse what the kernels cannot take (with the rung's
// name in the message), then Rung::launch<T, D>(args, stream) for fp16 / bf16 and D 64 / 128.
template <class Rung>
void mma_split_forward(const fa::AttentionFwdArgs& a, cudaStream_t stream) {
  const std::string name = Rung::kName;
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(), "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(!ch02::gpu::aligned16(a.k) || !ch02::gpu::aligned16(a.v),
                    name + " copies K and V 16 bytes at a time: they must be 16-byte aligned");
  FA_UNSUPPORTED_IF(!aligned4(a.q) || !aligned4(a.o),
                    name +
                        " reads Q and writes O two elements at a time: they must be 4-byte "
                        "aligned");
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::F16 && a.dtype != fa::DType::BF16,
                    name + " runs on tensor cores: fp16 and bf16 only");
  FA_UNSUPPORTED_IF(a.shape.head_dim != 64 && a.shape.head_dim != 128,
                    name + " takes head dims 64 and 128");
  const bool f16 = a.dtype == fa::DType::F16;
  if (a.shape.head_dim == 64)
    f16 ? Rung::template launch<__half, 64>(a, stream)
        : Rung::template launch<__nv_bfloat16, 64>(a, stream);
  else
    f16 ? Rung::template launch<__half, 128>(a, stream)
        : Rung::template launch<__nv_bfloat16, 128>(a, stream);
}

}  // namespace
