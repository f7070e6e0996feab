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
//           adds its half at turn n (halves are disjoint: they need no order between them);
//   D =  64 (split by keys, both warpgroups add the same columns): one counter per tile;
//           warpgroup w of key block n adds at turn 2n + w.
// Each of a warpgroup's 64 adder threads waits (ld.acquire.gpu, spinning) until the counter has
// reached its turn, issues its row's reduce-add, and waits until the add has *completed*
// (cp.async.bulk.wait_group 0, not only .read: the next adder must find the sum in place); a
// fence.proxy.async.global orders the TMA engine's writes before the generic-proxy release (and
// the acquire before the next adds); a named barrier of the 64 adders; then thread 0 bumps the
// counter (red.release.gpu.global.add). Every element of the workspace then receives its
// additions in the order of the turns: block 0's (warpgroup 0's, then 1's at D = 64), block 1's,
// ..., whatever the timing. dK, dV (one owner per element) and the rest were deterministic
// already.
//
// Which blocks add into a tile, and why turn n is the right one: block n (keys 128n ..) visits
// the query tiles from qt_begin(n) (causal: the tile of the first query that sees key 128n; 0
// otherwise) to the last, and qt_begin never decreases with n. So the blocks that add into query
// tile qt are exactly the key blocks 0 .. some n_max: when block n reaches qt, the n blocks
// before it all add into qt too (it is >= their qt_begin), and none after it comes before it.
// Blocks that see no query (causal, keys past every query's diagonal) add nothing and are the
// last ones, so nobody waits for them.
//
// Why it cannot deadlock: a block only ever waits for blocks of the same head with a smaller key
// tile index (and at D = 64 its warpgroup 1 for its own warpgroup 0, which never waits for
// warpgroup 1 within an iteration: the only block-wide barrier, __syncthreads at the end of the
// iteration, comes after both adds). blockIdx.x = head * key tiles + key tile, so those blocks
// have smaller blockIdx.x. The GPU hands out blocks in increasing blockIdx.x (the order every
// "wait for the block before me" scheme relies on; FlashAttention-3's deterministic backward
// orders its dQ adds by the same rule): when block b runs, every block before it runs or has
// finished. By induction on blockIdx.x, the lowest block still running waits for no one who has
// not finished, so it finishes; then the next one, and so on. (Nothing else may hold the SMs:
// a block spinning here never yields its SM, so a kernel running beside this one on another
// stream that filled every SM first could only delay it, not be waited for.)
//
// Where the counters live: the workspace is exactly dQ's q_numel() floats, all of it the sum.
// dQ's own output buffer is not used until the convert kernel writes it at the end, and it is
// large enough: a head needs kCounters (1 or 2) ints per 64 query rows, dQ holds 64 x D x 2 >= 8
// KiB per 64 rows. So the launcher zeroes the first bh x n_qt x kCounters ints of dQ
// (cudaMemsetAsync, on the same stream, before the kernel), the kernel counts in them, and the
// convert kernel overwrites them with dQ. (dQ is 4-byte aligned, which int atomics need.)
//
// Tiles, registers, shared memory: as bwd_v2, plus two 24-byte records in shared memory (each
// warpgroup's counter pointer, workspace pointer and turn): the loop has no registers to spare
// for them (kept in registers, ptxas spilled 8 bytes at D 128). ptxas (CUDA 13.0, sm_90a, bf16
// and fp16 alike): 255 registers at D 128, 210 at D 64, no spills.
//
// Head dims 64 and 128, as bwd_v2; masking, ragged shapes, fallback: as bwd_v2. A row past seq_q
// adds nothing but its thread still takes part in the turn.
//
// Prediction: slower than bwd_v2. Each warpgroup now waits, every iteration, for the full round
// trip of its reduce-adds into L2 (a microsecond or so, against about 2 us of tensor work per
// iteration at D 128) instead of letting them run under the next iteration. And the blocks of
// one head line up: block n cannot add into query tile 0 until block n - 1 has, so in a full
// (non-causal) head, where all key blocks start at query tile 0 together, block n starts adding
// about n round trips after block 0 and every later tile keeps that lag; at N 8192 (64 key
// blocks) the last block runs some 64 round trips behind, which its SM spends waiting.
// Expected 0.6-0.8x bwd_v2 at D 128 N 8192, nearer bwd_v2 for causal (the blocks start at
// different query tiles) and at short N. Next step, not done here: start block n at a different
// query tile (a rotation of the visiting order, the turn order rotated with it) so that the
// blocks of a head do not queue on the same tile.
// Speed: measured in chapters/07_flash_hopper/README.md
#include <cuda.h>

