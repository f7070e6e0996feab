// 08/v5_block_stream: 08/v4_hoisted_addresses with four warps per block sharing one stream of K
// and V. One idea: the same arithmetic, fed by bigger and fewer bursts of memory traffic.
//
// Why. After v4 cut the instructions of a step by a third (PTX), the grouped shape (B 8, H 32,
// H_kv 8, seq_k 32768, bf16, D 128) sped up by 1% only: 2741 GB/s against v3's 2701 (H100,
// 2026-11-23, notes/measured/h100-2026-11-23e/call1_decode.log). Throwaway variants that cut the
// arithmetic further (skip the O rescale when no row's max moved, mask only the edge steps,
// ex2.approx, split the S accumulation into two chains, 32 keys per step) moved it by -2% to +1%,
// though Nsight Compute counted 35% fewer instructions for the best of them. The arithmetic is
// not the bound. What v3 and v4 do differently from the kernels that stream faster (v2 on the
// multi-head shapes, 3020 GB/s; FlashAttention-2 on this one, 3011) is the shape of the traffic:
// 768 one-warp blocks, each reading K and V as 4 KB bursts (16 keys x 256 B), 1536 streams at once.
//
// What changed. A block is four warps (kThreads = 128). The block copies a tile of kTile = 64
// keys (16 KB of K and 16 KB of V at D 128) into a two-stage ring with v4's copy plan spread over
// 128 threads, one __syncthreads per step (the ring has no per-warp stages any more). Warp w
// computes keys [16 w, 16 w + 16) of every tile with exactly v4's step and keeps its own (m, l, o):
// its keys are every fourth 16-key slice of the split, not a contiguous range. At the end the four
// states of each row are folded with chapter 02's pair merge (ch02::gpu::merge, rescale) through
// shared memory, and the block writes one partial per row, as v4 did (or O and L with one split).
// That the keys are interleaved does not matter: the operator is associative and commutative, so
// any partition of a row's keys, folded in any order, gives the same (m, l, o) up to rounding.
// Shared memory: 2 stages x (K + V) x 64 keys x (D + 8) x 2 B = 69632 B at D 128 (opt-in past
// 48 KiB), 2 blocks (8 warps) per H100 SM, capped by registers (206 x 128 threads per block at D 128).
// The grid: 256 blocks at this shape, 512 streams of 16 KB bursts, about what FlashAttention-2
// runs (256 blocks of 4 warps, 32 KB bursts; notes/measured/h100-2026-11-23d/call1_ncu_fa2_*).
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, fifth session, call 6 at commit 19f12a2;
// bench/compare_decode.py, bf16 D 128, seq_q 1, copy ceiling 2856 GB/s, SDPA in the same run:
// notes/measured/h100-2026-11-23e/call6_decode.log). Grouped shape: 2841 GB/s (99.5% of copy), v4
// 2742, FlashAttention-2 3016. B 1, H 16, seq_k 131072: 2825 (v4 2781); B 8, H 32: 2919 (v4 2878).
// The throwaway versions measured before (calls 2 and 3: one partial per warp, merged by v2's
// merge kernel) gave the same: 2843 and 2836 on the grouped shape, where 3 stages instead of 2
// (two tiles in flight, 2 blocks per SM still) gave 2719, and 8 warps on 128-key tiles (32 KB
// bursts, 1 block per SM) 2849 and 2818: more bytes in flight did not help, bigger bursts past
// 16 KB neither.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"      // padded tiles and their cp.async loader
#include "ch08_parallel_merge.cuh"  // v2's merge
#include "ch08_split_kv.cuh"        // Params, make_params, resident_blocks
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

