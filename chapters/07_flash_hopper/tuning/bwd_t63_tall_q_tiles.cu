// 07/bwd_t63_tall_q_tiles: a tuning step after bwd_t62, at D 64 only: Q and dO streamed in tiles
// of 128 queries instead of 64. Not deterministic, as bwd_t62.
// Copied from 07/bwd_t62_one_staging (bwd_t62_one_staging.cu; bwd_t48's header explains the
// turns, t62's the one set of staging boxes); one idea changed: the height of the query tile.
//
// Why: FlashAttention-3 runs its backward at head dims up to 64 on tiles of 128 queries x 128 keys,
// at 96 on 64 x 128 and at 128 on 64 x 128 causal, 80 x 128 full (run_mha_bwd_hdim64 and the others
// in hopper/flash_bwd_launch_template.h, github.com/Dao-AILab/flash-attention). bwd_t61 at D 64
// uses 64 x 128, and it is where the backward is furthest behind cuDNN (0.83-0.94x, NVIDIA H100
// 80GB HBM3, 2026-12-07). At D 64 a tile is short: its five products are 1,280 tensor cycles of the
// block (5.2 MFLOP at 4,096 FLOP a cycle), while what a tile costs besides them does not shrink
// with D: the waits for Q and dO, the dS^T barrier, the turn's staging, fence and reduce-adds, the
// latency from a wgmma's issue to its first result. At 399 TFLOP/s (D 64, N 8192, full) a tile
// takes about 3,000 cycles of a block at 1.75 GHz: more than twice its tensor work. A tile of 128
// queries does twice the work for the same count of waits and barriers. And the shared memory's
// reads: S^T and dP^T are wgmmas of N = 64 reading A and B from shared memory (4 KiB per 32 tensor
// cycles, all an SM's shared memory delivers); at N = 128 they read 6 KiB per 64 cycles. Summed
// over a tile with the TMA writes, dS^T, the staging and its reads, the block moves about 192 KiB
// of shared memory per 1,280 tensor cycles at Br 64 (1,536 cycles at 128 bytes a cycle) and 352 KiB
// per 2,560 at Br 128 (2,816): 8% less per unit of work.
//
// The idea: kBr = 128. S^T = K Q^T and dP^T = V dO^T are wgmmas of N 128 (64 accumulators each);
// dV += P^T dO and dK += dS^T Q take 8 k16 steps; the dS^T tile is two strips of 64 queries
// ([128 keys][64 queries] each, 32 KiB a buffer); the turn's dQ_tile is two wgmma rows of 64
// queries (64 accumulators), staged in boxes of 128 rows; L and D come in rows of 128, one a
// producer thread. Shared memory: K, V 32 KiB, the Q and dO ring 64 KiB, two dS^T buffers
// 64 KiB, the staging 32 KiB (t62's single set; bwd_t61's two would not fit), L and D 2 KiB:
// 194 KiB. At D 128 the same tile would need 64 + 64 accumulators for S^T and dP^T beside 128 for
// dK and dV: more than a thread's 240 registers, which is why FlashAttention-3 keeps 64 or 80
// queries there, and why this step is instantiated at D 64 only (head dims 8-64, rounded up).
//
// What the taller tile costs in registers. A consumer thread holds dK and dV (64 accumulators),
// S^T and dP^T (64 each at 128 queries, 32 at 64) and, in its turn, dQ_tile (64). t62's order,
// dV += P^T dO issued on P^T's fragments while dS^T is computed, keeps S^T, dP^T and P^T's 32
// fragment registers live together: at 128 queries ptxas (CUDA 13.0) then spills 104 bytes and
// serializes every wgmma of the kernel (its warning C7512, "insufficient register resources").
// So t63 computes dS^T first and then issues dV and dK, the order of FlashAttention-3's
// backward (hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp), and tests the mask in int32 offsets
// (in 64 bits it still spills 44 bytes): no spills, no serialization. Both follow from the
// height; neither is a separate idea.
//
// Prediction (bf16, B = 16384 / N, H = 2048 / D, against bwd_t62 in processes of their own): if
// half of the ~3,000 cycles of a tile today do not grow with its height, 1.10-1.20x at D 64 full
// from N 2048; 1.03-1.10x at N 512 and 1024 (a block walks 4 tiles there, not 8, so its own
// start and end weigh more); causal the same from N 4096 but 0.95-1.02x up to N 1024, where a
// diagonal tile of 128 queries masks twice the pairs a tile of 64 does.
//
// Measured (NVIDIA H100 80GB HBM3, 2026-12-07, bf16, three runs of three rounds, each kernel an
// fa_bench process of its own, the order rotated; notes/measured/h100-2026-12-07f/
// fair_rounds_bwd.md): against bwd_t61 1.08-1.09x at D 64 full N 512, 1.12x at 1024, 1.15-1.18x
// from 2048; causal 1.07-1.11x up to N 2048, level at 4096 (0.99-1.01x), 1.05-1.08x at 8192,
// 1.12-1.13x at 16384. Against bwd_t62, its base, 1.09-1.21x full and 1.01-1.16x causal. The full
// rows as predicted; the short causal ones gained where a loss was predicted (the diagonal's masked
// pairs cost less than the tile's halved waits save). Against cuDNN in the same run
// (compare_sdpa.py) 0.98-1.06x full (263-479 TFLOP/s) and 0.90-1.02x causal (bwd_t61 0.83-0.94x in
// an earlier run the same day): the dispatch's backward at D 64 (tuning/README.md, "What t62, t63
// and t64 say").
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_t63_tall_q_tiles";
constexpr int kWarpgroups = 2;                          // consumers: the warpgroups that compute
constexpr int kThreads = 128 * (1 + kWarpgroups);       // + the producer warpgroup
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168 (07/v2's)
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;  // 64: wgmma M, the keys one warpgroup owns
constexpr int kBc = kWarpgroups * kWgRows;  // 128 keys per block
constexpr int kBr = 128;  // t63: queries per streamed tile (N of S^T and dP^T), 64 before
constexpr int kQStrips = kBr / kSwizzleCols;   // t63: the dS^T tile's strips of 64 queries
constexpr int kBoxCols = 32;                   // fp32 columns per 128-byte swizzled row of a box
constexpr int kBoxBytes = kBr * kBoxCols * 4;  // t63: 128 rows x 128 bytes = 16 KiB
// dS^T tiles [128 keys][128 queries] (t63: two strips of 64 queries), used in turn by iterations
// j % kDsBuffers: the warpgroup whose turn is next may write tile j + 1's rows while the other
// still reads tile j's.
constexpr int kDsBuffers = 2;

// Whose turn it is: iteration j's dQ_tile is computed by warpgroup j % kWarpgroups.
__device__ __forceinline__ int dq_turn(int j) {
  return j % kWarpgroups;
}
// Named barrier ids (0 is __syncthreads): dS^T tile j % 2 is written by both warpgroups (one id
// per tile: the turns of j and j + 1 may be open at once), and a warpgroup's staging rows are
// written (one id per warpgroup).
__device__ __forceinline__ int ds_bar(int j) {
  return 1 + j % kDsBuffers;
}
__device__ __forceinline__ int stage_bar(int wg) {
  return 1 + kDsBuffers + wg;
}

struct BwdParams {
  const float* lse;
  const float* delta;
  float* dq_acc;  // the workspace: fp32 [batch*heads][seq_q][D], zero on entry
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int d;                // the real head dim, the rows' length in global memory (D rounds it up)
  int64_t n_tiles;      // key tiles per (batch, head)
  int64_t n_units;      // (K/V head, part) units: the grid is n_units x n_tiles blocks
  int64_t group_units;  // units per group of the launch order (head_group_place)
  int group;            // query heads per K/V head (1: no grouping)
  int split;            // blocks per (key tile, K/V head), each over group / split heads
  int64_t kv_bh;        // batch * heads_kv
  float* parts;         // split > 1: fp32 dK parts [split][kv_bh][seq_k][D], then dV's likewise
  float scale;          // softmax scale
  float scale_log2;     // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- dK, dV and dQ_tile ----------------------------------------------------------------------------
template <int D>
struct Smem {
  static constexpr int kKVBytes = kBc * D * 2;    // K or V
  static constexpr int kQBytes = kBr * D * 2;     // Q or dO, one stage
  static constexpr int kdSBytes = kBc * kBr * 2;  // t63: kQStrips strips of [128 keys][64 queries]
  static constexpr int kBoxes = D / kBoxCols;     // reduce-adds per turn: 2 or 4
  static constexpr int kStageBytes = kBoxes * kBoxBytes;  // the staging boxes (t62: one set)
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                        // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;       // stage s at + s * kQBytes
  static constexpr int kdSOffset = kdOOffset + kStages * kQBytes;      // kDsBuffers of kdSBytes
  static constexpr int kStOffset = kdSOffset + kDsBuffers * kdSBytes;  // t62: both warpgroups'
  static constexpr int kLOffset = kStOffset + kStageBytes;             // float [kStages][kBr]
  static constexpr int kDOffset = kLOffset + kStages * kBr * 4;        // float [kStages][kBr]
  static constexpr int kBarOffset = kDOffset + kStages * kBr * 4;
  static constexpr int kBytes = kBarOffset + (1 + 2 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0 &&
                    kdSBytes % kAtomBytes == 0,
                "atoms stay aligned");
  static_assert(kStOffset % 1024 == 0 && kBoxBytes % 1024 == 0,
                "a 128-byte swizzled box starts on a 1024-byte boundary");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_dq_kernel(const __grid_constant__ CUtensorMap tm_q,
                   const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_do,
                   const __grid_constant__ CUtensorMap tm_dq, const BwdParams p) {
  using Sm = Smem<D>;
  constexpr int kStrips = D / kSwizzleCols;
  constexpr int kSAcc = kBr / 2;  // S^T (and dP^T) accumulators per thread
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sK = smem + Sm::kKOffset;
  unsigned char* sV = smem + Sm::kVOffset;
  auto sQ = [&](int s) { return smem + Sm::kQOffset + s * Sm::kQBytes; };
  auto sdO = [&](int s) { return smem + Sm::kdOOffset + s * Sm::kQBytes; };
  unsigned char* sdS = smem + Sm::kdSOffset;                  // dS^T, row = key of the block
  float* sL = reinterpret_cast<float*>(smem + Sm::kLOffset);  // stage s at + s * kBr
  float* sD = reinterpret_cast<float*>(smem + Sm::kDOffset);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* q_full = kv_full + 1;        // per stage: Q, dO (bytes), L and D (arrivals) are in
  uint64_t* q_empty = q_full + kStages;  // per stage: both consumer warpgroups are done with it

  const int tid = threadIdx.x;
  // This block's (K/V head, part) unit and key tile: key tile by key tile within its group.
  const BlockPlace place = head_group_place(blockIdx.x, p.n_tiles, p.n_units, p.group_units);
  const int64_t unit = place.unit;  // (K/V head, part) (GQA: bwd_v1's header)
  const int64_t kv_bh = unit / p.split;
  const int part = int(unit % p.split), heads = p.group / p.split;  // this block's query heads
  const int64_t k0 = place.kt * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  // The Q tiles that see this block's keys: causal, from the one holding the first query that
  // sees key k0 (every earlier tile is entirely masked, its dS is 0). Possibly none.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal) {
    const int64_t first = causal_first_query(k0, seq_q, seq_k);
    if (first > 0) qt_begin = first / kBr;
  }
  // GQA: the group's query heads one after the other, n_per tiles each (bwd_v1's header).
  const int n_per = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;
  const int n_iter = n_per * heads;
  // Iteration j's place (query head, Q tile qt_begin + i), stepped with j (GroupPlace).
  GroupPlace at{int(kv_bh * p.group + part * heads), 0};

  if (tid == 0) {
    hopper::mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&q_full[s], 1 + kBr);       // the expect_tx arrival, + kBr L/D rows
      hopper::mbar_init(&q_empty[s], kWarpgroups);  // one arrival per consumer warpgroup
    }
    hopper::mbar_fence_init();
    if (n_iter > 0) {
      hopper::mbar_arrive_expect_tx(kv_full, 2 * Sm::kKVBytes);
      for (int c = 0; c < kStrips; ++c) {  // all D columns: S^T and dP^T contract over them
        hopper::tma_load_3d(sK + c * kBc * 128, &tm_k, kv_full, c * kSwizzleCols, int(k0),
                            int(kv_bh));
        hopper::tma_load_3d(sV + c * kBc * 128, &tm_v, kv_full, c * kSwizzleCols, int(k0),
                            int(kv_bh));
      }
    }
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  if (tid < 128) {
    // ---- Producer: gives its registers away; threads 0..63 fill the ring, tile after tile.
    // Thread r carries L2 and D of the tile's query row r, loaded before the wait for the stage
    // (their latency passes while the consumers still use it), stored after it; its arrival
    // releases the stores to whoever waits on q_full (mbarrier.arrive is a release, the wait an
    // acquire). Thread 0 also asks for Q and dO, whose bytes complete the same phase.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (tid < kBr) {
      GroupPlace pl = at;
      for (int j = 0; j < n_iter; ++j, pl.step(n_per)) {
        const int s = j % kStages;
        const int64_t row = (qt_begin + pl.i) * kBr, head_row0 = pl.head * seq_q;
        const float l2 = load_l2(p.lse + head_row0, row + tid, seq_q);
        const float d = row + tid < seq_q ? p.delta[head_row0 + row + tid] : 0.0f;
        if (j >= kStages) hopper::mbar_wait(&q_empty[s], (j / kStages - 1) & 1);
        if (tid == 0) {
          hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
          for (int c = 0; c < kStrips; ++c) {
            hopper::tma_load_3d(sQ(s) + c * kBr * 128, &tm_q, &q_full[s], c * kSwizzleCols,
                                int(row), pl.head);
            hopper::tma_load_3d(sdO(s) + c * kBr * 128, &tm_do, &q_full[s], c * kSwizzleCols,
                                int(row), pl.head);
          }
        }
        sL[s * kBr + tid] = l2;
        sD[s * kBr + tid] = d;
        hopper::mbar_arrive(&q_full[s]);
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute as bwd_v4 on their 64 keys.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int wg = tid / 128 - 1, t = tid % 128, q = t % 4;
  // The staging: D / 32 boxes of 128 query rows (t63) x 32 columns, 128-byte swizzled. t62: one
  // set, written by whichever warpgroup has the turn.
  unsigned char* sSt = smem + Sm::kStOffset;
  // This warpgroup's 64 keys (rows of K and V in each strip) and this thread's two keys.
  const int wrow = wg * kWgRows;
  const unsigned char* sKw = sK + wrow * 128;
  const unsigned char* sVw = sV + wrow * 128;
  const int kr = wrow + 16 * (t / 32) + (t % 32) / 4;    // row of the dS^T tile; kr % 8 = lane / 4
  const int64_t key0 = k0 + kr;                          // and key0 + 8
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off
  // Thread 0 of the warpgroup issues its reduce-adds (bulk groups belong to the issuing thread)
  // and frees the stage for both.
  const uint32_t st_addr = mma::smem_addr(sSt);
  const bool adder = t == 0;

  float dk[D / 2], dv[D / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j, at.step(n_per)) {
    const int s = j % kStages;
    const int64_t q0 = (qt_begin + at.i) * kBr;
    unsigned char* sdS_j = sdS + (j % kDsBuffers) * Sm::kdSBytes;  // this iteration's dS^T
    const bool need_mask = k0 + kBc > seq_k || (p.causal && k0 + kBc - 1 > q0 + off);
    hopper::mbar_wait(&q_full[s], (j / kStages) & 1);

    // ---- S^T = K Q^T and dP^T = V dO^T: 64 keys x 128 queries each (t63), two commit groups.
    float st[kSAcc], dpt[kSAcc];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kBr, T, 0>(st, desc_k_major<kBc>(sKw, kk), desc_k_major<kBr>(sQ(s), kk),
                                  kk > 0);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kBr, T, 0>(dpt, desc_k_major<kBc>(sVw, kk), desc_k_major<kBr>(sdO(s), kk),
                                  kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // S^T has landed; dP^T may still run
    hopper::fence_registers(st);

    // ---- P^T = exp2(S^T scale log2 e - L2): element i is key key0 + 8 ((i / 2) % 2), query
    // q0 + 8 (i / 4) + 2q + i % 2 (the accumulator layout, hopper.cuh).
    const float* l2 = sL + s * kBr;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 l = *reinterpret_cast<const float2*>(l2 + 8 * (i / 4) + 2 * q);
      st[i] = ex2_approx(fmaf(st[i], p.scale_log2, -l.x));
      st[i + 1] = ex2_approx(fmaf(st[i + 1], p.scale_log2, -l.y));
    }
    if (need_mask) {
      // t63: the tests in int32 offsets from key0 and q0 (in 64 bits, as t62 has them, they
      // spill at this tile; header). Key key0 + dkey is past
      // seq_k when dkey >= seq_k - key0, and masked by the diagonal when
      // dkey - dquery > q0 + off - key0. Both bounds are clamped to +-2^30: dkey and dquery stay
      // below 128, so a clamped bound decides every i as the exact one would.
      constexpr int64_t kClamp = int64_t(1) << 30;
      const int keys_left = int(std::min(seq_k - key0, kClamp));
      const int diag = int(std::clamp(q0 + off - key0, -kClamp, kClamp));
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) {
        const int dkey = 8 * ((i / 2) % 2);
        const int dquery = 8 * (i / 4) + 2 * q + (i % 2);
        if (dkey >= keys_left || (p.causal && dkey - dquery > diag)) st[i] = 0.0f;
      }
    }

    // ---- dS^T = P^T o (dP^T - D), D per query (column). t63: computed before dV is issued, as
    // FlashAttention-3 orders it (header): t62 issued dV += P^T dO first and computed dS^T under
    // it, which keeps S^T, dP^T (fp32) and P^T's fragments live at once: at 128 queries 160
    // registers beside dK's and dV's 64, more than a thread's 240 with the rest.
    hopper::wgmma_wait<0>();  // dP^T has landed
    hopper::fence_registers(dpt);
    const float* dd = sD + s * kBr;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (i / 4) + 2 * q);
      dpt[i] = st[i] * (dpt[i] - d2.x);
      dpt[i + 1] = st[i + 1] * (dpt[i + 1] - d2.y);
    }

    // ---- dV += P^T dO and dK += dS^T Q: k = the 128 queries (t63), P^T and dS^T from
    // registers, dO and Q MN-major; two commit groups.
    uint32_t dsf[kBr / 16][4];
    pack_p<T>(dpt, dsf);
    uint32_t pf[kBr / 16][4];
    pack_p<T>(st, pf);
    hopper::fence_registers(dv);
    hopper::fence_registers(dk);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      hopper::wgmma_rs<D, T, 1>(dv, pf[kk], desc_mn_major<kBr>(sdO(s), kk), 1);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      hopper::wgmma_rs<D, T, 1>(dk, dsf[kk], desc_mn_major<kBr>(sQ(s), kk), 1);
    hopper::wgmma_commit();

    // ---- dS^T -> the shared dS^T tile while dV and dK run: row kr (and kr + 8) = this thread's
    // keys,
    // t63: in each strip of 64 queries 128 bytes per row in eight 16-byte chunks, chunk c stored
    // at c ^ (row % 8)
    // (the 128-byte swizzle TMA would write; row % 8 = lane / 4 for both rows). dsf[k] holds
    // queries 16k + 2q, +1 in [0] (row kr) and [1] (row kr + 8), and 16k + 8 + 2q, +1 in [2] and
    // [3]. For one store of a warp, its 8 rows put their 4-byte words in
    // 8 different chunks: the 32 words fall on 32 banks.
    {
      const int g = (t % 32) / 4;
#pragma unroll
      for (int k = 0; k < kBr / 16; ++k) {
        // t63: queries 16k .. 16k + 15 lie in strip k / 4, as chunks 2 (k % 4) and 2 (k % 4) + 1.
        unsigned char* row_lo = sdS_j + (k / 4) * kBc * 128 + kr * 128 + 4 * q;
        unsigned char* row_hi = row_lo + 8 * 128;
        const int c = 2 * (k % 4);
        *reinterpret_cast<uint32_t*>(row_lo + (c ^ g) * 16) = dsf[k][0];
        *reinterpret_cast<uint32_t*>(row_hi + (c ^ g) * 16) = dsf[k][1];
        *reinterpret_cast<uint32_t*>(row_lo + ((c + 1) ^ g) * 16) = dsf[k][2];
        *reinterpret_cast<uint32_t*>(row_hi + ((c + 1) ^ g) * 16) = dsf[k][3];
      }
    }
    hopper::fence_proxy_async_smem();  // the generic stores, before wgmma reads them
    const bool my_turn = dq_turn(j) == wg;
    // Not this warpgroup's turn: its rows of dS^T are written, and the arrival (which does not
    // wait) releases them to the warpgroup whose turn it is. t62: the staging boxes too. They
    // were last read by this warpgroup's reduce-adds of iteration j - 1 (its turn): its adder
    // waits for those reads before it arrives, so the barrier the other warpgroup syncs on
    // before its staging stores also orders them after the reads.
    if (!my_turn) {
      if (adder) hopper::bulk_wait_group_read<0>();
      hopper::named_bar_arrive(ds_bar(j), 2 * 128);
    }

    // dV and dK land before dQ_tile is issued (or the tile is left): with dQ_tile's D / 2
    // accumulators live, the fragments of P^T and dS^T would not fit the registers (header).
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dk);
    hopper::fence_registers(dv);
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk) {
      hopper::fence_registers(pf[kk]);
      hopper::fence_registers(dsf[kk]);
    }

    if (!my_turn) {
      // ---- Once all its threads are past their reads of stage s (the products, L and D), the
      // stage is free as far as this warpgroup goes. On to the next tile, while the other
      // computes dQ_tile.
      hopper::named_bar_sync(stage_bar(wg), 128);
      if (adder) hopper::mbar_arrive(&q_empty[s]);
      continue;
    }

    // ---- This warpgroup's turn: wait for the other warpgroup's rows of dS^T and, t62, for the
    // staging boxes (the other's adder waited for their reads before it arrived).
    hopper::named_bar_sync(ds_bar(j), 2 * 128);

    // ---- dQ_tile = dS K: n = all D columns, k = all 128 keys of the block; A = dS read
    // transposed from the dS^T tile, B = K (MN-major, across the D / 64 strips). k16 step kk is
    // rows 16 kk .. of both tiles. t63: the 128 queries are two wgmma rows of 64 (m = 64), mb
    // reading strip mb of the dS^T tile.
    float dq[kQStrips][D / 2];
    hopper::wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < kQStrips; ++mb)
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk)
        hopper::wgmma_ss<D, T, 1, 1>(dq[mb], desc_mn_major<kBc>(sdS_j, kk, mb * kSwizzleCols),
                                     desc_mn_major<kBc>(sK, kk), kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < kQStrips; ++mb) hopper::fence_registers(dq[mb]);

    // ---- dQ_tile -> the staging boxes (fp32, the map's 128-byte swizzle): thread t holds rows
    // 64 mb + 16w + g and 64 mb + 16w + g + 8 (t63: mb, the wgmma row), columns 8i + 2q, +1 in
    // dq[mb][4i + 2h], dq[mb][4i + 2h + 1] (w = t / 32).
    // Column 8i + 2q is in box i / 4, 16-byte chunk 2 (i % 4) + q / 2, at byte 8 (q % 2); the
    // chunk is stored at chunk ^ g (row % 8 = g for both rows), which is 2 (i % 4) ^ x with
    // x = (q / 2) ^ g, since 2 (i % 4) is even.
    {
      const int w = t / 32, g = (t % 32) / 4, x = (q / 2) ^ g;
#pragma unroll
      for (int mb = 0; mb < kQStrips; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned char* row = sSt + (64 * mb + 16 * w + g + 8 * h) * 128 + 8 * (q % 2);
#pragma unroll
          for (int i = 0; i < D / 8; ++i)
            *reinterpret_cast<float2*>(row + (i / 4) * kBoxBytes + (((2 * (i % 4)) ^ x) * 16)) =
                make_float2(dq[mb][4 * i + 2 * h], dq[mb][4 * i + 2 * h + 1]);
        }
    }
    hopper::fence_proxy_async_smem();  // before the TMA engine reads the boxes
    hopper::named_bar_sync(stage_bar(wg), 128);
    if (adder) {
      // Every thread of the warpgroup is past its wgmma_wait and its reads of L and D: stage s
      // is free as far as this warpgroup goes (the producer refills it once both have said so).
      hopper::mbar_arrive(&q_empty[s]);
      // Rows q0 .. q0 + 127 of query head at.head, columns 32 b ..; rows past seq_q are clipped.
#pragma unroll
      for (int b = 0; b < Sm::kBoxes; ++b)
        hopper::tma_reduce_add_3d(&tm_dq, st_addr + b * kBoxBytes, b * kBoxCols, int(q0), at.head);
      hopper::bulk_commit_group();
    }
  }
  // The last reduce-adds must have read their rows before the block's shared memory goes, and
  // have landed before the kernel counts as done (the convert kernel reads the workspace next).
  if (adder) hopper::bulk_wait_group<0>();

  // Keys no query sees (causal) leave with dK = dV = 0, as they must. Rows k0 + wrow .. of this
  // K/V head's [seq_k x D] dK and dV, summed over its group.
  const int64_t row0 = k0 + wrow;
  if (p.split > 1) {  // this part's fp32 sums; sum_parts_kernel adds the parts (header, GQA)
    const int64_t head = int64_t(part) * p.kv_bh + kv_bh, all = p.split * p.kv_bh;
    store_acc_rows<float, D>(p.parts + head * seq_k * p.d, dk, row0, seq_k, 1.0f, t, p.d, p.d);
    store_acc_rows<float, D>(p.parts + (all + head) * seq_k * p.d, dv, row0, seq_k, 1.0f, t, p.d,
                             p.d);
    return;
  }
  // t61: 16 bytes a thread (header); the launcher checked that dK and dV are 16-byte aligned.
  store_acc_rows_16<T, D>(static_cast<T*>(p.dk) + kv_bh * seq_k * p.d, dk, row0, seq_k, p.scale, t,
                          p.d, p.d);
  store_acc_rows_16<T, D>(static_cast<T*>(p.dv) + kv_bh * seq_k * p.d, dv, row0, seq_k, 1.0f, t,
                          p.d, p.d);
}

