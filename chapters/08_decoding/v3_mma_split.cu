// 08/v3_mma_split: 08/v2_parallel_merge with the split kernel on tensor cores: S = Q K^T and
// O += P V on mma.sync m16n8k16, each warp its own split. fp16 and bf16 only (fp32 stays on v1 and
// v2: mma.sync takes no fp32 inputs), D 64 and 128, grouped-query attention included.
//
// What it adds, and why. On the grouped shape (B 8, H 32, H_kv 8: 4 query rows per K/V head,
// 32768 keys, bf16, D 128) v2's split kernel (v1's) streams at 2.05 TB/s of DRAM (Nsight Compute,
// H100, 2026-11-23: 524.5 us, 161 registers, 3 blocks per SM), where FlashAttention-2 takes
// 355.3 us at 3.02 TB/s. Ours is instruction-bound (issue slots 53.6% busy): every K/V tile serves
// 4 rows, so phase 1 (S, Q read from shared memory as fp32 for every FMA) and phase 3 (P V) do 4x
// the CUDA-core work of the multi-head shape. FA2 puts the 4 rows of the group into a 64-row tile
// (60 rows wasted) and still streams at 90% of DRAM peak, because its S and P V run on tensor
// cores: the wasted rows cost nothing that matters. Here the rows of one K/V head (group * seq_q,
// at most 16 per tile) are padded to one m16 tile, and a 16-key step costs a warp 16 mma for S and
// 16 for P V whatever the rows.
//
// The map. A block is one warp (32 threads) and owns one (sequence, K/V head, tile of 16 query
// rows of its group, split of the keys); the plan (split_kv_plan.h) counts these one-warp blocks
// against how many the GPU holds at once, so "warps x blocks" is simply blocks. The warp:
//   1. loads its 16 rows' Q straight from global memory into A fragments (D/16 of them, 4 x 32-bit
//      words per lane each: 32 registers at D 128), rows past the group's zero, kept for the
//      whole kernel (Q is read once, a few KB against megabytes of K/V);
//   2. streams its split through a kStages-deep ring of shared-memory stages, each kKeys = 16 keys
//      of K and V in padded rows (common/device/attention_tiles.cuh: cp.async 16-byte chunks, keys
//      past the split zero-filled); the copies of the next kStages - 1 steps are in flight while
//      one is computed; only cp.async.wait_group and __syncwarp order them, no block barrier;
//   3. per step: S = Q K^T (16 x 16, two n8 tiles; K by ldmatrix, the non-transposed B operand),
//      scaled to log2 units, masked (-inf past the split / seq_k, causal bottom-right per row,
//      padding rows see nothing); the online softmax on the accumulator fragments (row max over
//      the quad, exp2, alpha = 2^(m_old - m_new)); O = alpha O + P V with P packed to 16 bits
//      straight from the S registers into the A fragment, V by ldmatrix .trans;
//   4. writes each real row's partial (m, l, o) to the workspace (padding rows write nothing), or
//      with a single split O and L directly; a row that saw no key gives (-inf, 0, 0).
// v2's merge folds the splits.
//
// Registers: the O accumulator is 16 x D fp32 over 32 lanes (64 at D 128), the Q fragments 32,
// S 8; ptxas' count is in notes/08_decoding.md. Shared memory: kStages x (K + V) x 16 keys x
// (D + 8) x 2 bytes = 34816 B at D 128 (18432 at D 64), under the 48 KiB default (no opt-in):
// 6 blocks (warps) per H100 SM, 4 on an A100, 2 on sm_86/89.
//
// The file, top to bottom: mma_tile, mma_rows, mma_keys (the block's tile, each lane's rows and Q
// fragments, the block's keys); Ring (the shared-memory stages); quad_sum and write_rows (the
// epilogue); mma_split_kernel; launch_split_kv; v2's merge (parallel_merge_kernel, launch_merge);
// forward and the dtype / head-dim dispatch; the registration.
//
// Speed (H100 80GB HBM3, 2026-11-23): bf16 D 128, seq_q 1, B 8 H 32 H_kv 8 seq_k 32768: 2705 GB/s,
// 94.7% of copy; FlashAttention-2 3016 (notes/measured/h100-2026-11-23e/decode_v5_v6_fold.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "online_softmax.cuh"   // Stats, merge, rescale: the pair merge
#include "attention_tiles.cuh"  // padded tiles and their cp.async loader
#include "split_kv.cuh"         // Params, Traits, the workspace, the occupancy, make_params
#include "split_kv_plan.h"      // the split plan
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

