// GENERATED from chapters/08_decoding/v1_split_kv.cu by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// 08/v1_split_kv: the split-KV decoding forward ("flash-decoding"), fp32/fp16/bf16, D 64 and 128,
// grouped-query attention included. The chapter's first rung.
//
// Decoding asks for a few query rows (seq_q 1..16) against a long K/V cache. The forward kernels of
// chapter 05 give each block a tile of query rows of one head, so there the grid is B * H blocks
// (16 at B 1, H 16) that each walk all seq_k keys one after another: a few SMs' worth of blocks
// streaming K and V while the rest of the GPU idles. This rung cuts the keys into splits as well
// (the plan in split_kv_plan.h: enough splits to fill whole waves of resident blocks on every SM),
// and merges the splits' partial softmax states with chapter 02's pair merge, whose associativity
// is what makes any cut of the keys give the whole row's answer.
//
// The map. The split kernel: one block of kThreads = 128 per (sequence, K/V head, tile of <= kRows
// query rows of the group, split of the keys). The block
//   1. loads its rows' Q once (all query heads of one K/V head: GQA's K/V are read once per group),
//      scaled by softmax_scale * log2(e) so that the softmax uses exp2;
//   2. walks its split in tiles of kBc keys: K and V come in with 16-byte loads into registers one
//      tile ahead (the loads of tile t+1 are in flight while tile t is computed), then go to padded
//      shared memory; phase 1, S = Q K^T (one key per thread); phase 2, the online softmax per row
//      (one warp per row); phase 3, O = alpha O + P V (threads split the columns, rows and keys);
//   3. writes its partial (m, l, o) per row to the workspace (split_kv.cuh), or with a single
//      split the final O and L directly.
// The merge kernel: one warp per output row folds the row's splits with the pair merge.
//
// CUDA cores only: with at most 16 rows per block each loaded K or V element feeds at most 16
// FMAs, which the CUDA cores keep up with at HBM speed for one row per K/V head; at 4 rows
// (GQA-4) the kernel is instruction-bound (notes/08_decoding.md), which is v3's job.
//
// Speed (H100 80GB HBM3, 2026-11-23): bf16 D 128, seq_q 1, B 8 H 32 H_kv 8 seq_k 32768: 2509 GB/s,
// 87.9% of copy; FlashAttention-2 3016 (notes/measured/h100-2026-11-23e/decode_v5_v6_fold.log).
// EXERCISE-KERNELS: 08/v1_split_kv
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "online_softmax.cuh"  // Stats, merge, rescale: the pair merge
#include "split_kv.cuh"        // Params, Traits, the workspace, the occupancy, make_params
#include "split_kv_plan.h"     // the split plan
#include "check.h"
#include "registry.h"