#include <algorithm>

#include "ch07_bwd_common.cuh"
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
constexpr int kRowBytes = kDqN * 4;         // one reduce-add: 256 bytes of one query row

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
  // tile, column half); warpgroup w of key block n adds its half at turn n. D = 64: one counter
  // per (head, query tile); the two warpgroups add into the same columns, warpgroup w of key
  // block n at turn 2n + w.
  static constexpr int kCounters = kByColumns ? 2 : 1;  // per (head, query tile)
  __device__ static int counter(int wg) { return kByColumns ? wg : 0; }
  __device__ static int turn(int64_t n, int wg) { return kByColumns ? int(n) : int(2 * n + wg); }
};

struct BwdParams {
  const float* lse;
  const float* delta;
  float* dq_acc;  // the workspace: fp32 [batch*heads][seq_q][D], zero on entry
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, head)
  int64_t n_qt;      // query tiles per (batch, head)
  int* turns;        // int [batch*heads][n_qt][DqSplit::kCounters], zero on entry
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- The two instructions this kernel adds to hopper.cuh's ---------------------------------------
// dQ_tile[64 x 64] (+)= A[64 x 16] B[16 x 64], both from shared memory, A MN-major (imm-trans-a
// = 1: the tile holds A^T = dS^T, a row per k = key, 64 consecutive m = queries) and B MN-major
// (K: a row per k = key, 64 consecutive n = columns). The PTX ISA allows the transposed A only
// for 16-bit types read from shared memory, which both are here. Accumulator layout as
// hopper.cuh's wgmma_ss.
template <class T>
__device__ __forceinline__ void wgmma_ss_n64_at(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                int accumulate) {
#if FA_SM90A
#define FA_WGMMA_N64_AT(TYPE)                                                                      \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                  \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "          \
      "%32, %33, p, 1, 1, 1, 1;\n}\n"                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate))
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    FA_WGMMA_N64_AT("bf16");
  else
    FA_WGMMA_N64_AT("f16");
#undef FA_WGMMA_N64_AT
#else
  __trap();
#endif
}

