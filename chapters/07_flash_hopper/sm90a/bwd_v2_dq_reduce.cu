// 07/bwd_v2_dq_reduce: the Hopper backward in one pass over the keys. dQ is computed inside the
// dK/dV kernel and added into an fp32 accumulator in global memory by the TMA engine's
// reduce-add (cp.reduce.async.bulk .add.f32); not deterministic (the order in which the key
// blocks add into a dQ row is the order in which they happen to arrive).
// Copied from 07/bwd_v1_tma_wgmma (chapters/07_flash_hopper/sm90a/bwd_v1_tma_wgmma.cu, read its
// header first); one idea changed: the dQ kernel and its recomputation of S and dP are gone.
//
// Why: per (64-query tile, 128-key block) bwd_v1 issues 7 products of one Nq x Nk x D unit each:
// the dK/dV kernel S^T, dP^T, dV, dK and the dQ kernel S, dP (the same two tiles again) and dQ.
// Its tensor pipes were about as busy per cycle as cuDNN's, and its tensor-active time was 1.41x
// cuDNN's = 7 / 5 (notes/07_flash_hopper.md, "Against cuDNN: where its cycles go"): cuDNN does
// only the 5 products the algorithm needs. Here the dK/dV kernel already holds dS^T for its keys
// and the tile of queries; dQ_tile = dS K is a fifth product there, and what it costs beyond
// the tensor work is moving dQ_tile out: D fp32 per query row per key block, added into global
// memory, where bwd_v1 wrote each dQ row once.
//
// The launches (one stream; the caller zeroes the workspace before each call, which the
// registry's contract says it does: AttentionBwdArgs::workspace):
//   1. D = rowsum(dO o O): chapter 06's preprocess, as in bwd_v1.
//   2. dkdv_dq_kernel: one block per (tile of Bc = 128 keys, batch*head); two warpgroups, 64 keys
//      each. K and V stay in shared memory; the Q tiles that see them stream through a 2-stage
//      ring with dO, L, D, as in bwd_v1:
//        S^T  = K Q^T, P^T, dP^T = V dO^T, dV += P^T dO, dS^T = P^T o (dP^T - D), dK += dS^T Q
//      exactly bwd_v1's, and then, new:
//        dS^T -> shared memory (16-bit, 128 keys x 64 queries, the 128-byte swizzle)
//        dQ_tile = dS K        wgmma_ss, A = dS read *transposed* out of the dS^T tile (a 16-bit
//                              A may be MN-major in shared memory: imm-trans-a = 1),
//                              B = K (smem, MN-major, as bwd_v1's dq kernel read it)
//        dQ_tile -> shared memory (fp32) -> cp.reduce.async.bulk .add.f32 into the workspace
//   3. dq_convert_kernel: dQ = workspace * scale in the dtype, elementwise.
//
// How the warpgroups share dQ_tile (64 queries x D; wgmma's M = 64 is the whole query tile, so
// the split is over N or over K, never over M):
//   D = 128: by columns. Warpgroup w computes dQ_tile[:, 64w .. 64w + 63] over all 128 keys of
//            the block (8 k16 steps), so each needs the other's dS^T: both write their 64 keys'
//            rows of the dS^T tile, then a named barrier of all 256 threads, then the wgmma.
//            Each query row is added once per key block: 64 x 128 floats per tile.
//   D =  64: by keys. Splitting 64 columns would give each warpgroup N = 32, and the second
//            half starts in the middle of K's 64-column swizzled strip, where the MN-major
//            descriptors of this chapter (whole 64-column strips) cannot start. So warpgroup w computes the whole 64 x 64 tile over its own 64 keys
//            (4 k16 steps): it reads only its own dS^T rows (a barrier of its 128 threads), and
//            both warpgroups add their partial tile into the same rows: 2 x 64 x 64 floats per
//            tile, the same bytes as D = 128's.
//   Either way every warpgroup computes a 64 x 64 accumulator (32 registers) and adds 64 rows
//   of 64 floats (256 contiguous bytes of the workspace each).
//
// The reduce-add: the non-tensor bulk form, one instruction per row (cp.reduce.async.bulk.global
// .shared::cta.bulk_group.add.f32 [row in the workspace], [row in smem], 256 bytes), issued by
// threads 0..63 of each warpgroup, one row each. Why not the .tensor form with a tensor map:
// rows past seq_q are simply not issued (the tensor form would clip them too), the workspace
// keeps dQ's own row-major layout [batch*heads][seq_q][D] (exactly q_numel() floats, no padding
// for ragged tiles; the convert kernel is a plain elementwise pass), and, the one that decides
// it, the smem rows may be padded: a dense 64 x 64 fp32 box (an unswizzled tensor map's source)
// puts the 8 rows a warp writes in one store on the same banks, 8 ways conflicted; rows of 72
// floats (+32 bytes) put them on different banks, conflict-free (below). (A 128-byte-swizzled
// fp32 map would avoid the conflicts too, at 32 columns per box.)
//
// Ordering, per warpgroup and iteration j (groups are wgmma commit groups):
//   S^T, dP^T (2 groups); wait 1; P^T; dV (group); wait 1; dS^T; dK (group, A from registers);
//   store dS^T to smem, fence.proxy.async (wgmma reads smem through the async proxy);
//   threads 0..63: cp.async.bulk.wait_group.read 0 (the reduce-add of iteration j - 1 has read
//     the staging rows: they may be rewritten);
//   named barrier (dS of both warpgroups, or of this one at D = 64, is in smem; the staging rows
//     are free);
//   dQ_tile (group, 8 or 4 k16 steps); wait 0 (dV, dK, dQ_tile done);
//   dQ_tile -> staging rows (fp32), fence.proxy.async, named barrier of the warpgroup;
//   threads 0..63: issue the reduce-add of their row (if the query exists), commit the bulk group;
//   __syncthreads (stage s and the dS^T tile are free: every wgmma reading them was waited for),
//   thread 0 refills stage s, as in bwd_v1.
//   The reduce-add of iteration j runs (reads smem, adds in L2) during the S^T .. dK of iteration
//   j + 1; its read is waited for just before the barrier that lets dQ_tile j + 1 be staged.
//   At the end, threads 0..63 wait for their bulk groups to complete (cp.async.bulk.wait_group 0)
//   before the block exits: the workspace is complete when the kernel is, and the convert kernel
//   (next on the stream) reads it.
//
// Tiles and registers (per thread; a warpgroup holds a 64 x N fp32 accumulator in N / 2):
//   D = 128: dK 64 + dV 64 + dQ_tile 32 + P^T and dS^T fragments 16 + 16 = 192 while dQ_tile
//            runs (below bwd_v1's peak of 208: dK + dV + S^T + dP^T + P^T fragments when dS^T
//            is formed); D = 64: 32 + 32 + 32 + 16 + 16 = 128.
//   ptxas (CUDA 13.0, sm_90a, bf16 and fp16 alike): 255 registers at D 128 (as bwd_v1's dkdv),
//   208 at D 64, no spills (before grouped heads: 255 and 209); the convert kernel 14. The
//   reduce-add's workspace address is formed where it is issued: held across the loop, with the
//   group's head in it, it spilled 4 bytes at D 128.
//
// Shared memory (16-bit tiles first, 1024-byte aligned, + 1 KiB for that alignment):
//   K, V 128 x D; 2 stages x (Q, dO 64 x D); dS^T 128 x 64 (16 KiB);
//   staging 2 warpgroups x 64 rows x 72 floats (36 KiB); 2 stages x (L, D 64 floats); barriers.
//   D 64: 16 + 16 + 2 x (8 + 8) + 16 + 36 + 1 (+ 1) = 118 KiB; D 128: 32 + 32 + 2 x (16 + 16) +
//   16 + 36 + 1 (+ 1) = 182 KiB (bwd_v1's dkdv: 65 and 130). One block per SM, as bwd_v1.
//
// Head dims: 64 and 128. D = 256 is left out: bwd_v1's split there keeps 64 keys per block and
// gives each warpgroup 128 columns of dK and dV; dQ_tile would add 64 x 256 fp32 of staging (64
// KiB, or 32 KiB per warpgroup) to bwd_v1's 194 KiB, past the 227 KiB a block may have, and
// staging it in pieces is another idea. The registry refuses D = 256 for this kernel.
//
// Masking and ragged shapes, as bwd_v1: TMA zero-fills Q and dO rows past seq_q and K, V rows past
// seq_k; such query rows have L2 = +inf (P^T = 0, so dS^T = 0), such keys get P^T = 0 by the mask
// and K = 0 in the tile, so they add nothing to dQ_tile; and the reduce-add of a row past seq_q
// is never issued. Query tiles before a block's first visible query (causal) are skipped, as
// their dS is 0. Rows no key block adds to (a query that sees no key) keep the caller's zero and
// get dQ = 0. Offsets are 64-bit; batch*heads * key tiles is on gridDim.x.
//
// Grouped K/V heads (GQA, MQA) as bwd_v1 (its header, "Grouped K/V heads"): a block loops over
// its K/V head's group of query heads (or group / split of them), n_per Q tiles each; dK and dV
// are summed over the group in its registers and stored once, or as the split's fp32 parts, which
// sum_parts_kernel adds in their fixed order; K and V are read at K/V head bh / group. dQ_tile is
// added into the workspace rows of the iteration's query head. Iteration j's query head and Q
// tile (a GroupPlace, hopper_attention_bwd.cuh) are stepped from one iteration to the next, not
// divided out of j: at a group of 1 the loop is the multi-head loop it was (ptxas: the same
// registers, no spill, its instructions within about 1%). One difference from bwd_v1: the
// workspace holds dQ's sum here, so the parts take a buffer of their own, a stream-ordered
// allocation (PartsBuffer in hopper_attention_bwd.cuh); where it cannot be had the block runs the
// whole group (split 1).
//
// Fallback: shapes TMA cannot load, and a workspace not 16-byte aligned (the bulk copies need
// 16-byte aligned addresses), run 06/v2_mma, as bwd_v1.
//
// Prediction: the tensor work falls from 7 units to 5 per (query tile, key block): if the
// backward is tensor-bound as bwd_v1 was, 7/5 = 1.4x bwd_v1's speed at D 128 (bwd_v1 spent 1.41x
// cuDNN's tensor-active time and ran at 0.78x cuDNN at N 8192: 1.4 x 0.78 = 1.09x cuDNN at best).
// Against it, the reduce-add traffic: D fp32 per query row per key block, i.e. per head
// (N / 128) x N x D x 4 = N^2 D / 32 bytes at D 128 against the 2.5 x 4 N^2 D = 10 N^2 D counted
// FLOPs: 1 byte per 320 FLOPs, about 1.6 TB/s of fp32 reductions into L2 at 500 TFLOP/s (as much
// as the Q and dO tiles the blocks stream in); at D 64 twice the bytes per FLOP (both
// warpgroups add a partial tile), about 2.5 TB/s at 400 TFLOP/s. Also against it: the dQ wgmma
// waits at a 256-thread barrier for the slower warpgroup's dS^T (D 128), the staging of dQ_tile
// is not overlapped with tensor work, and a convert pass reads 4 and writes 2 bytes per dQ
// element (under 2% at N 8192). Expected: 1.2-1.35x bwd_v1 at D 128, N >= 4096 (0.95-1.05x
// cuDNN); at D 64 1.1-1.25x, the reductions nearer to a limit.
// Measured (H100 80GB HBM3, 2026-11-26, bf16, one run with bwd_v1 and the peers): 0.90-0.94x
// bwd_v1 at D 128 full, 0.95-1.12x causal, 0.79-0.88x at D 64: the prediction failed. Nsight
// Compute at D 128 N 8192 full: this kernel alone lasts as long as bwd_v1's two (7.48 ms), its
// tensor pipe busy 43.5% of the active cycles against bwd_v1's dK/dV kernel's 66.4%, +300
// instructions a warp per tile, the barrier stalls more than doubled: the five products run, but
// with the dQ product, its staging and the reduce-add in series between one tile's dK and the
// next tile's S^T (notes/07_flash_hopper.md, "The single pass, measured").
// Speed: measured in chapters/07_flash_hopper/README.md
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_v2_dq_reduce";
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;  // 64: wgmma M, the keys one warpgroup owns
constexpr int kBc = kWarpgroups * kWgRows;  // 128 keys per block
constexpr int kBr = 64;                     // queries per streamed tile: N of S^T and dP^T
constexpr int kDqN = 64;                    // columns of dQ_tile per warpgroup (both head dims)
constexpr int kStageLd = kDqN + 8;          // floats per staging row: + 32 bytes, no conflicts

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
  static constexpr int kStageBytes = kWgRows * kStageLd * 4;  // one warpgroup's staging
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
  static_assert(kStageBytes % 16 == 0 && (kStageLd * 4) % 16 == 0,
                "bulk copies read 16-byte aligned rows");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_dq_kernel(const __grid_constant__ CUtensorMap tm_q,
                   const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_do, const BwdParams p) {
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
  // This warpgroup's staging rows: 64 query rows of kStageLd floats.
  float* sSt = reinterpret_cast<float*>(smem + Sm::kStOffset + wg * Sm::kStageBytes);

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
  // Thread t < 64 adds query row t of the tile (its address in the workspace, of iteration j's
  // query head, is formed where it is added: held across the loop it would cost registers).
  const uint32_t st_row = mma::smem_addr(sSt + t * kStageLd);
  const bool adder = t < kBr;

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

    // ---- dQ_tile -> staging rows (fp32): thread t holds rows 16w + g and 16w + g + 8, columns
    // 8i + 2q, +1 in dq[4i + 2h], dq[4i + 2h + 1] (w = t / 32). Rows of 72 floats put row r's
    // words on banks 8r + 2q (mod 32): a half-warp's float2 stores (4 rows x 4 threads) cover the
    // 32 banks once.
    {
      const int w = t / 32, g = (t % 32) / 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* row = sSt + (16 * w + g + 8 * h) * kStageLd + 2 * q;
#pragma unroll
        for (int i = 0; i < kDqN / 8; ++i)
          *reinterpret_cast<float2*>(row + 8 * i) =
              make_float2(dq[4 * i + 2 * h], dq[4 * i + 2 * h + 1]);
      }
    }
    hopper::fence_proxy_async_smem();  // before the TMA engine reads the rows
    hopper::named_bar_sync(Dq::stage_bar(wg), 128);
    if (adder) {
      const int64_t row = q0 + t;
      float* const acc_row = p.dq_acc + (at.head * seq_q + row) * p.d + dq_col0;
      if (row < seq_q && dq_col0 < p.d)  // only the real columns of a head dim rounded up
        hopper::bulk_reduce_add_f32(acc_row, st_row, min(kDqN, p.d - dq_col0) * 4);
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
  constexpr int kSmem = Smem<D>::kBytes;
  set_smem_limit_once<dkdv_dq_kernel<T, D>, kSmem>();
  dkdv_dq_kernel<T, D>
      <<<unsigned(n_kt * kv_bh * p.split), kThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, p);
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

void attention_bwd_v2(const AttentionBwdArgs& a, cudaStream_t stream) {
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
             attention_bwd_v2,
             "Hopper backward in one pass: bwd_v1's dK/dV kernel also computes dQ_tile = dS K "
             "(A = dS^T from smem, transposed) and adds it into an fp32 workspace with the TMA "
             "reduce-add (cp.reduce.async.bulk); 5 products instead of 7, not deterministic",
             {DType::BF16, DType::F16},
             {64, 128},
             90,
             /*deterministic=*/false,
             /*gqa=*/true,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
