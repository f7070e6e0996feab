// 07/bwd_v3_deterministic: 07/bwd_v2_dq_reduce with the reduce-adds into each query tile in a
// fixed order, so that dQ is bitwise the same from run to run (deterministic = true).
// Copied from chapters/07_flash_hopper/sm90a/bwd_v2_dq_reduce.cu (read its header first: the
// one-pass backward, dQ_tile = dS K in the dK/dV kernel, the TMA reduce-add into the fp32
// workspace, the warpgroup split of dQ_tile); one idea changed: the order of the adds.
//
// Why: in bwd_v2 every key block adds its dQ_tile into the same workspace rows whenever it gets
// there, and fp32 addition is not associative: the sum of a row over the key blocks depends on
// the order in which they arrive, which changes from run to run. The values differ in the last
// bits only, but training runs that must repeat bit for bit (debugging a divergence, comparing
// two changes) need the same bits. bwd_v1 had them by computing dQ in a kernel of its own, at
// the price of S and dP computed twice (7 products instead of 5).
//
// The order of the adds: for every (head, query tile) a counter in global memory says how many
// adders have added into the tile. An adder is a warpgroup of a key block:
//   D = 128 (dQ_tile split by columns): one counter per column half; warpgroup w of key block n
//           adds its half at place rank (halves are disjoint: they need no order between them);
//   D =  64 (split by keys, both warpgroups add the same columns): one counter per tile;
//           warpgroup w of key block n adds at place 2 rank + w,
// where rank is how many key blocks add into the tile before block n (below).
// Each of a warpgroup's 64 adder threads waits (ld.acquire.gpu, spinning) until the counter has
// reached its place, issues its row's reduce-add, and waits until the add has *completed*
// (cp.async.bulk.wait_group 0, not only .read: the next adder must find the sum in place); a
// fence.proxy.async.global orders the TMA engine's writes before the generic-proxy release (and
// the acquire before the next adds); a named barrier of the 64 adders; then thread 0 bumps the
// counter (red.release.gpu.global.add). Every element of the workspace then receives its
// additions in the order of the places, whatever the timing. dK, dV (one owner per element) and
// the rest were deterministic already.
//
// Which order: the one in which the key blocks *reach* the tile when all run at one speed, so
// that, ideally, nobody waits: when block n gets to tile i, the blocks before it in the order
// have added there already, one iteration or more ago. A fixed order that ignores the walk is
// what makes blocks wait (key block 0 first at every tile: in a causal head block n starts at
// its diagonal tile, about 2n, and would wait there until blocks 0 .. n - 1, which start at
// tiles 0, 2, .., got there, a wavefront; in a full head all blocks would start at tile 0 and
// block n would add n round trips after block 0, a skew kept to the end). The walks and the
// order (ch07_dq_order.h computes both, in O(1) per iteration; tests/cpu/test_ch07_dq_order.cpp
// checks them against a brute-force walk and sort):
//   causal: block n visits its first visible tile f(n) (the tile of the first query that sees
//           key 128n; 0 when every query sees it) and every tile after it, as bwd_v2. At tile i
//           it is at iteration i - f(n); f never decreases with n, so ascending iteration is
//           descending n (ties, equal f, only among the blocks that every query sees when
//           seq_k > seq_q, are broken by descending n too). The blocks that add into tile i are
//           0 .. G(i) - 1 (G(i): the blocks with f <= i), and rank = G(i) - 1 - n. Square: the
//           diagonal tile's own block adds first, the block of the previous diagonal next, ...
//   full:   block n walks all n_qt query tiles from tile n mod n_qt, wrapping around after the
//           last: at tile i it is at iteration (i - n) mod n_qt; the order is ascending iteration
//           (ties, blocks n_qt apart, exist only when there are more key blocks than query
//           tiles: descending n, the block launched earlier first, as in the causal order). Its
//           rank counts, for the iterations before its own, the blocks with that iteration: a
//           cyclic range of residues of n mod n_qt, a few comparisons.
//           Rotated only when all key blocks of a head can be resident at once (below); when
//           they cannot, all blocks walk from tile 0 and add in descending n (the skew again).
//
// Why it cannot deadlock. Within a block, its adds come in program order (iteration, then
// warpgroup 0 before 1 at D = 64: warpgroup 0 never waits for warpgroup 1 within an iteration;
// the only block-wide barrier, __syncthreads at the end of the iteration, comes after both adds),
// and between two adds a block depends on no other block (TMA loads, wgmma, its own barriers).
// Order all adds of a head by (iteration, tie, warpgroup): every add waits only for adds smaller
// than itself, made at an earlier iteration of another block or at the same one earlier in the
// tie order (the test checks this for every adder). Then:
//   causal, and full not rotated: block n waits only for blocks m > n of its head. The key blocks
//     of a head are launched from the last to the first (blockIdx.x = head * n_kt + n_kt - 1 -
//     n), so those have smaller blockIdx.x. The GPU hands out blocks in increasing blockIdx.x
//     (the order every "wait for the block before me" scheme relies on; FlashAttention-3's
//     deterministic backward orders its dQ adds by the same rule): when block b runs, every block
//     before it runs or has finished. By induction on blockIdx.x, the lowest block still running
//     waits for no one who has not finished, so it finishes; then the next one, and so on. Any
//     number of blocks per head, any number of SMs.
//   full rotated: block n at iteration j may wait for any other block of its head (block 1 adds
//     into tile 0 after block 0, block 0 into tile 1 after block 1). If all n_kt blocks of the
//     head are resident, the smallest add not yet made has every add before it made, and its
//     block reaches it: it is made; by induction all are. The launcher rotates only when n_kt <=
//     SMs x resident blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor; one here).
//     Then, with blocks handed out in increasing blockIdx.x: take the lowest head h not
//     finished. If some of its blocks have not been handed out, no block of a later head has
//     either, so the blocks of this kernel holding SMs are head h's, fewer than n_kt: an SM is
//     free (or held by another kernel, which ends by itself), and the next block of head h gets
//     it. Once all of head h's blocks have been handed out they are all resident or finished:
//     head h finishes, and the induction goes on with head h + 1. With more key blocks than
//     that, block n_kt - 1 (the first launched) would wait at tile 0 for block 0, which would
//     wait for an SM that spinning blocks of its own head hold: a hang (the test's model of the
//     GPU shows it), hence the rule.
//   (Nothing else may hold the SMs for good: a block spinning here never yields its SM, so a
//   kernel running beside this one on another stream can only delay it, and only as long as it
//   runs by itself. Not so two rotated launches of this kernel at once on two streams: each
//   could hold part of the SMs with part of a head and wait for the rest, a hang; the causal and
//   not-rotated orders have no such case, the lowest running block of either launch always
//   finishes. Likewise the SM count is the device's: a launch confined to fewer SMs than
//   cudaDevAttrMultiProcessorCount says, e.g. by an MPS limit, could hang a rotated head.)
//
// Where the counters live: the workspace is exactly dQ's q_numel() floats, all of it the sum.
// dQ's own output buffer is not used until the convert kernel writes it at the end, and it is
// large enough: a head needs kCounters (1 or 2) ints per 64 query rows, dQ holds 64 x D x 2 >= 8
// KiB per 64 rows. So the launcher zeroes the first bh x n_qt x kCounters ints of dQ
// (cudaMemsetAsync, on the same stream, before the kernel), the kernel counts in them, and the
// convert kernel overwrites them with dQ. (dQ is 4-byte aligned, which int atomics need.)
//
// Tiles, registers, shared memory: as bwd_v2, plus in shared memory two 16-byte records (each
// warpgroup's counter pointer and workspace pointer) and the block's walk (DqWalk: the tile of
// iteration 0 and the few numbers rank needs, 80 bytes), read where used: the loop has no
// registers to spare for them (the walk kept in registers: ptxas spilled 4 bytes at D 128). The
// walk's divisions are done once per block, in 32 bits (a 64-bit division is a called
// subroutine, and the registers it saves spilled too: 20 bytes at D 128). ptxas (CUDA 13.0,
// sm_90a, bf16 and fp16 alike): 255 registers at D 128, 193 at D 64, no spills (before grouped
// heads: 255 and 189).
//
// Grouped K/V heads: as bwd_v2 (its header). Each query head of the group is walked as a head
// was, one after the other, with its own turn counters and ranks: the blocks that add into a
// (query head, query tile) are the key blocks of its K/V head (and part of the split), the same
// n_kt blocks in the same order, so the argument above holds with "head" read as (K/V head,
// part): a block's adds still come in program order, now head by head, and an add waits only for
// adds of the same query head made at the same or an earlier iteration of that head's walk. The
// walk over the group is stepped (GroupPlace, as bwd_v2): the walk's index i of iteration j,
// from which tile and rank are read, is j % n_per without a division.
//
// Head dims 64 and 128, as bwd_v2; masking, ragged shapes, fallback: as bwd_v2 (in a full head
// the ragged last query tile may come in the middle of a block's walk: nothing depends on it
// coming last). A row past seq_q adds nothing but its thread still takes part in the turn.
//
// Prediction: near bwd_v2, 0.85-0.92x at D 128 (full and causal), 0.7-0.85x at D 64. The
// blocks no longer queue behind each other (no wavefront, no skew); what remains is each
// warpgroup's own round trip every iteration (wait for its place, reduce-add until completed,
// release), which bwd_v2 hid under the next iteration. Its size, from the measurements of the
// order "block 0 first" (chapters/07_flash_hopper/README.md): about 0.3-0.5 us, against about
// 3.4 us of work per iteration at D 128 (10.5 MFLOP per 64-query x 128-key iteration at bwd_v2's
// 403 TFLOP/s over 132 SMs). At D 64 an iteration is half the work and the block's two
// warpgroups add into the same tile one after the other: two round trips per iteration. Smaller
// costs: a causal head now launches its shortest blocks first, so the last blocks to start are
// the longest (a few % when there are few waves); a full head whose blocks straddle two waves
// has its first-launched blocks wait at the wrap for the rest (132 mod n_kt = 4 SMs for the
// benchmark's N, part of a wave). With more key blocks than SMs (seq_k > 16896 on 132 SMs) full
// heads are not rotated and keep the skew.
// Measured (H100 80GB HBM3, 2026-11-26, bf16, one run with bwd_v2): 0.80-0.85x bwd_v2 at D 128
// full, 0.74-0.84x causal, 0.50-0.59x at D 64; the first order written (block n adds at turn n)
// had measured 0.79-0.83x, 0.47-0.56x and 0.27-0.52x. Bitwise the same in three runs at D 64 and
// D 128 (BwdDeterminism), and no hang on the shapes that take the other paths
// (LongManyKeyBlocksPerHead).
// Speed: measured in chapters/07_flash_hopper/README.md
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "ch07_dq_order.h"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_v3_deterministic";
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;  // 64: wgmma M, the keys one warpgroup owns
constexpr int kBc = kWarpgroups * kWgRows;  // 128 keys per block
constexpr int kBr = 64;                     // queries per streamed tile: N of S^T and dP^T
constexpr int kDqN = 64;                    // columns of dQ_tile per warpgroup (both head dims)
constexpr int kStageLd = kDqN + 8;          // floats per staging row: + 32 bytes, no conflicts
using Walk = DqWalk<kBr, kBc>;              // the query tiles a key block visits, its ranks

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
  // The adders of one warpgroup (its warps 0 and 1) have all finished their reduce-adds.
  __device__ static int added_bar(int wg) { return 5 + wg; }
  // The turns (see "The order of the adds" in the header). D = 128: one counter per (head, query
  // tile, column half); warpgroup w adds its half at the block's rank (ch07_dq_order.h). D = 64:
  // one counter per (head, query tile); the two warpgroups add into the same columns, warpgroup
  // w at 2 rank + w.
  static constexpr int kCounters = kByColumns ? 2 : 1;  // per (head, query tile)
  __device__ static int counter(int wg) { return kByColumns ? wg : 0; }
  __device__ static int turn(int64_t rank, int wg) {
    return kByColumns ? int(rank) : int(2 * rank + wg);
  }
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
  int64_t n_qt;      // query tiles per (batch, head)
  int* turns;        // int [batch*heads][n_qt][DqSplit::kCounters], zero on entry
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
  bool rotate;  // full: key block n starts at query tile n mod n_qt (all blocks of a head fit)
};

