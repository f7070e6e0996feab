// 08/t09_d256: 08/t07_rounded_head_dims at D 256, taking the head dims from 136 to 256 (the
// multiples of 8) computed at 256. One idea: a copy plan whose passes cover fewer than the eight
// rows of the swizzle. A step of the tuning appendix that the dispatch runs for decoding above
// D 128: fp16 and bf16, grouped-query attention, before sm_90 and after.
//
// Why. Models decode at D 256 (Gemma's heads) and at 192, and decoding above 128 went to a kernel
// written for long query blocks: a block of 64 or 128 query rows for one, each block walking all
// the keys of its head with no split, so that B x H blocks (256 at the protocol's decode shape)
// stream the whole cache, most of them one per SM.
//
// What changed vs t07, and why each is needed at D 256:
//   * The copy plan (RingCopy). A row of 256 elements is 32 chunks of 16 bytes; 128 threads copy
//     4 rows a pass, where at D 64 and 128 they copied 16 and 8: whole groups of the swizzle's 8
//     rows, so that one XOR served every pass. Now passes alternate between rows r and r + 4,
//     whose XORs differ in one bit (4 = 100b): logical chunk c lands at chunk c ^ (r % 8) in even
//     passes and at c ^ (r % 8) ^ 4 in odd ones, 4 chunks (64 bytes) right or left of it. The
//     thread keeps both destinations (two registers) and each unrolled pass picks one at compile
//     time. The zeroing of the chunks past d (for d below 256) follows the same two places.
//   * The last block's fold (merge_splits) loads kBatch splits' partials before folding them: 8
//     splits of 32 columns (a thread's share at D 256) would be 256 registers. It loads 4 at a
//     time at D 256 (128 registers, as 8 of 16 columns at D 128).
//   * The launch: one instance, D 256; a head dim below it is computed there, the columns past d
//     zero, as t07 computes 80 at 128.
// Everything else is t07's at D = 256: a warp's Q fragments (64 registers) and O (128 registers)
// for the whole kernel, 2 stages of 64 keys of K and V in shared memory (128 KiB: one block per
// SM where t07 ran two; an A100 has 163 KiB, an H100 227; a GPU with 99 KiB a block does not run
// it), and the fold of the four warps through the ring (66 KiB).
//
// The file, top to bottom, as t07's: mma_tile, mma_rows, mma_keys; Ring and RingCopy; mma_step;
// quad_sum and merge_warps; merge_splits (the last block's fold); mma_split_kernel;
// launch_split_kv; forward and the dtype / head-dim dispatch; the registration.
//
// Speed (H100, 2026-12-06; tuning/README.md): 104-110% of the copy bandwidth on the three decode
// shapes at D 192 and 256; 2.1-5.3x 07/v5_persistent with grouped heads or one long cache.
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