constexpr const char* kName = "08/v3_mma_split";

constexpr int kWarp = 32;      // threads per warp
constexpr int kTileRows = 16;  // query rows per block: one m16 tile
constexpr int kKeys = 16;      // keys per warp per step: two n8 tiles of S, one k16 slice of P V
constexpr int kStages = 4;     // shared-memory stages per warp (kStages - 1 in flight)

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
template <int D, int kRows, int kStages>
struct Ring {
  static constexpr int kPitch = fa::tiles::kPitch<D>;                 // elements per row
  static constexpr int kStageElems = 2 * kRows * kPitch;              // K rows, then V rows
  static constexpr size_t kSmem = size_t(kStages) * kStageElems * 2;  // 16-bit elements
};

template <int D>
using MmaLayout = Ring<D, kKeys, kStages>;
static_assert(MmaLayout<128>::kSmem <= 48 * 1024,
              "no opt-in to more than 48 KiB of shared memory here");

// The row sums over the quad: afterwards every lane of a quad holds its two rows' whole l.
__device__ __forceinline__ void quad_sum(float (&l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
}

// One warp's real rows out (the warp is the block): the partial (m, l, o) of split
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

template <class T, int D>
__global__ void __launch_bounds__(kWarp) mma_split_kernel(Params p) {
  using Lay = MmaLayout<D>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int lane = threadIdx.x;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this warp owns; its two rows and Q fragments;
  // its keys.
  const MmaTile t = mma_tile(p, blockIdx.x);
  int64_t out_row[2], last[2];
  uint32_t qf[D / 16][4];
  mma_rows<T, D>(p, t, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const T* kbase = static_cast<const T*>(p.k) + t.bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + t.bkv * p.seq_k * D;

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last step,
  // so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  auto issue = [&](int64_t st) {
    if (st < nsteps) {
      T* sk = stages + int(st % kStages) * Lay::kStageElems;
      const int64_t k0 = k_begin + st * kKeys;
      fa::tiles::load_tile_async<D, kKeys, kWarp>(sk, kbase, k0, k_end, lane);
      fa::tiles::load_tile_async<D, kKeys, kWarp>(sk + kKeys * kPitch, vbase, k0, k_end, lane);
    }
    fa::mma::cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(st);

  // ldmatrix lane offsets, as in chapter 05 (ch05_mma_fwd.cuh). K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf};  // running max, log2 units (rows g, g + 8)
  float l[2] = {0.0f, 0.0f};        // this lane's share of the running sum (its columns)

  for (int64_t st = 0; st < nsteps; ++st) {
    issue(st + kStages - 1);  // into the stage step st - 1 used: every lane is done with it
    fa::mma::cp_async_wait<kStages - 1>();
    __syncwarp();  // step st's copies, issued by all lanes, are visible to every lane
    const T* sK = stages + int(st % kStages) * Lay::kStageElems;
    const T* sV = sK + kKeys * kPitch;

    // S = Q K^T: 16 rows x 16 keys, two n8 accumulator tiles.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[4];
      fa::mma::ldmatrix_x4(kb, sK + k_ld_row * kPitch + kk * 16 + k_ld_col);
      const uint32_t b_lo[2] = {kb[0], kb[1]}, b_hi[2] = {kb[2], kb[3]};
      fa::mma::mma_16816<T>(s[0], qf[kk], b_lo);
      fa::mma::mma_16816<T>(s[1], qf[kk], b_hi);
    }

    // Scale to log2 units and mask: s[nt][e] is row g + 8 (e / 2), key 8 nt + 2 t4 + e % 2.
    const int64_t k0 = k_begin + st * kKeys;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = k0 + 8 * nt + 2 * t4 + (e & 1);
        s[nt][e] = (key < k_end && key <= last[e / 2]) ? s[nt][e] * p.scale_log2 : kNegInf;
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
    const uint32_t pa[4] = {
        fa::mma::pack2<T>(s[0][0], s[0][1]), fa::mma::pack2<T>(s[0][2], s[0][3]),
        fa::mma::pack2<T>(s[1][0], s[1][1]), fa::mma::pack2<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      fa::mma::ldmatrix_x4_trans(vb, sV + v_ld_row * kPitch + dp * 16 + v_ld_col);
      const uint32_t b_lo[2] = {vb[0], vb[1]}, b_hi[2] = {vb[2], vb[3]};
      fa::mma::mma_16816<T>(o[2 * dp], pa, b_lo);
      fa::mma::mma_16816<T>(o[2 * dp + 1], pa, b_hi);
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before it is refilled
  }
  fa::mma::cp_async_wait<0>();  // nothing of this warp's left in flight (empty groups only)

  // Epilogue: the row sums over the quad, then each real row's partial (or O and L).
  quad_sum(l);
  write_rows<T, D>(p, t, out_row, g, t4, m, l, o);
}

// Plans the splits for kKeys-key steps and the kernel's residency (one-warp blocks), launches the
// split kernel; returns the parameters, which the merge takes when p.num_splits > 1.
template <class T, int D>
Params launch_split_kv(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Lay = MmaLayout<D>;
  auto kernel = mma_split_kernel<T, D>;
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      a.shape, kKeys, resident_blocks((const void*)kernel, kWarp, Lay::kSmem));
  // The plan tiles group * seq_q rows by at most 16 (kMaxRows): one m16 tile per tile.
  FA_REQUIRE(plan.row_tiles == fa::ceil_div(a.shape.group() * a.shape.seq_q, kTileRows),
             "internal: the plan's row tiles and the kernel's m16 tiles disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kWarp, Lay::kSmem, stream>>>(p);
  FA_CHECK_LAUNCH();
  return p;
}

constexpr int kMergeThreads = 256;
constexpr int kBatch = 8;  // splits whose loads one thread issues before folding any

template <class T, int D>
__global__ void __launch_bounds__(kMergeThreads) parallel_merge_kernel(Params p) {
  using ch02::gpu::Stats;
  constexpr int kChunks = D / 4;                    // float4 chunks of a row of o
  constexpr int kGroups = kMergeThreads / kChunks;  // split groups
  static_assert(D % 4 == 0 && kMergeThreads % kChunks == 0 && D <= kMergeThreads,
                "a row must split into float4 chunks over the block");
  __shared__ float4 red_o[kGroups][kChunks];
  __shared__ Stats red_ml[kGroups];

  const int64_t row = blockIdx.x;  // < total_rows: the grid has one block per row
  const int tid = threadIdx.x;
  const int c = tid % kChunks, g = tid / kChunks;

  Stats acc = ch02::gpu::empty_stats();
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t s0 = g; s0 < p.num_splits; s0 += int64_t(kGroups) * kBatch) {
    // Issue every load of the batch first: none depends on another or on the arithmetic below.
    float2 ml[kBatch];
    float4 part[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t s = s0 + int64_t(kGroups) * u;
      if (s < p.num_splits) {
        const int64_t w = s * p.total_rows + row;
        ml[u] = __ldg(p.ws_ml + w);
        part[u] = __ldg(reinterpret_cast<const float4*>(p.ws_o + w * D) + c);
      } else {
        ml[u] = make_float2(-INFINITY, 0.0f);  // the identity (-inf, 0, 0): changes nothing
        part[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    // Then fold them: chapter 02's pair merge, o rescaled by the same factors as l.
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const Stats s{ml[u].x, ml[u].y};
      const Stats merged = ch02::gpu::merge(acc, s);
      const float fa = ch02::gpu::rescale(acc.m, merged.m);
      const float fb = ch02::gpu::rescale(s.m, merged.m);
      o.x = o.x * fa + part[u].x * fb;
      o.y = o.y * fa + part[u].y * fb;
      o.z = o.z * fa + part[u].z * fb;
      o.w = o.w * fa + part[u].w * fb;
      acc = merged;
    }
  }

  // The groups' states: every thread of group g holds the same (m, l) (same splits, same order).
  red_o[g][c] = o;
  if (c == 0) red_ml[g] = acc;
  __syncthreads();
  if (tid >= D) return;
  const int d = tid;
  Stats tot = ch02::gpu::empty_stats();
  float od = 0.0f;
#pragma unroll
  for (int gg = 0; gg < kGroups; ++gg) {
    const Stats s = red_ml[gg];
    const Stats merged = ch02::gpu::merge(tot, s);
    const float x = reinterpret_cast<const float*>(&red_o[gg][0])[d];
    od = od * ch02::gpu::rescale(tot.m, merged.m) + x * ch02::gpu::rescale(s.m, merged.m);
    tot = merged;
  }
  // A row that saw no key in any split: l = 0, O = 0 and L = -inf.
  static_cast<T*>(p.o)[row * D + d] = Traits<T>::from_float(tot.l > 0.0f ? od / tot.l : 0.0f);
  if (d == 0) p.lse[row] = tot.l > 0.0f ? tot.m + logf(tot.l) : -INFINITY;
}

// One block per output row; a no-op with a single split (the split kernel wrote O and L).
template <class T, int D>
void launch_merge(const Params& p, cudaStream_t stream) {
  if (p.num_splits <= 1) return;
  FA_UNSUPPORTED_IF(p.total_rows > 0x7fffffff, "more than 2^31 - 1 merge blocks");
  parallel_merge_kernel<T, D><<<unsigned(p.total_rows), kMergeThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

// The forward for the dtype and the head dim (64, 128): the split kernel, then the merge.
template <class T, int D>
void forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  launch_merge<T, D>(launch_split_kv<T, D>(a, stream), stream);
}

template <class T>
void dispatch_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return forward<T, 64>(a, stream);
    case 128:
      return forward<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + " takes head dims 64 and 128");
  }
}