namespace {

constexpr const char* kName = "08/v1_split_kv";
constexpr int kThreads = 128;  // threads per block of the split kernel

// The split kernel's layout, shared by the kernel and the launcher (shared-memory bytes).
template <class T, int D, int kRows>
struct Layout {
  static constexpr int kVec = Traits<T>::kVec;
  static constexpr int kBc = sizeof(T) == 4 ? 32 : 64;  // keys per tile: 16 KB of K at D 128
  static constexpr int kChunks = D / kVec;              // 16-byte chunks per K/V row
  static constexpr int kPitch = D + kVec;  // a row padded by 16 bytes: conflict-free chunk reads
  // Phase 1 (S = Q K^T): thread t takes key t % kBc and rows g, g + kGroups1, ... (g = t / kBc).
  static constexpr int kGroups1 = kThreads / kBc;
  static constexpr int kRows1 = (kRows + kGroups1 - 1) / kGroups1;
  // Phase 3 (O += P V): thread t takes chunk t % kChunks of rows rg + kRG * i and keys
  // kg + kKG * u; the kKG key groups' sums are added at the end.
  static constexpr int kCombos = kThreads / kChunks;
  static constexpr int kRG = kRows < kCombos ? kRows : kCombos;
  static constexpr int kKG = kCombos / kRG;
  static constexpr int kRows3 = kRows / kRG;
  static constexpr int kLoads = kBc * kChunks / kThreads;  // 16-byte loads per thread per tensor
  static constexpr size_t kTileBytes = size_t(kBc) * kPitch * sizeof(T);
  static constexpr size_t kSmem = 2 * kTileBytes + 2 * kRows * sizeof(int64_t) +
                                  (size_t(kRows) * D + size_t(kRows) * kBc + 3 * kRows) * 4;
  static_assert(D % kVec == 0 && kThreads % kChunks == 0,
                "head dim must split into 16-byte chunks");
  static_assert((kBc * kChunks) % kThreads == 0 && kBc % kKG == 0, "tile must split over threads");
  static_assert(size_t(kKG) * kRows * D * 4 <= 2 * kTileBytes, "reduction must fit the K/V tiles");
  static_assert(kSmem <= 48 * 1024, "no opt-in to more than 48 KiB of shared memory here");
};

template <class T, int D, int kRows>
__global__ void __launch_bounds__(kThreads) split_kv_kernel(Params p) {
  using Tr = Traits<T>;
  using Lay = Layout<T, D, kRows>;
  constexpr int kVec = Lay::kVec, kBc = Lay::kBc, kChunks = Lay::kChunks, kPitch = Lay::kPitch;
  constexpr int kGroups1 = Lay::kGroups1, kRows1 = Lay::kRows1;
  constexpr int kRG = Lay::kRG, kKG = Lay::kKG, kRows3 = Lay::kRows3, kLoads = Lay::kLoads;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(16) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kBc * kPitch;
  int64_t* last_s = reinterpret_cast<int64_t*>(Vs + kBc * kPitch);  // last visible key per row
  int64_t* row_s = last_s + kRows;                                  // output row index per row
  float* Qs = reinterpret_cast<float*>(row_s + kRows);              // [kRows][D], log2 units
  float* Ss = Qs + kRows * D;                                       // [kRows][kBc]: S, then P
  float* m_s = Ss + kRows * kBc;
  float* l_s = m_s + kRows;
  float* alpha_s = l_s + kRows;
  float* red = reinterpret_cast<float*>(smem);  // after the last tile: [kKG][kRows][D]

  // Which (sequence, K/V head), row tile and split this block owns. 64-bit from here on: the grid
  // has up to 2^31 - 1 blocks and the tensors more than 2^31 elements.
  const int64_t bid = blockIdx.x;
  const int64_t split = bid % p.num_splits;
  const int64_t rest = bid / p.num_splits;
  const int64_t r0 = (rest % p.row_tiles) * kRows;
  const int64_t bkv = rest / p.row_tiles;  // b * heads_kv + kv head
  const int64_t b = bkv / p.heads_kv, kvh = bkv % p.heads_kv;
  const int nrows = int(imin(kRows, p.rows_per_kv - r0));
  const int tid = threadIdx.x;

  // Rows: r0 + r = i * group + g is query i of query head kvh * group + g.
  if (tid < kRows) {
    const int64_t rr = r0 + tid;
    const int64_t i = rr / p.group, h = kvh * p.group + rr % p.group;
    row_s[tid] = (b * p.heads + h) * p.seq_q + i;
    last_s[tid] = tid >= nrows ? -1 : p.causal ? i + (p.seq_k - p.seq_q) : p.seq_k - 1;
    m_s[tid] = kNegInf;
    l_s[tid] = 0.0f;
  }
  const T* q = static_cast<const T*>(p.q);
  for (int idx = tid; idx < kRows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float x = 0.0f;
    if (r < nrows) {
      const int64_t rr = r0 + r;
      const int64_t h = kvh * p.group + rr % p.group;
      x = Tr::to_float(q[((b * p.heads + h) * p.seq_q + rr / p.group) * D + d]) * p.scale_log2;
    }
    Qs[idx] = x;
  }

  // This block's keys: its split, cut at the last key any of its rows sees.
  const int64_t k_begin = split * p.split_len;
  int64_t k_end = imin(p.seq_k, k_begin + p.split_len);
  if (p.causal) {
    const int64_t last_i = (r0 + nrows - 1) / p.group;
    k_end = imin(k_end, last_i + (p.seq_k - p.seq_q) + 1);
  }
  const int64_t ntiles = k_end > k_begin ? (k_end - k_begin + kBc - 1) / kBc : 0;

  const T* kbase = static_cast<const T*>(p.k) + bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + bkv * p.seq_k * D;
  uint4 kreg[kLoads], vreg[kLoads];
  auto load_tile = [&](int64_t k0) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int idx = tid + u * kThreads, j = idx / kChunks, c = idx % kChunks;
      const int64_t key = k0 + j;
      if (key < k_end) {
        kreg[u] = __ldg(reinterpret_cast<const uint4*>(kbase + key * D) + c);
        vreg[u] = __ldg(reinterpret_cast<const uint4*>(vbase + key * D) + c);
      } else {
        kreg[u] = vreg[u] = make_uint4(0, 0, 0, 0);  // past the split: zeros, never NaN
      }
    }
  };

  const int c3 = tid % kChunks, rg = (tid / kChunks) % kRG, kg = tid / kChunks / kRG;
  float acc[kRows3][kVec];
