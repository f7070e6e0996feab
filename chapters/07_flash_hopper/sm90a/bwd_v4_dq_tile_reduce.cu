// 07/bwd_v4_dq_tile_reduce: bwd_v2's one pass, with each warpgroup's dQ_tile added into the fp32
// workspace by two TMA instructions instead of sixty-four. Not deterministic, as bwd_v2.
// Copied from 07/bwd_v2_dq_reduce (sm90a/bwd_v2_dq_reduce.cu, read its header first: the
// algorithm, the split of dQ_tile between the warpgroups, the ordering and the masking are its);
// one idea changed: how dQ_tile leaves shared memory.
//
// Why: bwd_v2 runs the five products and still lasts as long as bwd_v1's two kernels (Nsight
// Compute at D 128, N 8192, full: tensor pipe busy 43.5% against bwd_v1's dK/dV kernel's 66.4%,
// the barrier stalls more than doubled; notes/07_flash_hopper.md, "The single pass, measured").
// One suspect is the number of TMA instructions its dQ path gives the engine: each warpgroup
// issues one cp.reduce.async.bulk per query row, 64 instructions of 256 bytes per tile, 128 per
// block and tile, beside the 4 to 8 tensor loads of the next Q and dO tile. The engine takes its
// instructions one at a time, and the warpgroup waits for the last of them to have read its rows
// (bulk_wait_group_read) before it may stage the next tile: the wait sits on the critical path,
// and its length grows with the count, not with the 16 KiB moved. FlashAttention-3's backward
// moves the same 16 KiB per warpgroup and tile with one bulk reduce-add (hopper/
// mainloop_bwd_sm90_tma_gmma_ws.hpp in the flash-attention repository; its dQ accumulator is laid
// out tile by tile so that the 16 KiB are contiguous).
//
// What changes: the workspace keeps dQ's row-major layout [batch*heads][seq_q][D], and a tensor
// map describes it (fp32, boxes of 32 columns x 64 rows, the 128-byte swizzle). A warpgroup's
// 64 x 64 dQ_tile is two such boxes; it is staged in shared memory as the map's swizzle lays them
// out, and one thread issues two cp.reduce.async.bulk.tensor .add instructions. The engine clips
// rows past seq_q itself (a box may run past the end of a head's rows; those elements are not
// written), so the ragged last tile needs no special case, and the convert kernel is bwd_v2's.
//
// The staging layout: box b (columns 32b .. 32b + 31 of the warpgroup's 64) is 64 rows of 128
// bytes, the 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the 128-byte swizzle, as TMA
// reads it). Thread t holds rows 16w + g and 16w + g + 8 (w = t / 32, g = lane / 4) and columns
// 8i + 2q, +1 (q = lane % 4) of the tile: a float2 of row r, column c goes to box c / 32, chunk
// (c % 32) / 4 ^ g, byte 4 (c % 4). One store of a warp (fixed i and h) covers 8 rows x 4 quads:
// for q = 0, 1 its 16 threads fill 8 different chunks, both halves of each, which is all 32 banks
// once, and q = 2, 3 the same: two wavefronts for 256 bytes, the least there can be (bwd_v2's
// padded rows, 72 floats, were conflict-free too; the layout is the map's, not a new cost).
// Staging per warpgroup: 2 x 64 x 128 = 16 KiB (bwd_v2: 64 x 72 x 4 = 18 KiB).
//
// Ordering, per warpgroup and iteration j, as bwd_v2's with one issuing thread:
//   ... dK (group); dS^T -> smem, fence.proxy.async;
//   thread 0 of the warpgroup: cp.async.bulk.wait_group.read 0 (its two reduce-adds of iteration
//     j - 1 have read the staging boxes);
//   named barrier; dQ_tile (group); wait 0; dQ_tile -> staging boxes, fence.proxy.async, named
//   barrier of the warpgroup; thread 0: two reduce-adds, commit; __syncthreads; refill.
//   At the end thread 0 of each warpgroup waits for its groups to complete (wait_group 0).
//
// Shared memory: bwd_v2's with the staging 2 x 16 KiB in place of 2 x 18 KiB: 114 KiB at D 64,
// 178 KiB at D 128.
//
// Prediction: if the dQ path's wait is the engine working through 64 instructions, two bring it
// to the length of a 16 KiB read: 1.15-1.3x bwd_v2 at D 128 and N >= 4096 (1.05-1.2x bwd_v1),
// more at D 64, where bwd_v2 lost most (0.79-0.88x bwd_v1). If the wait is the L2's rate of
// fp32 reductions instead (about 1.6 TB/s of them at 500 TFLOP/s, bwd_v2's header), the count
// does not matter and this rung measures as bwd_v2: that is the test.
// Measured (NVIDIA H200, 2026-12-02, bf16, protocol shapes, one run with bwd_v1 and bwd_v2;
// notes/measured/h200-2026-12-02/bwd_v4_v2_v1.log): 1.10-1.14x bwd_v2 at D 128 (just under the
// prediction), 1.23-1.39x at D 64; 1.05-1.10x bwd_v1 at every shape of both head dims, and
// 0.80-0.98x cuDNN. The count mattered; it was not all of the wait (chapter README, tuning/).
// Grouped K/V heads: as bwd_v2 (its header); the tensor reduce-add's head coordinate is the
// iteration's query head.
// ptxas (CUDA 13.0, sm_90a): 255 registers at D 128, 215 at D 64, no spills (before grouped
// heads: 8 bytes of spill at D 128, 233 registers at D 64).
// Speed: measured in chapters/07_flash_hopper/README.md
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_v4_dq_tile_reduce";
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;     // 64: wgmma M, the keys one warpgroup owns
constexpr int kBc = kWarpgroups * kWgRows;     // 128 keys per block
constexpr int kBr = 64;                        // queries per streamed tile: N of S^T and dP^T
constexpr int kDqN = 64;                       // columns of dQ_tile per warpgroup (both head dims)
constexpr int kBoxCols = 32;                   // fp32 columns per 128-byte swizzled row of a box
constexpr int kBoxes = kDqN / kBoxCols;        // reduce-adds per warpgroup and tile: 2
constexpr int kBoxBytes = kBr * kBoxCols * 4;  // 64 rows x 128 bytes = 8 KiB