void mma_split_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(), "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(
      !ch02::gpu::aligned16(a.k) || !ch02::gpu::aligned16(a.v),
      std::string(kName) + " copies K and V 16 bytes at a time: they must be 16-byte aligned");
  FA_UNSUPPORTED_IF(!aligned4(a.q) || !aligned4(a.o),
                    std::string(kName) +
                        " reads Q and writes O two elements at a time: they must be 4-byte "
                        "aligned");
  switch (a.dtype) {
    case DType::F32:
      FA_UNSUPPORTED_IF(true, std::string(kName) + " runs on tensor cores: fp16 and bf16 only");
      return;
    case DType::F16:
      return dispatch_dim<__half>(a, stream);
    case DType::BF16:
      return dispatch_dim<__nv_bfloat16>(a, stream);
  }
}

}  // namespace

FA_REGISTER(
    AttentionFwdKernel,
    {kName,
     mma_split_forward,
     "v2 with the split kernel on tensor cores: one warp per split, the group's rows padded to an "
     "m16 tile, S and P V on mma.sync, a 4-stage cp.async K/V ring per warp, no block barrier; "
     "v2's merge",
     {DType::F16, DType::BF16},
     {64, 128},
     /*min_sm=*/80,
     /*gqa=*/true,
     /*decoding=*/true});
