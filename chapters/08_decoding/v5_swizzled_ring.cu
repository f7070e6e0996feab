// 08/v5_swizzled_ring: 08/v4_block_stream with K and V stored swizzled instead of padded in the
// ring. One idea: a shared-memory layout whose rows start at 128-byte boundaries, so that the
// cp.async of a whole row is one aligned piece of shared memory and of L2. fp16 and bf16, D 64
// and 128, grouped-query attention included, like v4.
//
// Why. On the grouped shape (B 8, H 32, H_kv 8, seq_k 32768, bf16, D 128) the block-streaming
// kernel reads from DRAM exactly the bytes of K and V, as FlashAttention-2 does, on the same grid,
// yet asks L2 for 50.3 M sectors where FA2 asks for 33.6 M; the extra 16.7 M are hits, the same
// sectors asked twice (Nsight Compute, H100, 2026-11-23 and 2026-11-24). The source page of the
// profile names the instructions: each full-step cp.async (a warp copies two rows of 256 bytes)
// counts 24 L2 sectors where 16 would do, and 10.5 shared-memory wavefronts where 4 would (FA2's
// copies: 16 and 4). The padding is the cause: a padded row (D + 8 elements) starts 16 bytes
// further modulo 128 than the one before, so every odd row of a warp's pair straddles 128-byte
// lines of shared memory, and the copy is split into pieces that ask L2 for the same 32-byte
// sectors again.
//
// What changed. The ring's rows are D elements apart, unpadded, and the 16-byte chunk c of row r
// is stored at chunk c ^ (r % 8) of its 128-byte group (fa::tiles::swizzled_offset). A warp's copy
// writes two whole aligned rows; the eight rows that one ldmatrix 8x8 matrix reads (same logical
// chunk, r % 8 = 0 .. 7) still land in eight different 16-byte bank groups, as the padding made
// them. A lane's ldmatrix rows all have r % 8 = lane % 8, so it keeps v4's unswizzled addresses
// and compile-time offsets and flips bits 4-6 of each with one XOR (fa::tiles::swizzle_xor). The
// split's last step, which tests rows, uses the swizzled form of v4's loader. The ring is 64 KiB
// instead of 68 at D 128. The full-step copies also carry the .L2::128B prefetch-size hint
// (fa::mma::cp_async_16_l2_128: L2 fetches whole 128-byte lines from DRAM, every byte of which is
// read anyway), measured on its own as tuning/t06_l2_prefetch.cu: +1% on v4.
//
// The file, top to bottom: mma_tile, mma_rows, mma_keys (the block's tile, each lane's rows and Q
// fragments, the block's keys); Ring (the shared-memory stages) and RingCopy (the copies into
// them); mma_step (one 16-key step of one warp); quad_sum and merge_warps (the epilogue);
// mma_split_kernel; launch_split_kv; v2's merge (parallel_merge_kernel, launch_merge); forward
// and the dtype / head-dim dispatch; the registration.
//
// Speed (H100 80GB HBM3, 2026-11-24): bf16 D 128, seq_q 1, B 8 H 32 H_kv 8 seq_k 32768: 3015 GB/s,
// 105.4% of copy; FlashAttention-2 3012, cuDNN 3031 (notes/measured/h100-2026-11-24/decode.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "online_softmax.cuh"   // Stats, merge, rescale: the pair merge
#include "attention_tiles.cuh"  // swizzled tiles and their cp.async loader
#include "split_kv.cuh"         // Params, Traits, the workspace, the occupancy, make_params
#include "split_kv_plan.h"      // the split plan
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

constexpr const char* kName = "08/v5_swizzled_ring";
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

// The copies, planned once per thread (the header tells why). A step's K (and V) is kRows rows of
// kChunks 16-byte chunks; thread tid of kThreads copies chunk cp_col / 8 of rows cp_row +
// kRowsPerPass * i, i < kPasses. From one i to the next its global source moves by kRowsPerPass * D
// elements and its shared destination by kRowsPerPass * kPitch: compile-time constants that ptxas
// folds into the instruction. From one step to the next the source moves by kRows * D and the
// stage by kStageBytes. So a full step is 2 * kPasses cp.async and a few adds; only the split's
// last step, which may hold fewer than kRows keys, tests each row (fa::tiles::load_tile_async
// zero-fills the rows past k_end).
template <class T, int D, int kRows, int kStages, int kThreads>
struct RingCopy {
  using R = Ring<D, kRows, kStages>;
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
    // The chunk moves within its row by cp_row % 8, the same for every pass (kRowsPerPass is a
    // multiple of 8), so the per-pass offsets stay constants.
    static_assert(kRowsPerPass % fa::tiles::kSwizzleRows == 0, "one XOR for all passes");
    const int cp_at = fa::tiles::swizzled_offset<D>(cp_row, cp_col / 8);
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
          fa::mma::cp_async_16_l2_128(d + i * kRowsPerPass * R::kPitch * 2,
                                      k_src + off + i * kRowsPerPass * D);
          fa::mma::cp_async_16_l2_128(d + R::kVBytes + i * kRowsPerPass * R::kPitch * 2,
                                      v_src + off + i * kRowsPerPass * D);
        }
      } else {
        T* sk = stages + int(st % kStages) * R::kStageElems;
        const int64_t k0 = k_begin + st * kRows;
        fa::tiles::load_tile_async<D, kRows, kThreads, true>(sk, kbase, k0, k_end, tid);
        fa::tiles::load_tile_async<D, kRows, kThreads, true>(sk + kRows * R::kPitch, vbase, k0,
                                                             k_end, tid);
      }
    }
    fa::mma::cp_async_commit();
  }
};

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