// How the two warpgroups share dQ_tile = dS K (see "How the warpgroups share" in the header).
template <int D>
struct DqSplit {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr bool kByColumns = D == 128;              // else by keys
  static constexpr int kKeys = kByColumns ? kBc : kWgRows;  // keys warpgroup w contracts over
  static constexpr int kBarThreads = kByColumns ? kThreads : 128;  // who shares the dS^T tile
  __device__ static int key0(int wg) { return kByColumns ? 0 : wg * kWgRows; }
  __device__ static int col0(int wg) { return kByColumns ? wg * kDqN : 0; }
  // Named barrier ids (0 is __syncthreads): the dS^T tile is written (one id for the block at
  // D = 128, one per warpgroup at D = 64), and the staging rows are written (one per warpgroup).
  __device__ static int ds_bar(int wg) { return kByColumns ? 1 : 1 + wg; }
  __device__ static int stage_bar(int wg) { return 3 + wg; }
};

struct BwdParams {
  const float* lse;
  const float* delta;
  float* dq_acc;  // the workspace: fp32 [batch*heads][seq_q][D], zero on entry
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int d;             // the real head dim, the rows' length in global memory (D rounds it up)
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
  static constexpr int kStageBytes = kBoxes * kBoxBytes;  // one warpgroup's staging boxes
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                    // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;   // stage s at + s * kQBytes
  static constexpr int kdSOffset = kdOOffset + kStages * kQBytes;  // [128 keys][64 queries]
  static constexpr int kStOffset = kdSOffset + kdSBytes;           // warpgroup w at + w * ..
  static constexpr int kLOffset = kStOffset + kWarpgroups * kStageBytes;  // float [kStages][kBr]
  static constexpr int kDOffset = kLOffset + kStages * kBr * 4;           // float [kStages][kBr]
  static constexpr int kBarOffset = kDOffset + kStages * kBr * 4;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
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
  uint64_t* q_full = kv_full + 1;  // one per stage: Q and dO bytes of the tile have landed

  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128, q = t % 4;
  const int64_t unit = int64_t(blockIdx.x) / p.n_tiles;  // (K/V head, part) (GQA: header)
  const int64_t kv_bh = unit / p.split;
  const int part = int(unit % p.split), heads = p.group / p.split;  // this block's query heads
  const int64_t k0 = (int64_t(blockIdx.x) % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  // This warpgroup's staging: kBoxes boxes of 64 query rows x 32 columns, 128-byte swizzled.
  unsigned char* sSt = smem + Sm::kStOffset + wg * Sm::kStageBytes;

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
  // Iteration j's place (query head, Q tile qt_begin + i), stepped with j (GroupPlace); `ahead`
  // is iteration j + kStages's, the tile the loop requests and whose L and D it loads.
  GroupPlace at{int(kv_bh * p.group + part * heads), 0}, ahead = at;

  // Thread 0: Q and dO of the tile at place `pl` into stage s.
  auto request_q = [&](int s, GroupPlace pl) {
    const int row = int((qt_begin + pl.i) * kBr);
    hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
    for (int c = 0; c < kStrips; ++c) {
      hopper::tma_load_3d(sQ(s) + c * kBr * 128, &tm_q, &q_full[s], c * kSwizzleCols, row, pl.head);
      hopper::tma_load_3d(sdO(s) + c * kBr * 128, &tm_do, &q_full[s], c * kSwizzleCols, row,
                          pl.head);
    }
  };
  // Warpgroup 0: threads 0..63 carry L2 of the tile's 64 queries, threads 64..127 their D.
  auto load_ld = [&](GroupPlace pl) {
    const int64_t row = (qt_begin + pl.i) * kBr + tid % kBr, head_row0 = pl.head * seq_q;
    if (tid < kBr) return load_l2(p.lse + head_row0, row, seq_q);
    return row < seq_q ? p.delta[head_row0 + row] : 0.0f;
  };
  auto store_ld = [&](int s, float x) {
    if (tid < kBr)
      sL[s * kBr + tid] = x;
    else if (tid < 2 * kBr)
      sD[s * kBr + tid - kBr] = x;
  };

  if (tid == 0) {
    hopper::mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&q_full[s], 1);
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
    GroupPlace pl = ahead;
    for (int j = 0; j < kStages && j < n_iter; ++j, pl.step(n_per)) request_q(j, pl);
  }
  for (int j = 0; j < kStages && j < n_iter; ++j, ahead.step(n_per))
    if (tid < 2 * kBr) store_ld(j, load_ld(ahead));
  __syncthreads();  // barriers initialised, L and D of the first stages stored