// The turn counters, in global memory, shared by the blocks of one head. wait_turn spins (each
// adder thread for itself) until the counter has reached `mine`: the acquire makes every add that
// the adders before completed before their release visible from here on. pass_turn adds one with
// release semantics: this warpgroup's completed adds are ordered before whoever sees the new
// value.
__device__ __forceinline__ void wait_turn(const int* counter, int mine) {
#if FA_SM90A
  int now;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n"
                 : "=r"(now)
                 : "l"(__cvta_generic_to_global(counter))
                 : "memory");
  } while (now < mine);
#else
  __trap();
#endif
}
__device__ __forceinline__ void pass_turn(int* counter) {
#if FA_SM90A
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(__cvta_generic_to_global(counter))
               : "memory");
#else
  __trap();
#endif
}

// Where warpgroup w adds in turn: its counter of query head 0's tile 0 (head bh's tile i's is
// (bh * n_qt + i) * DqSplit::kCounters further) and its first column of head 0's workspace rows.
struct Turn {
  int* counter;
  float* acc;
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
  static constexpr int kTurnOffset = kBarOffset + (1 + kStages) * 8;  // Turn [kWarpgroups]
  static constexpr int kWalkOffset = kTurnOffset + kWarpgroups * int(sizeof(Turn));  // Walk
  static constexpr int kBytes = kWalkOffset + int(sizeof(Walk)) + kAtomBytes;        // + alignment
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
  Turn* sTurn = reinterpret_cast<Turn*>(smem + Sm::kTurnOffset);
  Walk* sWalk = reinterpret_cast<Walk*>(smem + Sm::kWalkOffset);

  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128, q = t % 4;
  const int64_t unit = int64_t(blockIdx.x) / p.n_tiles;  // (K/V head, part) (GQA: header)
  const int64_t kv_bh = unit / p.split;
  const int part = int(unit % p.split), heads = p.group / p.split;  // this block's query heads
  // This block's key tile: the key tiles of a head are launched from the last to the first (see
  // "Why it cannot deadlock" in the header).
  const int64_t kt = p.n_tiles - 1 - int64_t(blockIdx.x) % p.n_tiles;
  const int64_t k0 = kt * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  // This warpgroup's staging rows: 64 query rows of kStageLd floats.
  float* sSt = reinterpret_cast<float*>(smem + Sm::kStOffset + wg * Sm::kStageBytes);

