// 07/bwd_t44_own_keys_dq: a tuning step after bwd_v5, off the main path because it measured
// slower (tuning/README.md): each warpgroup's dQ_tile taken over its own 64 keys at D 128 too,
// so that no warpgroup waits for the other's dS^T: the two consumer warpgroups meet nowhere in
// the loop and may drift out of step. Not deterministic, as bwd_v5.
// Copied from 07/bwd_v5_producer (../sm90a/bwd_v5_producer.cu; bwd_v4 and bwd_v2 before it: the
// algorithm, the staging boxes, the producer and its ring are theirs); one idea changed: how
// the warpgroups share dQ_tile = dS K at D 128.
//
// Why: bwd_v5 removed the block-wide barrier before the refill, but at D 128 the warpgroups
// still meet once a tile: warpgroup w computed columns 64w .. 64w + 63 of dQ_tile over all 128
// keys of the block, so it needed the other's rows of dS^T (a barrier of 256 threads), and both
// then do their element-wise work (exponentials, dS, packing, stores) at the same moment while
// the tensor cores wait (bwd_v5's header). With the split by keys, which D 64 has used since
// bwd_v2, warpgroup w computes the whole 64 x D dQ_tile over its own 64 keys: it reads only
// its own dS^T rows, its barrier is its own 128 threads, and the two are tied only by the ring
// (one may run up to a tile ahead of the other). Once they drift, one's element-wise work runs
// under the other's products: the overlap the forward's ping-pong (07/v3) arranges on purpose.
//
// What changes (DqSplit is "by keys" at both head dims, so at D 64 nothing changes):
//   * dQ_tile: one wgmma of N = D per k16 step, 4 steps over the warpgroup's 64 keys (was N = 64
//     over 8 steps at D 128); A = dS read transposed from the dS^T tile (hopper::wgmma_ss with
//     kTransA = 1, the N = 64 wgmma_ss_n64_at generalised), B = its 64 rows of K across both
//     64-column strips. Per k16 step 6 KiB of shared memory for 64 x 128 x 16 instead of 4 KiB
//     for 64 x 64 x 16: a quarter fewer operand bytes per FLOP.
//   * The named barrier after the dS^T stores is per warpgroup (ids 1, 2), as at D 64; one dS^T
//     tile is enough again (bwd_v5 had two at D 128 because the other warpgroup read its rows):
//     a warpgroup rewrites its rows only after its own dQ_tile has landed.
//   * Staging: 64 x D fp32 a warpgroup, D / 32 boxes (4 at D 128: 32 KiB a warpgroup, 64 KiB
//     for the block), D / 32 tensor reduce-adds a warpgroup and tile; the staging code is
//     bwd_v4's with D columns in place of 64 (32 float2 stores a thread at D 128, was 16).
//   * Registers at D 128: dK 64 + dV 64 + dQ_tile 64 = 192 accumulators a thread are live while
//     dQ_tile runs, and with the fragments of P^T and dS^T (16 + 16, the A operands of dV and
//     dK, held until those products land) ptxas ran out of the consumer's 240 and serialized
//     every wgmma of the kernel (its C7512 "insufficient register resources" note). So at D 128
//     the warpgroup waits for dV and dK (wgmma_wait 0) before it issues dQ_tile, and the
//     fragments are dead by then. That wait is new on a warpgroup's path (dK's 4 k16 steps,
//     about 256-512 cycles with the pipe to itself or shared), and it is only affordable because
//     the other warpgroup can fill the pipe meanwhile. At D 64 (96 accumulators) dK still runs
//     under the barrier and dQ_tile, as in bwd_v5 (DqSplit::kDkBeforeDq).
//
// Costs:
//   * The fp32 reduce-adds into L2 double at D 128: each block adds 2 x 64 x 128 floats a tile
//     (64 KiB) where bwd_v5 added 64 x 128 (32 KiB): one byte per 160 counted FLOPs instead of
//     320, about 2.8 TB/s of reductions at 450 TFLOP/s (1.4 TB/s in bwd_v5). D 64 already runs
//     at that ratio (both warpgroups add a partial tile since bwd_v2): bwd_v4 sustains 2.2 TB/s
//     at 354 TFLOP/s, the only evidence of what the L2 takes.
//   * Shared memory at D 128: K, V 64 KiB; 2 stages of Q, dO 64 KiB; dS^T 16 KiB; staging
//     2 x 32 KiB; L, D, barriers and the alignment 2 KiB: 210 KiB (bwd_v5 194, the limit 227).
//     At D 64 114 KiB, as bwd_v5.
//   * ptxas (CUDA 13.0, sm_90a, bf16 and fp16 alike): "Used 168 registers" (the launch's
//     384 x 168); at D 128 16 bytes of stack, 12 bytes of spill stores and loads, three
//     registers saved around the mask of S^T (the branch that only ragged and causal-diagonal
//     tiles take); the SASS names registers up to R237 of the consumer's 240 (nvdisasm), and no
//     wgmma is serialized. At D 64 no spills, up to R179.
//
// Ordering, per consumer warpgroup and iteration j (s = j % 2): wait q_full[s]; S^T, dP^T, dV,
// dK as bwd_v5; dS^T -> its rows of the dS^T tile, fence; thread 0: bulk_wait_group_read 0;
// D 128: wgmma_wait 0 (dV, dK); named barrier of the warpgroup; dQ_tile (N = D); wait 0;
// staging (D / 32 boxes), fence, named barrier of the warpgroup; thread 0: arrive on q_empty[s],
// D / 32 reduce-adds, commit.
//
// Prediction, against bwd_v5 on the protocol shapes: at D 64 1.00x (the same instructions). At
// D 128 1.04-1.15x. The bound if the warpgroups settle half a tile apart: a warpgroup's own
// path is its products (about 1,280 of bwd_v4's 2,560 tensor cycles a tile, if it had the pipe
// to itself) plus its element-wise work (about 3,340), 4,600 of bwd_v4's 5,900 cycles a tile:
// 1.28x; less the dK wait before dQ_tile (a few hundred cycles), the doubled staging, and
// whatever the ring's one tile of slack does not absorb. If it measures at or below bwd_v5,
// the first suspects are the L2's rate of fp32 reductions (2.8 TB/s) and warpgroups that stay
// in step on their own; starting warpgroup 1 half a tile after warpgroup 0 (a named barrier at
// the start) would tell the second apart, and is not done here.
// Measured (NVIDIA H200, 2026-12-02, bf16, N 1024-16384, beside bwd_v5 in one run;
// notes/measured/h200-2026-12-02/bwd_v5_v6_t43_v4.log, where it ran as the candidate rung
// 07/bwd_v6_own_keys_dq): 0.90-0.98x bwd_v5 at D 128, 0.98-1.00x at D 64. Below bwd_v5, so the
// first suspects stand: the doubled reductions into L2, and warpgroups that stay in step.
// Grouped K/V heads, split parts, causal skipping, ragged lengths: as bwd_v5.
// Speed: measured in chapters/07_flash_hopper/README.md
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_t44_own_keys_dq";
constexpr int kWarpgroups = 2;                          // consumers: the warpgroups that compute
constexpr int kThreads = 128 * (1 + kWarpgroups);       // + the producer warpgroup
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168 (07/v2's)
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;     // 64: wgmma M, the keys one warpgroup owns
constexpr int kBc = kWarpgroups * kWgRows;     // 128 keys per block
constexpr int kBr = 64;                        // queries per streamed tile: N of S^T and dP^T
constexpr int kBoxCols = 32;                   // fp32 columns per 128-byte swizzled row of a box
constexpr int kBoxBytes = kBr * kBoxCols * 4;  // 64 rows x 128 bytes = 8 KiB

// How the two warpgroups share dQ_tile = dS K: by keys at both head dims (header). Warpgroup w
// contracts over its own 64 keys, rows 64w .. of the dS^T and K tiles, for all D columns.
template <int D>
struct DqSplit {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kKeys = kWgRows;            // keys warpgroup w contracts over: its own
  static constexpr int kCols = D;                  // columns of its dQ_tile: all of them
  static constexpr int kBoxes = kCols / kBoxCols;  // reduce-adds per warpgroup and tile: 2 or 4
  // dV and dK waited for before dQ_tile is issued, for the registers (in the loop).
  static constexpr bool kDkBeforeDq = D == 128;
  __device__ static int key0(int wg) { return wg * kWgRows; }
  // Named barrier ids (0 is __syncthreads), one each per warpgroup: its rows of the dS^T tile
  // are written, its staging rows are written.
  __device__ static int ds_bar(int wg) { return 1 + wg; }
  __device__ static int stage_bar(int wg) { return 3 + wg; }
};

struct BwdParams {
  const float* lse;
  const float* delta;
  float* dq_acc;  // the workspace: fp32 [batch*heads][seq_q][D], zero on entry
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, head)
  int group;         // query heads per K/V head (1: no grouping)
  int split;         // blocks per (key tile, K/V head), each over group / split heads
  int64_t kv_bh;     // batch * heads_kv
  float* parts;      // split > 1: fp32 dK parts [split][kv_bh][seq_k][D], then dV's likewise
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- dK, dV and dQ_tile ----------------------------------------------------------------------------
template <int D>
struct Smem {
  static constexpr int kKVBytes = kBc * D * 2;  // K or V
  static constexpr int kQBytes = kBr * D * 2;   // Q or dO, one stage
  static constexpr int kdSBytes = kBc * kBr * 2;
  static constexpr int kStageBytes = DqSplit<D>::kBoxes * kBoxBytes;  // one warpgroup's staging
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                    // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;   // stage s at + s * kQBytes
  static constexpr int kdSOffset = kdOOffset + kStages * kQBytes;  // [128 keys][64 queries]
  static constexpr int kStOffset = kdSOffset + kdSBytes;           // warpgroup w at + w * ..
  static constexpr int kLOffset = kStOffset + kWarpgroups * kStageBytes;  // float [kStages][kBr]
  static constexpr int kDOffset = kLOffset + kStages * kBr * 4;           // float [kStages][kBr]
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
  using Dq = DqSplit<D>;
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
  const int64_t unit = int64_t(blockIdx.x) / p.n_tiles;  // (K/V head, part) (GQA: header)
  const int64_t kv_bh = unit / p.split;
  const int part = int(unit % p.split), heads = p.group / p.split;  // this block's query heads
  const int64_t k0 = (int64_t(blockIdx.x) % p.n_tiles) * kBc;
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
  // This warpgroup's staging: kBoxes boxes of 64 query rows x 32 columns, 128-byte swizzled.
  unsigned char* sSt = smem + Sm::kStOffset + wg * Sm::kStageBytes;
  // This warpgroup's 64 keys (rows of K and V in each strip) and this thread's two keys.
  const int wrow = wg * kWgRows;
  const unsigned char* sKw = sK + wrow * 128;
  const unsigned char* sVw = sV + wrow * 128;
  const int kr = wrow + 16 * (t / 32) + (t % 32) / 4;    // row of the dS^T tile; kr % 8 = lane / 4
  const int64_t key0 = k0 + kr;                          // and key0 + 8
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off
  // dQ_tile of this warpgroup: keys dq_key0 .. + 63 of the block (rows of the dS^T and K tiles),
  // every column of D.
  const int dq_key0 = Dq::key0(wg);
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
    const bool need_mask = k0 + kBc > seq_k || (p.causal && k0 + kBc - 1 > q0 + off);
    hopper::mbar_wait(&q_full[s], (j / kStages) & 1);

    // ---- S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries each, two commit groups.
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
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) {
        const int64_t key = key0 + 8 * ((i / 2) % 2);
        const int64_t query = q0 + 8 * (i / 4) + 2 * q + (i % 2);
        if (key >= seq_k || (p.causal && key > query + off)) st[i] = 0.0f;
      }
    }

    // ---- dV += P^T dO: k = the 64 queries, P^T from registers, dO MN-major.
    uint32_t pf[kBr / 16][4];
    pack_p<T>(st, pf);
    hopper::fence_registers(dv);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      hopper::wgmma_rs<D, T, 1>(dv, pf[kk], desc_mn_major<kBr>(sdO(s), kk), 1);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // dP^T (committed before dV) has landed; dV may still run
    hopper::fence_registers(dpt);

    // ---- dS^T = P^T o (dP^T - D), D per query (column).
    const float* dd = sD + s * kBr;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (i / 4) + 2 * q);
      dpt[i] = st[i] * (dpt[i] - d2.x);
      dpt[i + 1] = st[i + 1] * (dpt[i + 1] - d2.y);
    }

    // ---- dK += dS^T Q: k = the 64 queries, dS^T from registers, Q MN-major.
    uint32_t dsf[kBr / 16][4];
    pack_p<T>(dpt, dsf);
    hopper::fence_registers(dk);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      hopper::wgmma_rs<D, T, 1>(dk, dsf[kk], desc_mn_major<kBr>(sQ(s), kk), 1);
    hopper::wgmma_commit();

    // ---- dS^T -> the shared dS^T tile while dK runs: row kr (and kr + 8) = this thread's keys,
    // 64 queries = 128 bytes per row in eight 16-byte chunks, chunk c stored at c ^ (row % 8)
    // (the 128-byte swizzle TMA would write; row % 8 = lane / 4 for both rows). dsf[k] holds
    // queries 16k + 2q, +1 (chunk 2k) in [0] (row kr) and [1] (row kr + 8), and 16k + 8 + 2q, +1
    // (chunk 2k + 1) in [2] and [3]. For one store of a warp, its 8 rows put their 4-byte words in
    // 8 different chunks: the 32 words fall on 32 banks.
    {
      const int g = (t % 32) / 4;
      unsigned char* row_lo = sdS + kr * 128 + 4 * q;
      unsigned char* row_hi = row_lo + 8 * 128;
#pragma unroll
      for (int k = 0; k < kBr / 16; ++k) {
        *reinterpret_cast<uint32_t*>(row_lo + ((2 * k) ^ g) * 16) = dsf[k][0];
        *reinterpret_cast<uint32_t*>(row_hi + ((2 * k) ^ g) * 16) = dsf[k][1];
        *reinterpret_cast<uint32_t*>(row_lo + ((2 * k + 1) ^ g) * 16) = dsf[k][2];
        *reinterpret_cast<uint32_t*>(row_hi + ((2 * k + 1) ^ g) * 16) = dsf[k][3];
      }
    }
    hopper::fence_proxy_async_smem();              // the generic stores, before wgmma reads them
    if (adder) hopper::bulk_wait_group_read<0>();  // iteration j - 1's rows were read: reusable
    // At D 128 dK, dV and dQ_tile hold 192 registers a thread: the fragments of P^T and dS^T
    // (32 more) must be free before dQ_tile is issued, so dV and dK land first (header,
    // "Registers"). At D 64 dK still runs under the barrier and dQ_tile, as in bwd_v5.
    if constexpr (Dq::kDkBeforeDq) {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(dk);
      hopper::fence_registers(dv);
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {
        hopper::fence_registers(pf[kk]);
        hopper::fence_registers(dsf[kk]);
      }
    }
    hopper::named_bar_sync(Dq::ds_bar(wg), 128);

    // ---- dQ_tile = dS K: m = the 64 queries, n = all D columns, A = dS read transposed from the
    // dS^T tile rows dq_key0 .., B = K rows dq_key0 .. (MN-major, across the D / 64 strips). k16
    // step kk is rows dq_key0 + 16 kk .. of both tiles.
    float dq[Dq::kCols / 2];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Dq::kKeys / 16; ++kk)
      hopper::wgmma_ss<Dq::kCols, T, 1, 1>(dq, desc_mn_major<kBc>(sdS + dq_key0 * 128, kk),
                                           desc_mn_major<kBc>(sK + dq_key0 * 128, kk), kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();  // dQ_tile (and at D 64 dV and dK) have landed
    hopper::fence_registers(dq);
    if constexpr (!Dq::kDkBeforeDq) {
      hopper::fence_registers(dk);
      hopper::fence_registers(dv);
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {
        hopper::fence_registers(pf[kk]);
        hopper::fence_registers(dsf[kk]);
      }
    }

    // ---- dQ_tile -> the staging boxes (fp32, the map's 128-byte swizzle): thread t holds rows
    // 16w + g and 16w + g + 8, columns 8i + 2q, +1 in dq[4i + 2h], dq[4i + 2h + 1] (w = t / 32).
    // Column 8i + 2q is in box i / 4, 16-byte chunk 2 (i % 4) + q / 2, at byte 8 (q % 2); the
    // chunk is stored at chunk ^ g (row % 8 = g for both rows), which is 2 (i % 4) ^ x with
    // x = (q / 2) ^ g, since 2 (i % 4) is even.
    {
      const int w = t / 32, g = (t % 32) / 4, x = (q / 2) ^ g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned char* row = sSt + (16 * w + g + 8 * h) * 128 + 8 * (q % 2);
#pragma unroll
        for (int i = 0; i < Dq::kCols / 8; ++i)
          *reinterpret_cast<float2*>(row + (i / 4) * kBoxBytes + (((2 * (i % 4)) ^ x) * 16)) =
              make_float2(dq[4 * i + 2 * h], dq[4 * i + 2 * h + 1]);
      }
    }
    hopper::fence_proxy_async_smem();  // before the TMA engine reads the boxes
    hopper::named_bar_sync(Dq::stage_bar(wg), 128);
    if (adder) {
      // Every thread of the warpgroup is past its wgmma_wait and its reads of L and D: stage s
      // is free as far as this warpgroup goes (the producer refills it once both have said so).
      hopper::mbar_arrive(&q_empty[s]);
      // Rows q0 .. q0 + 63 of query head at.head, columns 32 b ..; rows past seq_q are clipped.
#pragma unroll
      for (int b = 0; b < Dq::kBoxes; ++b)
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
    store_acc_rows<float, D, D>(p.parts + head * seq_k * D, dk, row0, seq_k, 1.0f, t);
    store_acc_rows<float, D, D>(p.parts + (all + head) * seq_k * D, dv, row0, seq_k, 1.0f, t);
    return;
  }
  store_acc_rows<T, D, D>(static_cast<T*>(p.dk) + kv_bh * seq_k * D, dk, row0, seq_k, p.scale, t);
  store_acc_rows<T, D, D>(static_cast<T*>(p.dv) + kv_bh * seq_k * D, dv, row0, seq_k, 1.0f, t);
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
  p.n_tiles = n_kt;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  p.group = int(s.group());
  p.kv_bh = kv_bh;
  // The split of each group (bwd_v1's header); its parts need memory of their own here, since the
  // workspace holds dQ's sum (PartsBuffer): without it the block runs the whole group.
  p.split = dkdv_split<dkdv_dq_kernel<T, D>, Smem<D>::kBytes>(s, kThreads, kBc, kBr);
  const PartsBuffer parts(s, p.split, stream);
  if (parts.ptr() == nullptr) p.split = 1;
  p.parts = parts.ptr();

  // 2. dK, dV and dQ_tile: K/V boxes of kBc rows (kept), Q/dO boxes of 64 rows (streamed); every
  // box is 64 columns wide, one 128-byte swizzled strip.
  const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, D, kBr, a.dtype);
  const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, D, kBr, a.dtype);
  const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, D, kBc, a.dtype);
  const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, D, kBc, a.dtype);
  const CUtensorMap tm_dq = make_tmap_f32(a.workspace, s.bh(), s.seq_q, D, kBoxCols, kBr, kName);
  constexpr int kSmem = Smem<D>::kBytes;
  set_smem_limit_once<dkdv_dq_kernel<T, D>, kSmem>();
  dkdv_dq_kernel<T, D><<<unsigned(n_kt * kv_bh * p.split), kThreads, kSmem, stream>>>(
      tm_q, tm_k, tm_v, tm_do, tm_dq, p);
  FA_CHECK_LAUNCH();
  if (p.split > 1) sum_parts<T>(p.parts, a, p.split, p.scale, stream);

  // 3. dQ from the workspace (dq_convert, hopper_attention_bwd.cuh).
  dq_convert<T>(a, p.scale, stream);
}