// ---- Launcher ------------------------------------------------------------------------------------
template <class T, int D>
void launch(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  const int64_t kv_bh = s.batch * s.kv_heads();  // K, V, dK, dV: batch * heads_kv heads (GQA)
  FA_UNSUPPORTED_IF(n_kt * s.bh() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 thread blocks");
  // A block's iterations, the group's query heads x the Q tiles, count in an int.
  FA_UNSUPPORTED_IF(ceil_div(s.seq_q, kBr) * s.group() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 query tiles per K/V head");
  BwdParams p{};
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_acc = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.d = int(s.head_dim);
  p.n_tiles = n_kt;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  p.group = int(s.group());
  p.kv_bh = kv_bh;
  // The split of each group (bwd_v1's header); its parts need memory of their own here, since the
  // workspace holds dQ's sum (PartsBuffer): without it the block runs the whole group.
  // The launch order: groups of units under the causal mask, head by head (groups of 1) without.
  const BlockOrder order = s.causal ? BlockOrder::kHeadGroups : BlockOrder::kHeadMajor;
  p.split = dkdv_split<dkdv_dq_kernel<T, D>, Smem<D>::kBytes>(s, kThreads, kBc, kBr, order);
  const PartsBuffer parts(s, p.split, stream);
  if (parts.ptr() == nullptr) p.split = 1;
  p.parts = parts.ptr();
  p.n_units = kv_bh * p.split;
  p.group_units =
      s.causal
          ? head_group_units(n_kt, resident_slots<dkdv_dq_kernel<T, D>, Smem<D>::kBytes>(kThreads),
                             p.n_units, p.group / p.split)
          : 1;

  // 2. dK, dV and dQ_tile: K/V boxes of kBc rows (kept), Q/dO boxes of kBr rows (streamed); every
  // box is 64 columns wide, one 128-byte swizzled strip.
  const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, p.d, kBr, a.dtype);
  const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, p.d, kBr, a.dtype);
  const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, p.d, kBc, a.dtype);
  const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, p.d, kBc, a.dtype);
  const CUtensorMap tm_dq = make_tmap_f32(a.workspace, s.bh(), s.seq_q, p.d, kBoxCols, kBr, kName);
  constexpr int kSmem = Smem<D>::kBytes;
  set_smem_limit_once<dkdv_dq_kernel<T, D>, kSmem>();
  dkdv_dq_kernel<T, D><<<unsigned(n_kt * kv_bh * p.split), kThreads, kSmem, stream>>>(
      tm_q, tm_k, tm_v, tm_do, tm_dq, p);
  FA_CHECK_LAUNCH();
  if (p.split > 1) sum_parts<T>(p.parts, a, p.split, p.scale, stream);

  // 3. dQ from the workspace (dq_convert, hopper_attention_bwd.cuh).
  dq_convert<T>(a, p.scale, stream);
}