#pragma unroll
  for (int i = 0; i < kRows3; ++i)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[i][e] = 0.0f;

  if (ntiles > 0) load_tile(k_begin);
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t k0 = k_begin + t * kBc;
    __syncthreads();  // the previous tile is done with Ks, Vs, Ss (and Qs, m_s, l_s are written)
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int idx = tid + u * kThreads, j = idx / kChunks, c = idx % kChunks;
      *reinterpret_cast<uint4*>(Ks + j * kPitch + c * kVec) = kreg[u];
      *reinterpret_cast<uint4*>(Vs + j * kPitch + c * kVec) = vreg[u];
    }
    __syncthreads();
    if (t + 1 < ntiles) load_tile(k0 + kBc);  // in flight while this tile is computed

    // Phase 1: S[r][j] = q_r . k_j (already scaled), -inf where row r must not see key j.
    {
      const int j = tid % kBc, g = tid / kBc;
      float s[kRows1];
#pragma unroll
      for (int i = 0; i < kRows1; ++i) s[i] = 0.0f;
      const T* krow = Ks + j * kPitch;
#pragma unroll 4
      for (int c = 0; c < kChunks; ++c) {
        float kf[kVec];
        Tr::unpack(*reinterpret_cast<const uint4*>(krow + c * kVec), kf);
#pragma unroll
        for (int i = 0; i < kRows1; ++i) {
          const int r = g + kGroups1 * i;
          if (r < kRows) {
            const float* qr = Qs + r * D + c * kVec;  // the same address across the warp: broadcast
#pragma unroll
            for (int e = 0; e < kVec; ++e) s[i] = fmaf(qr[e], kf[e], s[i]);
          }
        }
      }
      const int64_t key = k0 + j;
#pragma unroll
      for (int i = 0; i < kRows1; ++i) {
        const int r = g + kGroups1 * i;
        if (r < kRows) Ss[r * kBc + j] = (key < k_end && key <= last_s[r]) ? s[i] : kNegInf;
      }
    }
    __syncthreads();

    // Phase 2: the online softmax of each row over this tile (one warp per row). m and l live in
    // log2 units; alpha = 2^(m_old - m_new) rescales what was accumulated so far.
    {
      const int warp = tid / 32, lane = tid % 32;
      for (int r = warp; r < kRows; r += kThreads / 32) {
        float s[kBc / 32];
        float mx = kNegInf;
#pragma unroll
        for (int u = 0; u < kBc / 32; ++u) {
          s[u] = Ss[r * kBc + lane + 32 * u];
          mx = fmaxf(mx, s[u]);
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float m_old = m_s[r];
        const float m_new = fmaxf(m_old, mx);
        const float m_use = m_new == kNegInf ? 0.0f : m_new;  // nothing seen yet: no -inf - -inf
        float sum = 0.0f;
#pragma unroll
        for (int u = 0; u < kBc / 32; ++u) {
          const float pr = exp2f(s[u] - m_use);
          Ss[r * kBc + lane + 32 * u] = pr;
          sum += pr;
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        // Every lane read m_s[r] above; lane 0 overwrites it below. The shuffles keep the warp in
        // step, but only a warp barrier also orders the shared-memory accesses (racecheck reported
        // this write-after-read on the H100, 2026-11-23).
        __syncwarp();
        if (lane == 0) {
          const float alpha = exp2f(m_old - m_use);
          alpha_s[r] = alpha;
          l_s[r] = l_s[r] * alpha + sum;
          m_s[r] = m_new;
        }
      }
    }
    __syncthreads();

    // Phase 3: o_r = alpha_r o_r + sum_j P[r][j] v_j over this thread's rows, keys and columns.
    {
#pragma unroll
      for (int i = 0; i < kRows3; ++i) {
        const float a = alpha_s[rg + kRG * i];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[i][e] *= a;
      }
#pragma unroll 4
      for (int u = 0; u < kBc / kKG; ++u) {
        const int j = kg + kKG * u;
        float vf[kVec];
        Tr::unpack(*reinterpret_cast<const uint4*>(Vs + j * kPitch + c3 * kVec), vf);
#pragma unroll
        for (int i = 0; i < kRows3; ++i) {
          const float pr = Ss[(rg + kRG * i) * kBc + j];
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[i][e] = fmaf(pr, vf[e], acc[i][e]);
        }
      }
    }
  }

  // Epilogue: add up the key groups' sums, then write this split's partial (or, with one split,
  // the final O and L). A row that saw no key has m = -inf, l = 0, o = 0: O = 0 and L = -inf.
  __syncthreads();  // every thread is done with Ks and Vs, which `red` reuses
#pragma unroll
  for (int i = 0; i < kRows3; ++i)
#pragma unroll
    for (int e = 0; e < kVec; ++e) red[(kg * kRows + rg + kRG * i) * D + c3 * kVec + e] = acc[i][e];
  __syncthreads();
  for (int idx = tid; idx < nrows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float o = 0.0f;
#pragma unroll
    for (int g = 0; g < kKG; ++g) o += red[(g * kRows + r) * D + d];
    const float m = m_s[r], l = l_s[r];
    const int64_t row = row_s[r];
    if (p.num_splits == 1) {
      static_cast<T*>(p.o)[row * D + d] = Tr::from_float(l > 0.0f ? o / l : 0.0f);
      if (d == 0) p.lse[row] = l > 0.0f ? (m + log2f(l)) * kLn2 : kNegInf;
    } else {
      const int64_t w = split * p.total_rows + row;
      p.ws_o[w * D + d] = o;
      if (d == 0) p.ws_ml[w] = make_float2(m == kNegInf ? kNegInf : m * kLn2, l);
    }
  }
}