// The kWarps warps of the block each hold the state (m, l, o) of the tile's 16 rows over
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
      out[1] = fa::mma::pack2<T>(v.z * inv, v.w * inv);  // aligned, as in v3
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

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) mma_split_kernel(Params p) {
  using Lay = MmaLayout<D>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  // Swizzled rows must start at 128-byte boundaries (fa::tiles::swizzled_offset).
  extern __shared__ __align__(128) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this block owns; this lane's two rows and Q
  // fragments; the block's keys.
  const MmaTile t = mma_tile(p, blockIdx.x);
  int64_t out_row[2], last[2];
  uint32_t qf[D / 16][4];
  mma_rows<T, D>(p, t, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kTile - 1) / kTile : 0;
  const T* kbase = static_cast<const T*>(p.k) + t.bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + t.bkv * p.seq_k * D;

  // The copies, planned once per thread (RingCopy), by the whole block: kTile rows per step.
  const RingCopy<T, D, kTile, kStages, kThreads> copy(stages, kbase, vbase, k_begin, k_end, nsteps,
                                                      tid);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) copy.issue(st);

  // ldmatrix lane offsets, as in chapter 05. K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  // As 32-bit shared addresses of stage 0, in bytes: a step adds its stage's offset, a fragment a
  // compile-time constant. Warp w reads keys [w * kKeys, (w + 1) * kKeys) of each tile.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);
  const uint32_t k_ld =
      fa::mma::smem_addr(stages) + uint32_t((warp * kKeys + k_ld_row) * kPitch + k_ld_col) * 2;
  const uint32_t v_ld = fa::mma::smem_addr(stages) + Lay::kVBytes +
                        uint32_t((warp * kKeys + v_ld_row) * kPitch + v_ld_col) * 2;
  // Those are the unswizzled addresses; every row this lane reads is lane % 8 modulo 8.
  const uint32_t swz = fa::tiles::swizzle_xor(lane);

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
    copy.issue(st + kStages - 1);  // into that stage: in flight while step st is computed
    const uint32_t stage = uint32_t(st % kStages) * Lay::kStageBytes;

    const int64_t k0 = k_begin + st * kTile + warp * kKeys;  // this warp's first key
    mma_step<T, D>(qf, k_ld + stage, v_ld + stage, k0, k_end, last, p.scale_log2, t4, m, l, o, swz);
  }
  fa::mma::cp_async_wait<0>();  // nothing of this thread's left in flight (empty groups only)

  // Epilogue. Each warp holds the state (m, l, o) of the 16 rows over its quarter of the block's
  // keys; chapter 02's pair merge folds the four into one per row, through shared memory (the ring
  // is free now), and the block writes one partial per row and split, as v3 did, or with a single
  // split O and L (merge_warps).
  quad_sum(l);
  static_assert(kWarps * kTileRows * (D + 2) * 4 <= Lay::kSmem, "the fold fits in the ring");
  merge_warps<T, D, kWarps>(p, t, smem, tid, g, t4, m, l, o);
}

// Opts in to the shared memory, plans the splits for kTile-key steps and the kernel's residency
// (2 blocks per SM on an H100: registers), launches the split kernel; returns the parameters,
// which the merge takes when p.num_splits > 1.
template <class T, int D>
Params launch_split_kv(const AttentionFwdArgs& a, cudaStream_t stream) {
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
     "v4 with K and V swizzled instead of padded in shared memory (aligned whole-row copies) and "
     "the .L2::128B prefetch hint on its copies",
     {DType::F16, DType::BF16},
     {64, 128},
     /*min_sm=*/80,
     /*gqa=*/true,
     /*decoding=*/true});