template <class T>
void dispatch_head_dim(const AttentionBwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) + " not instantiated (64, 128)");
  }
}

void attention_bwd_t44(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.head_dim != 64 && s.head_dim != 128,
                    std::string(kName) + " is instantiated for head_dim 64 and 128 only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  FA_REQUIRE(s.valid_heads(), std::string(kName) + ": heads must be a multiple of heads_kv");
  if (s.bh() == 0) return;  // nothing to write
  FA_REQUIRE(a.workspace != nullptr, std::string(kName) + " needs the fp32 workspace (dQ's sum)");
  // The bulk reduce-adds need 16-byte aligned rows of the workspace (D * 4 bytes per row keeps
  // them so once the base is).
  const bool can_load = tma_can_load(a) && aligned(a.workspace, 16);
  if (s.is_gqa() && !can_load) return grouped_fallback(a, stream, kName);
  if (!can_load) return run_fallback(a, stream);
  // 1. D = rowsum(dO o O), before the kernel that reads it (same stream).
  delta_preprocess_launch(a.o, a.dout, a.delta, s, a.dtype, stream);
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {kName,
             attention_bwd_t44,
             "bwd_v5 with each warpgroup's dQ tile over its own 64 keys and all D columns at "
             "D 128 too (as at D 64): no barrier between the consumer warpgroups in the loop; "
             "not deterministic",
             {DType::BF16, DType::F16},
             {64, 128},
             90,
             /*deterministic=*/false,
             /*gqa=*/true});

}  // namespace fa::ch07