constexpr int kWarp = 32;      // threads per block: one warp
constexpr int kTileRows = 16;  // query rows per warp: one m16 tile
constexpr int kKeys = 16;      // keys per warp per step: two n8 tiles of S, one k16 slice of P V
constexpr int kWarps = 4;      // warps per block, each its own kKeys of every tile
constexpr int kTile = kWarps * kKeys;  // keys per block per step: one 16 KB burst of K at D 128
constexpr int kStages = 2;             // shared-memory stages per block (one in flight)
static_assert(kThreads == kWarps * kWarp, "ch08_split_kv.cuh's kThreads: four warps");

template <int D>
struct MmaLayout {
  static constexpr int kPitch = fa::tiles::kPitch<D>;                 // D + 8 elements per row
  static constexpr int kStageElems = 2 * kTile * kPitch;              // K rows, then V rows
  static constexpr size_t kSmem = size_t(kStages) * kStageElems * 2;  // 16-bit elements
  // 69632 B at D 128: past the 48 KiB default, so the launcher opts in (sm_80 and later allow it).
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) mma_split_kernel(Params p) {
  using Lay = MmaLayout<D>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this block owns (64-bit, as in v1).
  const int64_t bid = blockIdx.x;
  const int64_t split = bid % p.num_splits;
  const int64_t rest = bid / p.num_splits;
  const int64_t r0 = (rest % p.row_tiles) * kTileRows;
  const int64_t bkv = rest / p.row_tiles;  // b * heads_kv + kv head
  const int64_t b = bkv / p.heads_kv, kvh = bkv % p.heads_kv;
  const int nrows = int(imin(kTileRows, p.rows_per_kv - r0));

  // This lane's two rows: r0 + r = i * group + gq is query i of query head kvh * group + gq. Rows
  // past the group's (padding) see no key (last = -1) and are never written.
  int64_t out_row[2], last[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t rr = r0 + r;
    const int64_t i = rr / p.group, qh = kvh * p.group + rr % p.group;
    out_row[h] = (b * p.heads + qh) * p.seq_q + i;
    last[h] = r >= nrows ? -1 : p.causal ? i + (p.seq_k - p.seq_q) : p.seq_k - 1;
  }

  // Q as A fragments, straight from global memory (mma.cuh: a[0] = A[g][2t, 2t+1], a[1] = A[g+8]
  // [2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9] of each k16 slice).
  uint32_t qf[D / 16][4];
  {
    const T* q = static_cast<const T*>(p.q);
    const uint32_t* qrow[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      qrow[h] = g + 8 * h < nrows ? reinterpret_cast<const uint32_t*>(q + out_row[h] * D) : nullptr;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t* src = qrow[j & 1];
        const int col = kk * 16 + 8 * (j / 2) + 2 * t4;  // even: one 32-bit word, two elements
        qf[kk][j] = src != nullptr ? __ldg(src + col / 2) : 0u;
      }
  }

  // This block's keys: its split, cut at the last key any of its rows sees (as in v1).
  const int64_t k_begin = split * p.split_len;
  int64_t k_end = imin(p.seq_k, k_begin + p.split_len);
  if (p.causal) {
    const int64_t last_i = (r0 + nrows - 1) / p.group;
    k_end = imin(k_end, last_i + (p.seq_k - p.seq_q) + 1);
  }
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kTile - 1) / kTile : 0;
  const T* kbase = static_cast<const T*>(p.k) + bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + bkv * p.seq_k * D;

  // The copies, planned once, as in v4 but by the whole block: a step's K (and V) is kTile rows of
  // kChunks 16-byte chunks; thread tid copies chunk cp_col / 8 of rows cp_row + kRowsPerPass * i,
  // i < kPasses. Only the split's last step, which may hold fewer than kTile keys, tests each row.
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  constexpr int kPasses = kTile / kRowsPerPass;
  constexpr uint32_t kStageBytes = Lay::kStageElems * 2, kVBytes = kTile * kPitch * 2;
  static_assert(kThreads % kChunks == 0 && kTile % kRowsPerPass == 0, "chunks must tile the block");
  const int cp_row = tid / kChunks, cp_col = (tid % kChunks) * 8;
  const uint32_t cp_dst = fa::mma::smem_addr(stages) + uint32_t(cp_row * kPitch + cp_col) * 2;
  const T* const k_src = kbase + (k_begin + cp_row) * D + cp_col;
  const T* const v_src = vbase + (k_begin + cp_row) * D + cp_col;

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last step,
  // so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  auto issue = [&](int64_t st) {
    if (st < nsteps) {
      const uint32_t dst = cp_dst + uint32_t(st % kStages) * kStageBytes;
      const int64_t off = st * (kTile * D);
      const int64_t left = k_end - (k_begin + st * kTile);  // keys of the split from this step on
      if (left >= kTile) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          fa::mma::cp_async_16(dst + i * kRowsPerPass * kPitch * 2,
                               k_src + off + i * kRowsPerPass * D);
          fa::mma::cp_async_16(dst + kVBytes + i * kRowsPerPass * kPitch * 2,
                               v_src + off + i * kRowsPerPass * D);
        }
      } else {
        T* sk = stages + int(st % kStages) * Lay::kStageElems;
        const int64_t k0 = k_begin + st * kTile;
        fa::tiles::load_tile_async<D, kTile, kThreads>(sk, kbase, k0, k_end, tid);
        fa::tiles::load_tile_async<D, kTile, kThreads>(sk + kTile * kPitch, vbase, k0, k_end, tid);
      }
    }
    fa::mma::cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(st);

  // ldmatrix lane offsets, as in chapter 05 (ch05_mma_fwd.cuh). K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  // As 32-bit shared addresses of stage 0, in bytes: a step adds its stage's offset, a fragment a
  // compile-time constant. Warp w reads keys [w * kKeys, (w + 1) * kKeys) of each tile.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);
  const uint32_t k_ld =
      fa::mma::smem_addr(stages) + uint32_t((warp * kKeys + k_ld_row) * kPitch + k_ld_col) * 2;
  const uint32_t v_ld = fa::mma::smem_addr(stages) + kVBytes +
                        uint32_t((warp * kKeys + v_ld_row) * kPitch + v_ld_col) * 2;

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf};  // running max, log2 units (rows g, g + 8)
  float l[2] = {0.0f, 0.0f};        // this lane's share of the running sum (its columns)

  for (int64_t st = 0; st < nsteps; ++st) {
    fa::mma::cp_async_wait<kStages - 2>();  // this thread's copies of step st have landed
    __syncthreads();  // everyone's have, and every warp is done with the stage of step st - 1
    issue(st + kStages - 1);  // into that stage: in flight while step st is computed
    const uint32_t stage = uint32_t(st % kStages) * kStageBytes;

    // S = Q K^T: 16 rows x 16 keys, two n8 accumulator tiles.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[4];
      fa::mma::ldmatrix_x4(kb, k_ld + stage + kk * 16 * 2);
      const uint32_t b_lo[2] = {kb[0], kb[1]}, b_hi[2] = {kb[2], kb[3]};
      fa::mma::mma_16816<T>(s[0], qf[kk], b_lo);
      fa::mma::mma_16816<T>(s[1], qf[kk], b_hi);
    }

    // Scale to log2 units and mask: s[nt][e] is row g + 8 (e / 2), key 8 nt + 2 t4 + e % 2.
    const int64_t k0 = k_begin + st * kTile + warp * kKeys;  // this warp's first key
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
      fa::mma::ldmatrix_x4_trans(vb, v_ld + stage + dp * 16 * 2);
      const uint32_t b_lo[2] = {vb[0], vb[1]}, b_hi[2] = {vb[2], vb[3]};
      fa::mma::mma_16816<T>(o[2 * dp], pa, b_lo);
      fa::mma::mma_16816<T>(o[2 * dp + 1], pa, b_hi);
    }
  }
  fa::mma::cp_async_wait<0>();  // nothing of this thread's left in flight (empty groups only)

  // Epilogue. Each warp holds the state (m, l, o) of the 16 rows over its quarter of the block's
  // keys; chapter 02's pair merge folds the four into one per row, through shared memory (the ring
  // is free: nothing is in flight, and the barrier below waits for every warp's last ldmatrix).
  // Then one partial per row and split, as v4 wrote, or with a single split O and L.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  using ch02::gpu::Stats;
  float* const red_o = reinterpret_cast<float*>(smem);  // [kWarps][kTileRows][D]
  Stats* const red_ml = reinterpret_cast<Stats*>(red_o + kWarps * kTileRows * D);
  static_assert(kWarps * kTileRows * (D * 4 + sizeof(Stats)) <= Lay::kSmem, "fits the ring");
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
  constexpr int kPerRow = kThreads / kTileRows, kCols = D / kPerRow;
  static_assert(kCols % 4 == 0, "float4 columns");
  const int r = tid / kPerRow, c0 = (tid % kPerRow) * kCols;
  if (r >= nrows) return;  // padding rows write nothing
  Stats acc = ch02::gpu::empty_stats();
  for (int w = 0; w < kWarps; ++w) acc = ch02::gpu::merge(acc, red_ml[w * kTileRows + r]);
  float f[kWarps];  // each warp's o rescaled by the factor that rescaled its l
  for (int w = 0; w < kWarps; ++w) f[w] = ch02::gpu::rescale(red_ml[w * kTileRows + r].m, acc.m);
  const int64_t rr = r0 + r;
  const int64_t row =
      (b * p.heads + kvh * p.group + rr % p.group) * p.seq_q + rr / p.group;  // as out_row
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
      *reinterpret_cast<float4*>(p.ws_o + (split * p.total_rows + row) * D + c) = v;
    }
  }
  if (tid % kPerRow == 0) {
    if (p.num_splits == 1)
      p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : kNegInf;
    else
      p.ws_ml[split * p.total_rows + row] = make_float2(acc.m, acc.l);
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Lay = MmaLayout<D>;
  auto kernel = mma_split_kernel<T, D>;
  FA_CUDA_CHECK(cudaFuncSetAttribute((const void*)kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(Lay::kSmem)));
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      a.shape, kTile, resident_blocks((const void*)kernel, kThreads, Lay::kSmem));
  // The plan tiles group * seq_q rows by at most 16 (kMaxRows): one m16 tile per tile.
  FA_REQUIRE(plan.row_tiles == fa::ceil_div(a.shape.group() * a.shape.seq_q, kTileRows),
             "internal: the plan's row tiles and the kernel's m16 tiles disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kThreads, Lay::kSmem, stream>>>(p);
  FA_CHECK_LAUNCH();
  launch_parallel_merge<T, D>(p, stream);
}

template <class T>
void launch_dtype(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "08/v5_block_stream takes head dims 64 and 128");
  }
}

bool aligned4(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 4 == 0;
}

void mma_split_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(), "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(!ch02::gpu::aligned16(a.k) || !ch02::gpu::aligned16(a.v),
                    "08/v5_block_stream copies K and V 16 bytes at a time: they must be 16-byte "
                    "aligned");
  FA_UNSUPPORTED_IF(!aligned4(a.q) || !aligned4(a.o),
                    "08/v5_block_stream reads Q and writes O two elements at a time: they must be "
                    "4-byte aligned");
  switch (a.dtype) {
    case DType::F16:
      return launch_dtype<__half>(a, stream);
    case DType::BF16:
      return launch_dtype<__nv_bfloat16>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "08/v5_block_stream runs on tensor cores: fp16 and bf16 only");
  }
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/v5_block_stream",
             mma_split_forward,
             "v4 with four warps per block sharing one K/V stream: the block copies 64-key tiles "
             "(16 KB bursts at D 128) into a 2-stage ring, each warp computes 16 keys of every "
             "tile and writes its own partial; v2's merge folds them",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