void attention_bwd_t63(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(head_dim_instance(s.head_dim) != 64,
                    std::string(kName) +
                        " is instantiated for head_dim 64 (the multiples of 8 up to 64 rounded "
                        "up) only: at D 128 tiles of 128 queries do not fit the registers");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  FA_REQUIRE(s.valid_heads(), std::string(kName) + ": heads must be a multiple of heads_kv");
  if (s.bh() == 0) return;  // nothing to write
  FA_REQUIRE(a.workspace != nullptr, std::string(kName) + " needs the fp32 workspace (dQ's sum)");
  // The bulk reduce-adds need 16-byte aligned rows of the workspace (D * 4 bytes per row keeps
  // them so once the base is).
  // t61: and dK, dV 16-byte aligned for the epilogue's 16-byte stores.
  const bool can_load =
      tma_can_load(a) && aligned(a.workspace, 16) && aligned(a.dk, 16) && aligned(a.dv, 16);
  if (s.is_gqa() && !can_load) return grouped_fallback(a, stream, kName);
  if (!can_load) return run_fallback(a, stream);
  // 1. D = rowsum(dO o O), before the kernel that reads it (same stream).
  delta_preprocess_launch(a.o, a.dout, a.delta, s, a.dtype, stream);
  if (a.dtype == DType::BF16)
    launch<__nv_bfloat16, 64>(a, stream);
  else
    launch<__half, 64>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {kName,
             attention_bwd_t63,
             "bwd_t62 at D 64 with Q and dO streamed in tiles of 128 queries instead of 64 "
             "(FlashAttention-3's tile at D 64): S^T and dP^T of N 128; not deterministic",
             {DType::BF16, DType::F16},
             {64},
             90,
             /*deterministic=*/false,
             /*gqa=*/true,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