// dst[0 .. bytes/4) += src[0 .. bytes/4), fp32, element by element, atomically in L2: the TMA
// engine reads `bytes` (a multiple of 16) from shared memory at `src` (16-byte aligned) and
// reduce-adds them into global memory at `dst` (16-byte aligned). Asynchronous, like
// hopper.cuh's tma_store_2d: it joins this thread's bulk group (bulk_commit_group closes it), and
// `src` may be rewritten once bulk_wait_group_read says the group has been read.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
#if FA_SM90A
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   __cvta_generic_to_global(dst)),
               "r"(src), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

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
// The reduce-adds are writes of the async proxy (the TMA engine); the turn counter is read and
// written by the generic proxy. This fence orders the two for global memory, in the issuing
// thread: after the bulk group has completed and before the release that announces it, and
// after the acquire and before the next reduce-adds.
__device__ __forceinline__ void fence_proxy_async_global() {
#if FA_SM90A
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// Where warpgroup w adds in turn: its counter of the first query tile the block visits (the next
// tile's is DqSplit::kCounters further) and its turn at every tile.
struct Turn {
  int* counter;
  float* acc;  // this head's workspace rows, from the warpgroup's first column on
  int turn;
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
  static constexpr int kBytes =
      kTurnOffset + kWarpgroups * int(sizeof(Turn)) + kAtomBytes;  // + alignment
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

  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128, q = t % 4;
  const int64_t bh = int64_t(blockIdx.x) / p.n_tiles;
  const int64_t kt = int64_t(blockIdx.x) % p.n_tiles;  // this block's key tile: its turn
  const int64_t k0 = kt * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;
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
  const int n_iter = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;

  // Thread 0: Q and dO of iteration j (Q tile qt_begin + j) into stage j % kStages.
  auto request_q = [&](int j) {
    const int s = j % kStages;
    const int row = int((qt_begin + j) * kBr);
    hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
    for (int c = 0; c < kStrips; ++c) {
      hopper::tma_load_3d(sQ(s) + c * kBr * 128, &tm_q, &q_full[s], c * kSwizzleCols, row, int(bh));
      hopper::tma_load_3d(sdO(s) + c * kBr * 128, &tm_do, &q_full[s], c * kSwizzleCols, row,
                          int(bh));
    }
  };
  // Warpgroup 0: threads 0..63 carry L2 of the tile's 64 queries, threads 64..127 their D.
  auto load_ld = [&](int j) {
    const int64_t row = (qt_begin + j) * kBr + tid % kBr;
    if (tid < kBr) return load_l2(lse, row, seq_q);
    return row < seq_q ? delta[row] : 0.0f;
  };
  auto store_ld = [&](int j, float x) {
    const int s = j % kStages;
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
        hopper::tma_load_3d(sK + c * kBc * 128, &tm_k, kv_full, c * kSwizzleCols, int(k0), int(bh));
        hopper::tma_load_3d(sV + c * kBc * 128, &tm_v, kv_full, c * kSwizzleCols, int(k0), int(bh));
      }
    }
    for (int j = 0; j < kStages && j < n_iter; ++j) request_q(j);
  }
  if (tid < 2 * kBr)
    for (int j = 0; j < kStages && j < n_iter; ++j) store_ld(j, load_ld(j));
  if (t == 0) {  // kept in shared memory: the loop has no registers to spare for them
    sTurn[wg].counter = p.turns + ((bh * n_qt + qt_begin) * Dq::kCounters + Dq::counter(wg));
    sTurn[wg].turn = Dq::turn(kt, wg);
    sTurn[wg].acc = p.dq_acc + bh * seq_q * D + Dq::col0(wg);
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
  // Thread t < 64 adds query row t of the tile: sTurn[wg].acc + (q0 + t) D in the workspace.
  const uint32_t st_row = mma::smem_addr(sSt + t * kStageLd);
  const bool adder = t < kBr;

  float dk[D / 2], dv[D / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j) {
    const int s = j % kStages;
    const int64_t q0 = (qt_begin + j) * kBr;
    const bool prefetch = j + kStages < n_iter && tid < 2 * kBr;
    const float next_ld = prefetch ? load_ld(j + kStages) : 0.0f;
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
      wgmma_ss_n64_at<T>(dq, desc_mn_major<kBc>(sdS + dq_key0 * 128, kk),
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
      int* counter = sTurn[wg].counter + j * Dq::kCounters;
      wait_turn(counter, sTurn[wg].turn);
      fence_proxy_async_global();
      if (q0 + t < seq_q) bulk_reduce_add_f32(sTurn[wg].acc + (q0 + t) * D, st_row, kRowBytes);
      hopper::bulk_commit_group();
      hopper::bulk_wait_group<0>();
      fence_proxy_async_global();
      __syncwarp();  // the spin loops ended at different times: converge before the barrier
      hopper::named_bar_sync(Dq::added_bar(wg), kBr);  // warps 0 and 1 of this warpgroup
      if (t == 0) pass_turn(counter);
    }

    // ---- Stage s and the dS^T tile are free once both warpgroups are done with them: refill
    // stage s with tile j + 2.
    __syncthreads();
    if (j + kStages < n_iter) {
      if (tid == 0) request_q(j + kStages);
      store_ld(j + kStages, next_ld);  // read again only after next iteration's barrier
    }
  }
  // The last reduce-adds must have read their rows before the block's shared memory goes, and
  // have landed before the kernel counts as done (the convert kernel reads the workspace next).
  if (adder) hopper::bulk_wait_group<0>();

  // Keys no query sees (causal) leave with dK = dV = 0, as they must. Rows k0 + wrow .. of this
  // head's [seq_k x D] dK and dV.
  const int64_t row0 = k0 + wrow;
  store_acc_rows<T, D, D>(static_cast<T*>(p.dk) + bh * seq_k * D, dk, row0, seq_k, p.scale, t);
  store_acc_rows<T, D, D>(static_cast<T*>(p.dv) + bh * seq_k * D, dv, row0, seq_k, 1.0f, t);
}