// Plans and launches the split kernel for kRows rows per block; returns the parameters, which
// the merge takes when p.num_splits > 1 (with one split the kernel wrote O and L).
template <class T, int D, int kRows>
Params launch_split_kv(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Lay = Layout<T, D, kRows>;
  auto kernel = split_kv_kernel<T, D, kRows>;
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      a.shape, Lay::kBc, resident_blocks((const void*)kernel, kThreads, Lay::kSmem));
  FA_REQUIRE(plan.rows_per_block == kRows, "internal: the plan and the launch disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kThreads, Lay::kSmem, stream>>>(p);
  FA_CHECK_LAUNCH();
  return p;
}

// The merge: one warp per output row folds the splits' partials with chapter 02's pair merge;
// o is rescaled by the same factors as l.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) merge_splits_kernel(Params p) {
  using ch02::gpu::Stats;
  constexpr int kPerLane = (D + 31) / 32;
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.total_rows) return;
  Stats acc = ch02::gpu::empty_stats();
  float o[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) o[e] = 0.0f;
  for (int64_t s = 0; s < p.num_splits; ++s) {
    const int64_t w = s * p.total_rows + row;
    const float2 ml = p.ws_ml[w];
    const Stats part{ml.x, ml.y};
    // TODO(exercise pair-merge): fold split s's partial state (its maximum, sum and unnormalised o row in the workspace) into the running one with chapter 02's merge rule; each side's o is rescaled by exactly the factor that rescales its l
    (void)part;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < D)
      static_cast<T*>(p.o)[row * D + d] = Traits<T>::from_float(acc.l > 0.0f ? o[e] / acc.l : 0.0f);
  }
  if (lane == 0) p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : -INFINITY;
}

// One warp per output row; a no-op with a single split (the split kernel wrote O and L).
template <class T, int D>
void launch_merge(const Params& p, cudaStream_t stream) {
  if (p.num_splits <= 1) return;
  const int64_t blocks = fa::ceil_div(p.total_rows, kThreads / 32);
  FA_UNSUPPORTED_IF(blocks > 0x7fffffff, "more than 2^31 - 1 merge blocks");
  merge_splits_kernel<T, D><<<unsigned(blocks), kThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

// The forward for the dtype, the head dim (64, 128) and the rows per block (the power of two >=
// group * seq_q, at most 16) of the problem: the split kernel, then the merge.
template <class T, int D, int kRows>
void forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  launch_merge<T, D>(launch_split_kv<T, D, kRows>(a, stream), stream);
}

template <class T, int D>
void dispatch_rows(const AttentionFwdArgs& a, cudaStream_t stream) {
  const int64_t rows = a.shape.group() * a.shape.seq_q;
  if (rows <= 1)
    forward<T, D, 1>(a, stream);
  else if (rows <= 2)
    forward<T, D, 2>(a, stream);
  else if (rows <= 4)
    forward<T, D, 4>(a, stream);
  else if (rows <= 8)
    forward<T, D, 8>(a, stream);
  else
    forward<T, D, 16>(a, stream);
}

template <class T>
void dispatch_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return dispatch_rows<T, 64>(a, stream);
    case 128:
      return dispatch_rows<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + " takes head dims 64 and 128");
  }
}

void split_kv_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(), "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(
      !ch02::gpu::aligned16(a.k) || !ch02::gpu::aligned16(a.v),
      std::string(kName) + " loads K and V 16 bytes at a time: they must be 16-byte aligned");
  switch (a.dtype) {
    case DType::F32:
      return dispatch_dim<float>(a, stream);
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
     split_kv_forward,
     "split-KV decoding: keys split across blocks to fill every SM, partial (m, l, o) merged "
     "with the chapter 02 pair merge; GQA K/V read once per group",
     {DType::F32, DType::F16, DType::BF16},
     {64, 128},
     /*min_sm=*/80,
     /*gqa=*/true,
     /*decoding=*/true});

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/08_decoding/exercises/v1_split_kv.cu", {"08/v1_split_kv"}, 1});