  // This warpgroup's 64 keys (rows of K and V in each strip) and this thread's two keys.
  const int wrow = wg * kWgRows;
  const unsigned char* sKw = sK + wrow * 128;
  const unsigned char* sVw = sV + wrow * 128;
  const int kr = wrow + 16 * (t / 32) + (t % 32) / 4;    // row of the dS^T tile; kr % 8 = lane / 4
  const int64_t key0 = k0 + kr;                          // and key0 + 8
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off
  // dQ_tile of this warpgroup: keys dq_key0 .. + Dq::kKeys - 1 of the block (rows of the dS^T and
  // K tiles), columns dq_col0 .. + 63 of D.
  const int dq_key0 = Dq::key0(wg), dq_col0 = Dq::col0(wg);
  // Thread 0 of the warpgroup issues its reduce-adds (bulk groups belong to the issuing thread).
  const uint32_t st_addr = mma::smem_addr(sSt);
  const bool adder = t == 0;

  float dk[D / 2], dv[D / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j, at.step(n_per), ahead.step(n_per)) {
    const int s = j % kStages;
    const int64_t q0 = (qt_begin + at.i) * kBr;
    const bool prefetch = j + kStages < n_iter && tid < 2 * kBr;
    const float next_ld = prefetch ? load_ld(ahead) : 0.0f;
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
    hopper::named_bar_sync(Dq::ds_bar(wg), Dq::kBarThreads);

    // ---- dQ_tile = dS K: m = the 64 queries, A = dS read transposed from the dS^T tile rows
    // dq_key0 .., B = K rows dq_key0 .. (MN-major, from strip dq_col0 / 64 on). k16 step kk is
    // rows dq_key0 + 16 kk .. of both tiles.
    float dq[kDqN / 2];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Dq::kKeys / 16; ++kk)
      hopper::wgmma_ss_n64_at<T>(dq, desc_mn_major<kBc>(sdS + dq_key0 * 128, kk),
                                 desc_mn_major<kBc>(sK + dq_key0 * 128, kk, dq_col0), kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();  // dV, dK and dQ_tile have landed
    hopper::fence_registers(dq);
    hopper::fence_registers(dk);
    hopper::fence_registers(dv);
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk) {
      hopper::fence_registers(pf[kk]);
      hopper::fence_registers(dsf[kk]);
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
        for (int i = 0; i < kDqN / 8; ++i)
          *reinterpret_cast<float2*>(row + (i / 4) * kBoxBytes + (((2 * (i % 4)) ^ x) * 16)) =
              make_float2(dq[4 * i + 2 * h], dq[4 * i + 2 * h + 1]);
      }
    }
    hopper::fence_proxy_async_smem();  // before the TMA engine reads the boxes
    hopper::named_bar_sync(Dq::stage_bar(wg), 128);
    if (adder) {
      // Rows q0 .. q0 + 63 of query head at.head, columns dq_col0 + 32 b ..; rows past seq_q
      // are clipped.
#pragma unroll
      for (int b = 0; b < kBoxes; ++b)
        hopper::tma_reduce_add_3d(&tm_dq, st_addr + b * kBoxBytes, dq_col0 + b * kBoxCols, int(q0),
                                  at.head);
      hopper::bulk_commit_group();
    }

    // ---- Stage s and the dS^T tile are free once both warpgroups are done with them: refill
    // stage s with tile j + 2.
    __syncthreads();
    if (j + kStages < n_iter) {
      if (tid == 0) request_q(s, ahead);
      store_ld(s, next_ld);  // read again only after next iteration's barrier
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
  store_acc_rows<T, D>(static_cast<T*>(p.dk) + kv_bh * seq_k * p.d, dk, row0, seq_k, p.scale, t,
                       p.d, p.d);
  store_acc_rows<T, D>(static_cast<T*>(p.dv) + kv_bh * seq_k * p.d, dv, row0, seq_k, 1.0f, t, p.d,
                       p.d);
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
  p.split = dkdv_split<dkdv_dq_kernel<T, D>, Smem<D>::kBytes>(s, kThreads, kBc, kBr);
  const PartsBuffer parts(s, p.split, stream);
  if (parts.ptr() == nullptr) p.split = 1;
  p.parts = parts.ptr();

  // 2. dK, dV and dQ_tile: K/V boxes of kBc rows (kept), Q/dO boxes of 64 rows (streamed); every
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

template <class T>
void dispatch_head_dim(const AttentionBwdArgs& a, cudaStream_t stream) {
  switch (head_dim_instance(a.shape.head_dim)) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) + " not instantiated (64, 128)");
  }
}

void attention_bwd_v4(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(head_dim_instance(s.head_dim) == 0 || head_dim_instance(s.head_dim) > 128,
                    std::string(kName) +
                        " is instantiated for head_dim 64 and 128 (the multiples of 8 up to 128 "
                        "rounded up) only");
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
             attention_bwd_v4,
             "bwd_v2's one pass with dQ_tile added into the fp32 workspace by two TMA tensor "
             "reduce-adds per warpgroup (swizzled 32-column boxes) instead of one bulk "
             "reduce-add per query row; not deterministic",
             {DType::BF16, DType::F16},
             {64, 128},
             90,
             /*deterministic=*/false,
             /*gqa=*/true,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