constexpr const char* kName = "08/t09_d256";
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
__device__ __forceinline__ void mma_rows(const Params& p, const MmaTile& t, int d, int g, int t4,
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
    qrow[h] = g + 8 * h < t.nrows ? reinterpret_cast<const uint32_t*>(q + out_row[h] * d) : nullptr;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t* src = qrow[j & 1];
      const int col = kk * 16 + 8 * (j / 2) + 2 * t4;  // even: one 32-bit word, two elements
      qf[kk][j] = src != nullptr && col < d ? __ldg(src + col / 2) : 0u;  // d even: pairs whole
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

// The copies, planned once per thread (v5's header tells why). A step's K (and V) is kRows rows
// of kChunks 16-byte chunks of shared memory; thread tid of kThreads copies chunk cp_col / 8 of
// rows cp_row + kRowsPerPass * i, i < kPasses. From one i to the next its global source moves by
// kRowsPerPass * d elements (t07: the real row length, held in `pass`) and its shared destination
// by kRowsPerPass * kPitch; from one step to the next the source moves by kRows * d and the stage
// by kStageBytes. A thread whose chunk starts at or past d (`active` false) zeroes its chunks of
// every stage once and copies nothing after. Only the split's last step, which may hold fewer
// than kRows keys, tests each row (zero-filling the rows past k_end).
// t09: at D 256 a pass is 4 rows, half the swizzle's 8: the odd passes' rows have the other XOR,
// and their chunk sits at dst_odd's place in its row instead of dst's (the header says why).
template <class T, int D, int kRows, int kStages, int kThreads>
struct RingCopy {
  using R = Ring<D, kRows, kStages>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static_assert(kThreads % kChunks == 0 && kRows % kRowsPerPass == 0, "chunks must tile");
  // Passes of a whole number of swizzle groups (one XOR), or of half of one (two XORs, t09).
  static constexpr bool kTwoXors = kRowsPerPass % fa::tiles::kSwizzleRows != 0;
  static_assert(2 * kRowsPerPass % fa::tiles::kSwizzleRows == 0, "one or two XORs for the passes");

  int64_t k_begin, k_end, nsteps;
  int64_t pass, step;      // the source's move per pass (kRowsPerPass rows) and per step, elements
  uint32_t dst, dst_odd;   // this thread's first chunk in stage 0, even and odd passes (32-bit
                           // shared addresses, each less i * kRowsPerPass rows for pass i)
  const T *k_src, *v_src;  // ... and its source at the split's first key
  int cp_row;
  bool active;  // the chunk lies inside the real head dim

  // Where pass i's chunk lies in stage 0, in elements from the ring's start.
  static __device__ __forceinline__ int chunk_at(int cp_at, int cp_at_odd, int i) {
    return ((kTwoXors && (i & 1)) ? cp_at_odd : cp_at) + i * kRowsPerPass * R::kPitch;
  }
  // ... and as a 32-bit shared address (bytes).
  __device__ __forceinline__ uint32_t pass_dst(int i) const {
    return ((kTwoXors && (i & 1)) ? dst_odd : dst) + uint32_t(i * kRowsPerPass * R::kPitch * 2);
  }

  __device__ __forceinline__ RingCopy(T* stages, const T* kbase, const T* vbase, int64_t k_begin_,
                                      int64_t k_end_, int64_t nsteps_, int d, int tid)
      : k_begin(k_begin_), k_end(k_end_), nsteps(nsteps_) {
    cp_row = tid / kChunks;
    const int cp_col = (tid % kChunks) * 8;
    active = cp_col < d;
    pass = int64_t(kRowsPerPass) * d;
    step = int64_t(kRows) * d;
    // The chunk moves within its row by cp_row % 8 in the even passes and by (cp_row + 4) % 8 in
    // the odd ones (the same for all passes when kRowsPerPass is a multiple of 8), so the
    // per-pass offsets stay constants.
    const int cp_at = fa::tiles::swizzled_offset<D>(cp_row, cp_col / 8);
    const int cp_at_odd =
        fa::tiles::swizzled_offset<D>(cp_row + kRowsPerPass, cp_col / 8) - kRowsPerPass * R::kPitch;
    dst = fa::mma::smem_addr(stages) + uint32_t(cp_at) * 2;
    dst_odd = fa::mma::smem_addr(stages) + uint32_t(cp_at_odd) * 2;
    k_src = kbase + (k_begin + cp_row) * d + cp_col;
    v_src = vbase + (k_begin + cp_row) * d + cp_col;
    if (!active) {  // columns past d: zero in every stage, for good (no copy ever lands there)
      uint4* const chunk = reinterpret_cast<uint4*>(stages);
#pragma unroll
      for (int st = 0; st < kStages; ++st)
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int at = (st * R::kStageElems + chunk_at(cp_at, cp_at_odd, i)) / 8;  // in chunks
          chunk[at] = make_uint4(0u, 0u, 0u, 0u);
          chunk[at + R::kVBytes / 16] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
  }

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last
  // step, so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  __device__ __forceinline__ void issue(int64_t st) const {
    if (st < nsteps && active) {
      const uint32_t stage = uint32_t(st % kStages) * R::kStageBytes;
      const int64_t off = st * step;
      const int64_t left = k_end - (k_begin + st * kRows);  // keys of the split from this step on
      if (left >= kRows) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          fa::mma::cp_async_16_l2_128(pass_dst(i) + stage, k_src + off + i * pass);
          fa::mma::cp_async_16_l2_128(pass_dst(i) + stage + R::kVBytes, v_src + off + i * pass);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const bool in = cp_row + i * kRowsPerPass < left;  // rows past k_end: zeros
          fa::mma::cp_async_16(pass_dst(i) + stage, in ? k_src + off + i * pass : k_src, in);
          fa::mma::cp_async_16(pass_dst(i) + stage + R::kVBytes,
                               in ? v_src + off + i * pass : v_src, in);
        }
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
    if (p.num_splits == 1) {
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
// stores of this launch.
// t09: at D 256 a thread folds 32 columns (kVecs = 8), and 8 splits of them would be 256
// registers: batches of 4 there, the same 128 registers.
template <int D>
constexpr int batch() {
  return D <= 128 ? 8 : 4;
}

template <class T, int D>
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
      for (int v = 0; v < kVecs; ++v)  // partials have rows of d: none read past it
        part[u][v] = in && c0 + 4 * v < d
                         ? __ldcg(reinterpret_cast<const float4*>(p.ws_o + w * d + c0) + v)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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
  uint32_t* const out = reinterpret_cast<uint32_t*>(static_cast<T*>(p.o) + row * d + c0);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    if (c0 + 4 * v >= d) break;                                  // rows of d
    out[2 * v] = fa::mma::pack2<T>(o[v].x * inv, o[v].y * inv);  // 4-byte stores, as merge_warps
    out[2 * v + 1] = fa::mma::pack2<T>(o[v].z * inv, o[v].w * inv);
  }
  if (tid % kPerRow == 0) p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : -INFINITY;
}

// v6: `done` holds one counter per row tile (the block's index / num_splits), zero at launch.
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) mma_split_kernel(Params p, unsigned* done, int d) {
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
  mma_rows<T, D>(p, t, d, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kTile - 1) / kTile : 0;
  const T* kbase = static_cast<const T*>(p.k) + t.bkv * p.seq_k * d;  // rows of d elements
  const T* vbase = static_cast<const T*>(p.v) + t.bkv * p.seq_k * d;

  // The copies, planned once per thread (RingCopy), by the whole block: kTile rows per step.
  const RingCopy<T, D, kTile, kStages, kThreads> copy(stages, kbase, vbase, k_begin, k_end, nsteps,
                                                      d, tid);
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
  merge_warps<T, D, kWarps>(p, t, smem, d, tid, g, t4, m, l, o);
  if (p.num_splits == 1) return;  // O and L are written

  // v6: count this block's partial in; the tile's last block merges every split (header).
  __shared__ unsigned arrived;
  __threadfence();  // this thread's partial, visible to the GPU before the count says it is there
  __syncthreads();  // every thread's
  const int64_t tile = int64_t(blockIdx.x) / p.num_splits;
  if (tid == 0) arrived = atomicAdd(done + tile, 1u);
  __syncthreads();
  if (arrived != unsigned(p.num_splits - 1)) return;  // another split block is still running
  __threadfence();  // the other blocks' partials, seen after the count that said they are there
  merge_splits<T, D>(p, t, d, tid);
  if (tid == 0) done[tile] = 0;  // every split block of the tile has counted: zero for the next
}

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

// Opts in to the shared memory, plans the splits for kTile-key steps and the kernel's residency
// (2 blocks per SM on an H100: registers), launches the split kernel with the tile counters
// when there is more than one split.
template <class T, int D>
void launch_split_kv(const AttentionFwdArgs& a, cudaStream_t stream) {
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
  unsigned* done = p.num_splits > 1 ? tile_counters(plan.base_blocks) : nullptr;
  kernel<<<unsigned(plan.blocks), kThreads, Lay::kSmem, stream>>>(p, done, int(a.shape.head_dim));
  FA_CHECK_LAUNCH();
}

// The forward for the dtype and the instance D (256) that computes the head dim: the split
// kernel, which merges too.
template <class T, int D>
void forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  launch_split_kv<T, D>(a, stream);
}

// t09: every multiple of 8 up to 256, at 256 (the dispatch runs it above 128 only: t07 computes
// the others at 64 or 128, with less work).
template <class T>
void dispatch_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(d <= 0 || d > 256 || d % fa::kHeadDimStep != 0,
                    std::string(kName) +
                        " takes head dim 256, and the multiples of 8 below it rounded up; not " +
                        std::to_string(d));
  return forward<T, 256>(a, stream);
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
     "t07 at D 256 (136-256 computed there): passes of 4 rows copied with two swizzle XORs, the "
     "splits folded 4 at a time",
     {DType::F16, DType::BF16},
     {256},
     /*min_sm=*/80,
     /*gqa=*/true,
     /*decoding=*/true,
     /*rounds_head_dim=*/true});
// Its ring needs 128 KiB a block: the dispatch passes it over on a GPU that gives a block less
// (99 KiB on sm_86, sm_89, sm_120).
FA_REGISTER_SMEM(kName, [](int d) {
  return fa::smem_at<256>(d, [](auto D) { return MmaLayout<decltype(D)::value>::kSmem; });
});