// ---- dQ = workspace * scale, in the dtype ------------------------------------------------------
// Four floats per thread and step (16-byte loads: the workspace is 16-byte aligned and q_numel a
// multiple of 4, since D is); the dtype's pairs stored as 4-byte words (dq is 4-byte aligned).
template <class T>
__global__ void dq_convert_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n4,
                                  float scale) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(acc)[i];
    uint32_t* out = reinterpret_cast<uint32_t*>(dq + 4 * i);
    out[0] = mma::pack2<T>(v.x * scale, v.y * scale);
    out[1] = mma::pack2<T>(v.z * scale, v.w * scale);
  }
}

// ---- Launcher ------------------------------------------------------------------------------------
template <class T, int D>
void launch(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  FA_UNSUPPORTED_IF(n_kt * s.bh() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 thread blocks");
  BwdParams p{};
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_acc = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.n_tiles = n_kt;
  p.n_qt = ceil_div(s.seq_q, int64_t(kBr));
  p.turns = static_cast<int*>(a.dq);
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;

  // 2. dK, dV and dQ_tile: K/V boxes of kBc rows (kept), Q/dO boxes of 64 rows (streamed); every
  // box is 64 columns wide, one 128-byte swizzled strip.
  const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, D, kBr, a.dtype);
  const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, D, kBr, a.dtype);
  const CUtensorMap tm_k = make_tmap(a.k, s.bh(), s.seq_k, D, kBc, a.dtype);
  const CUtensorMap tm_v = make_tmap(a.v, s.bh(), s.seq_k, D, kBc, a.dtype);
  constexpr int kSmem = Smem<D>::kBytes;
  set_smem_limit_once<dkdv_dq_kernel<T, D>, kSmem>();
  // The turn counters live in dQ's own buffer until the convert kernel overwrites it: a head
  // needs kCounters ints per 64 query rows, dQ holds 64 * D * 2 bytes >= 8 KiB for them.
  const size_t turn_bytes = size_t(s.bh()) * size_t(p.n_qt) * DqSplit<D>::kCounters * sizeof(int);
  FA_REQUIRE(turn_bytes <= size_t(s.q_numel()) * 2, "the turn counters fit in dQ");
  FA_CUDA_CHECK(cudaMemsetAsync(a.dq, 0, turn_bytes, stream));
  dkdv_dq_kernel<T, D>
      <<<unsigned(n_kt * s.bh()), kThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, p);
  FA_CHECK_LAUNCH();

  // 3. dQ from the workspace: memory-bound, a few waves of 256-thread blocks.
  const int64_t n4 = s.q_numel() / 4;
  const int64_t blocks =
      std::min<int64_t>(ceil_div(n4, int64_t(256)), int64_t(gpu_info().sm_count) * 8);
  dq_convert_kernel<T>
      <<<unsigned(blocks), 256, 0, stream>>>(a.workspace, static_cast<T*>(a.dq), n4, p.scale);
  FA_CHECK_LAUNCH();
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

void attention_bwd_v3(const AttentionBwdArgs& a, cudaStream_t stream) {
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
  if (s.bh() == 0) return;  // nothing to write
  FA_REQUIRE(a.workspace != nullptr, std::string(kName) + " needs the fp32 workspace (dQ's sum)");
  // The bulk reduce-adds need 16-byte aligned rows of the workspace (D * 4 bytes per row keeps
  // them so once the base is).
  if (!tma_can_load(a) || !aligned(a.workspace, 16)) return run_fallback(a, stream);
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
             attention_bwd_v3,
             "bwd_v2 with the reduce-adds into each query tile in a fixed order of key blocks (a "
             "turn counter per query tile: acquire, add, wait for completion, release): "
             "deterministic",
             {DType::BF16, DType::F16},
             {64, 128},
             90,
             true});

}  // namespace fa::ch07