  // The Q tiles that see this block's keys, in the order the block visits them (ch07_dq_order.h):
  // causal, from the one holding the first query that sees key k0 (every earlier tile is entirely
  // masked, its dS is 0) to the last; full, all of them, from tile kt mod n_qt when rotated (0
  // otherwise), wrapping around. Kept in shared memory and read where used (the loop has no
  // registers to spare for it). Every query head of the group is walked the same way.
  if (tid == 0) *sWalk = Walk(seq_q, seq_k, p.causal, p.rotate, kt);
  __syncthreads();
  const int64_t n_qt = sWalk->n_qt;
  // GQA: the group's query heads one after the other, n_per tiles each (bwd_v1's header).
  const int n_per = int(sWalk->iters);
  const int n_iter = n_per * heads;
  // Iteration j's place (query head, the walk's i-th tile sWalk->tile(i)), stepped with j
  // (GroupPlace); `ahead` is iteration j + kStages's, the tile the loop requests and whose L and D
  // it loads.
  GroupPlace at{int(kv_bh * p.group + part * heads), 0}, ahead = at;

  // Thread 0: Q and dO of the tile at place `pl` into stage s.
  auto request_q = [&](int s, GroupPlace pl) {
    const int row = int(sWalk->tile(pl.i) * kBr);
    hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
    for (int c = 0; c < kStrips; ++c) {
      hopper::tma_load_3d(sQ(s) + c * kBr * 128, &tm_q, &q_full[s], c * kSwizzleCols, row, pl.head);
      hopper::tma_load_3d(sdO(s) + c * kBr * 128, &tm_do, &q_full[s], c * kSwizzleCols, row,
                          pl.head);
    }
  };
  // Warpgroup 0: threads 0..63 carry L2 of the tile's 64 queries, threads 64..127 their D.
  auto load_ld = [&](GroupPlace pl) {
    const int64_t row = sWalk->tile(pl.i) * kBr + tid % kBr, head_row0 = pl.head * seq_q;
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
  if (t == 0) {  // kept in shared memory: the loop has no registers to spare for them
    sTurn[wg].counter = p.turns + Dq::counter(wg);
    sTurn[wg].acc = p.dq_acc + Dq::col0(wg);
  }
  __syncthreads();  // barriers initialised, L and D of the first stages stored, turns known

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
  // Thread t < 64 adds query row t of the tile: sTurn[wg].acc + (bh seq_q + q0 + t) D in the
  // workspace, bh = at.head.
  const uint32_t st_row = mma::smem_addr(sSt + t * kStageLd);
  const bool adder = t < kBr;

  float dk[D / 2], dv[D / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j, at.step(n_per), ahead.step(n_per)) {
    const int s = j % kStages;
    const int64_t q0 = sWalk->tile(at.i) * kBr;
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
    if (adder) hopper::bulk_wait_group_read<0>();  // (as bwd_v2; the adds below wait for more)
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
    // ---- The reduce-adds of this warpgroup, in their turn: each adder waits (its own acquire)
    // for the counter of this query tile (and column half) to reach this warpgroup's turn, adds
    // its row and waits until the add has completed (not only read its smem row); once all 64
    // adders are through, thread 0 passes the turn on. A row past seq_q adds nothing but takes
    // part in the handover all the same.
    if (adder) {
      // Query head bh, query tile i (read again: no register holds it this long).
      const int64_t bh = at.head, i = sWalk->tile(at.i);
      int* counter = sTurn[wg].counter + (bh * n_qt + i) * Dq::kCounters;
      wait_turn(counter, Dq::turn(sWalk->rank(at.i), wg));
      // The reduce-adds are writes of the async proxy (the TMA engine), the turn counter is read and
      // written by the generic proxy: fenced after the acquire, and after the group completes,
      // before the release that announces it.
      hopper::fence_proxy_async_global();
      const int64_t row = i * kBr + t;
      const int cols = min(kDqN, p.d - Dq::col0(wg));  // the real columns of a head dim rounded up
      if (row < seq_q && cols > 0)
        hopper::bulk_reduce_add_f32(sTurn[wg].acc + (bh * seq_q + row) * p.d, st_row, cols * 4);
      hopper::bulk_commit_group();
      hopper::bulk_wait_group<0>();
      hopper::fence_proxy_async_global();
      __syncwarp();  // the spin loops ended at different times: converge before the barrier
      hopper::named_bar_sync(Dq::added_bar(wg), kBr);  // warps 0 and 1 of this warpgroup
      if (t == 0) pass_turn(counter);
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
    // The thread's index read again (thread_index_again): from the kernel's first read, ptxas
    // kept q = t % 4 for these stores across the loop, spilled (4 bytes at D 128).
    const int64_t head = int64_t(part) * p.kv_bh + kv_bh, all = p.split * p.kv_bh;
    const int t_again = thread_index_again() % 128;
    store_acc_rows<float, D>(p.parts + head * seq_k * p.d, dk, row0, seq_k, 1.0f, t_again, p.d,
                             p.d);
    store_acc_rows<float, D>(p.parts + (all + head) * seq_k * p.d, dv, row0, seq_k, 1.0f, t_again,
                             p.d, p.d);
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
  FA_UNSUPPORTED_IF(ceil_div(s.seq_q, int64_t(kBr)) > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 query tiles");  // DqWalk's 32 bits
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
  p.n_qt = ceil_div(s.seq_q, int64_t(kBr));
  p.turns = static_cast<int*>(a.dq);
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
  // The turn counters live in dQ's own buffer until the convert kernel overwrites it: a head
  // needs kCounters ints per 64 query rows, dQ holds 64 * D * 2 bytes >= 8 KiB for them.
  const size_t turn_bytes = size_t(s.bh()) * size_t(p.n_qt) * DqSplit<D>::kCounters * sizeof(int);
  FA_REQUIRE(turn_bytes <= size_t(s.q_numel()) * 2, "the turn counters fit in dQ");
  FA_CUDA_CHECK(cudaMemsetAsync(a.dq, 0, turn_bytes, stream));
  // Rotate (full attention) only when all n_kt blocks of a head can be resident at once: the
  // rotated order makes them wait on each other both ways (see "Why it cannot deadlock").
  int per_sm = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dkdv_dq_kernel<T, D>,
                                                              kThreads, kSmem));
  p.rotate = !s.causal && n_kt <= int64_t(per_sm) * gpu_info().sm_count;
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

void attention_bwd_v3(const AttentionBwdArgs& a, cudaStream_t stream) {
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

FA_REGISTER(
    AttentionBwdKernel,
    {kName,
     attention_bwd_v3,
     "bwd_v2 with the reduce-adds into each query tile in a fixed order, the order in which "
     "the key blocks reach it (full: block n starts at query tile n, wrapping around; a "
     "turn counter per query tile: acquire, add, wait for completion, release): "
     "deterministic",
     {DType::BF16, DType::F16},
     {64, 128},
     90,
     /*deterministic=*/true,
     /*gqa=*/true,
     /*rounds_head_dim=*/true});

}  // namespace fa::ch07
