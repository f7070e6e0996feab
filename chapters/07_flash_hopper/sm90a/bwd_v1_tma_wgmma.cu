// 07/bwd_v1_tma_wgmma: the FlashAttention backward on Hopper (sm_90a: H100, H200), deterministic.
// The algorithm is chapter 06's (06/v2_mma: D preprocess, a dK/dV kernel over key tiles, a
// separate dQ kernel over query tiles, no atomics); what changed is how the tensor cores are fed,
// as the forward's 07/v1 did for chapter 05: TMA brings 128-byte-swizzled tiles into shared memory and
// wgmma multiplies 64 x N x 16 per warpgroup, B (and for two products A) read from shared memory.
//
// The three launches (one stream):
//   1. D = rowsum(dO o O): chapter 06's preprocess (delta_preprocess.cuh, compiled here too).
//   2. dkdv_kernel: one block per (tile of Bc = 128 keys, batch*head); two warpgroups, 64 keys
//      each (D = 256: Bc = 64, see below). K and V stay in shared memory; the Q tiles that see
//      them (causal: from the first one, tiles above the diagonal are skipped) stream through a
//      2-stage ring with dO, L, D:
//        S^T  = K Q^T          wgmma_ss, A = K (smem, K-major), B = Q (smem, K-major)
//        P^T  = exp2(S^T scale log2 e - L log2 e)        registers, L per column (query)
//        dP^T = V dO^T         wgmma_ss, A = V, B = dO, both K-major
//        dV  += P^T dO         wgmma_rs, A = P^T (registers), B = dO (smem, MN-major)
//        dS^T = P^T o (dP^T - D)                          registers, D per column
//        dK  += dS^T Q         wgmma_rs, A = dS^T (registers), B = Q (smem, MN-major)
//      then dK * scale and dV are stored.
//   3. dq_kernel: one block per (tile of Br = 128 queries, batch*head); two warpgroups, 64 rows
//      each (D = 256: Br = 64, see below). Q and dO stay; the visible K/V tiles (kv_tiles.h)
//      stream through a 2-stage ring:
//        S = Q K^T, dP = dO V^T (wgmma_ss, all K-major), P and dS = P o (dP - D) in registers,
//        dQ += dS K (wgmma_rs, B = K MN-major), then dQ * scale is stored.
//      Every dQ element is summed by one thread in a fixed order: bitwise deterministic. The
//      price is S and dP computed twice (in both kernels), as in 06/v2.
//
// Why S^T = K Q^T and not S = Q K^T in the dK/dV kernel: dV += P^T dO needs P^T as the A operand,
// and a register A fragment must be laid out as the accumulator of a product whose rows are the
// keys. Computing S^T directly (K as the A operand from shared memory, which wgmma allows for a
// K-major tile) puts P^T in exactly that layout, so it goes from the accumulator to the A
// fragments of dV += P^T dO with pack_p (hopper_attention.cuh: same rows, same columns, same
// owner), and dS^T likewise into dK += dS^T Q. The alternative, S = Q K^T and P written transposed
// to shared memory, costs a store, a fence.proxy.async and a barrier per tile. (FA2 and FA3 also
// compute S^T here.) The price: L and D belong to the columns, so each thread reads the 16
// (of 64) columns it holds from shared memory, in float2 pairs.
//
// Tiles and registers (per thread; a warpgroup holds a 64 x N fp32 accumulator in N / 2):
//   dkdv, D = 128: dK 64 + dV 64 + S^T 32 + dP^T 32 + P^T and dS^T fragments 16 + 16 = 224 at
//                  most (S^T is dead once dS^T is formed); D = 64: 32 + 32 + 32 + 32 + 32 = 160;
//                  D = 256 (column halves, below): the same 224 as D = 128.
//   dq,   D = 128: dQ 64 + S 32 + dP 32 + dS fragments 16 = 144; D = 64: 112; D = 256: 144.
//   256 threads per block (two warpgroups, no producer warpgroup): up to 255 registers each.
//   ptxas (CUDA 13.0, sm_90a, fp16 = bf16): dkdv 206 (D 64) / 254 (D 128) / 254 (D 256),
//   dq 136 / 182 / 155 registers, no spills (dkdv without grouped heads, before their loop and
//   split: 191 / 255 / 244; one block per SM either way, so the count costs nothing).
//
// D = 256: the accumulator columns are split. Whole, dK and dV of 64 keys would be 2 x 128 =
//   256 registers per thread, more than a thread has (and wgmma's M = 64 allows no fewer keys
//   per warpgroup). So at D > 128 (Split<D>) a block holds 64 rows (keys in dkdv, queries in dq)
//   instead of 128, and its two warpgroups take the same 64 rows and different columns:
//   warpgroup w accumulates dV[:, 128w ..] += P^T dO[:, 128w ..] and dK[:, 128w ..] +=
//   dS^T Q[:, 128w ..] (dq: dQ[:, 128w ..] += dS K[:, 128w ..]), a wgmma of N = 128 whose
//   MN-major B starts at strip 2w of the full-width tile (desc_mn_major's col0), and stores
//   columns 128w .. 128w + 127. S^T and dP^T (S, dP) still contract over all 256 columns, so
//   K, V, Q and dO are loaded full-width (four 64-column boxes each, as at D = 128 two) and each
//   warpgroup computes the same S^T and dP^T. The accumulators are then exactly D = 128's.
//   The price is that S^T and dP^T are computed twice. In units of one Nq x Nk x D product:
//   dkdv does S^T, dP^T, dV, dK = 4 units at D <= 128 and 2 + 2 + 1 + 1 = 6 at D = 256 (dV and
//   dK are two halves of one unit each); dq does S, dP, dQ = 3 and 2 + 2 + 1 = 5. The backward
//   then issues 11 units of tensor work for the 5 that the 2.5x-forward FLOP convention counts
//   (7 at D <= 128): at the same tensor-core efficiency, 7/11 = 0.64x the counted rate of
//   D = 128. Measured (H100, 2026-11-23, N = 8192 full): 292.2 against 411.8 TFLOP/s, 0.71x,
//   a little above that estimate. Why 64-row blocks and not two blocks of 128 keys each owning
//   a half: K and V of 128 keys x 256 columns (128 KiB) plus two Q/dO stages (128 KiB) exceed
//   the 227 KiB a block may have; one stage would fit, but then every tile's load waits for the
//   previous tile's math.
//   With 64 rows the grid has the same number of blocks (twice as many tiles, on gridDim.x as
//   before), each K/V (Q/dO) tile is read once rather than by two blocks, and both rings keep
//   two stages. The idea holds for any D > 128 (parts of at most 128 columns keep the
//   accumulators at D = 128's); as written, Split makes one 128-column part per warpgroup, which
//   is D = 256 exactly, and static_asserts it. (06/v2_mma, the fallback, takes D = 256 too.)
//
// Pipelines: one thread (thread 0) issues every TMA copy, as 07/v1. K/V (dkdv) or Q/dO (dq) are
// loaded once with one mbarrier; the streamed tiles use a 2-stage ring, one mbarrier per stage
// completed by the TMA bytes, parity (use / 2) & 1. After the block's __syncthreads at the end
// of iteration j, stage j % 2 is free (every wgmma reading it was waited for) and thread 0
// refills it with tile j + 2, so the copy of tile j + 1 overlaps the math of tile j. In dkdv, L
// and D of tile j + 2 are read from global memory into registers at the start of iteration j
// by warpgroup 0 and stored into the freed stage after that barrier (plain loads: a TMA box of
// L needs a 16-byte row stride, which seq_q * 4 bytes is not in general).
// Within an iteration each warpgroup commits S (S^T), then dP (dP^T) as two wgmma groups,
// waits for the first (wait_group 1) to form P while dP runs, commits dV (dkdv only), waits for
// dP (wait_group 1 again: groups complete in order), forms dS, commits dK (dQ), waits for all.
//
// Shared memory (16-bit tiles, + 1 KiB for the 1024-byte alignment of the swizzle atoms):
//   dkdv: K, V Bc x D + 2 stages x (Q, dO 64 x D + L, D 64 floats)
//         D 64: 65 KiB, D 128: 130 KiB, D 256 (Bc = 64): 32 + 32 + 2 x (32 + 32 + 0.5) = 194 KiB
//   dq:   Q, dO Br x D + 2 stages x (K, V 64 x D)
//         D 64: 65 KiB, D 128: 129 KiB, D 256 (Br = 64): 32 + 32 + 2 x (32 + 32) = 193 KiB
//   (227 KiB is the most a block may opt in to; DkdvSmem and DqSmem static_assert it.)
//
// Masking and ragged shapes: TMA zero-fills rows past seq_q and seq_k. Query rows past seq_q or
// with L = -inf have L2 = +inf, so P = 0 (load_l2). Keys past seq_k and past a row's last
// visible key (bottom-right causal) get P = 0, element by element, only on the tiles that need it
// (dkdv: the tile ends past seq_k or crosses the diagonal; dq: tiles from kv_tiles().unmasked on).
// Stores are predicated on the row. Causal: dkdv starts at the Q tile holding the first query
// that sees key k0 (causal_first_query); a block whose keys no query sees stores dK = dV = 0.
// dq visits only the K/V tiles its rows see (kv_tiles); rows seeing no key store dQ = 0.
// Offsets are 64-bit; batch*heads * tiles is on gridDim.x.
// Head dims between the instances (a multiple of 8 below 64, 128 or 256) run the next one, as the
// forward does (head_dim_instance, hopper_attention.cuh): TMA zero-fills Q, K, V and dO past the
// real head dim d, so the padded columns of dQ, dK and dV come out zero, and store_acc_rows (rows
// of d elements) does not store them.
//
// Grouped K/V heads (GQA, MQA; shapes.h): query head bh = b * heads + h reads K/V head
// kv_index(bh) = b * heads_kv + h / group, which is bh / group (heads = heads_kv * group), and dK,
// dV of a K/V head sum over the group's query heads. No K/V copies and no atomics:
//   * dkdv_kernel runs one block per (key tile, K/V head), and its loop runs over the group's
//     query heads one after the other, each over the Q tiles that see the block's keys: iteration
//     j is query head kv * group + j / n_per, Q tile qt_begin + j % n_per (n_per tiles per head,
//     the same for every head of the group). dK and dV stay in the block's registers across the
//     whole group, so each element is summed by one thread in a fixed order: still bitwise
//     deterministic, and stored once. The ring, its stages and its barriers are as before;
//     only the head coordinate of the Q and dO loads and the rows of L and D change with j.
//   * dq_kernel reads K and V at head bh / group (tensor maps over batch * heads_kv heads).
//   * the preprocess is per query head, as before.
//   A group of 1 is the plain multi-head loop (j / n_per = 0).
//   * What grouping costs: the dK/dV grid shrinks by the group (batch * heads_kv * key tiles
//     blocks) while each block does group times the work. In waves of the GPU that is the same
//     time as long as the grid fills the SMs (B 2, H_kv 4, N 4096: 256 blocks of 8 heads' work, 2
//     waves on 132 SMs, against MHA's 2048 blocks in 16 waves); below one wave it is not (MQA at
//     B 2, N 4096: 64 blocks of 32 heads' work, half the SMs idle). There the group is split:
//     `split` blocks per (key tile, K/V head), each over group / split of its query heads, store
//     their fp32 sums into the workspace, and a second kernel (sum_parts_kernel) adds the parts
//     in their fixed order and rounds once: still deterministic. split is the divisor of the
//     group with the least estimated time (group_split), and the parts must fit the q_numel()
//     floats of the workspace. Causal shapes need the estimate even when the grid fills the
//     GPU: key tile k sees the query tiles from about k on, so the first tiles' blocks carry
//     the most work, and with a whole group's heads in each (MQA: 32) a few blocks set the time
//     while the other SMs idle (B 2, H_kv 1, N 8192 causal, per query head against MHA on an
//     H200, 2026-12-02: 1.50x before the estimate counted it, notes/measured/h200-2026-12-02/
//     gqa_ratios.log; 1.00x with it, gqa_ratios_alone.log).
//   sum_parts_kernel, group_split and its estimate, and grouped_fallback live in
//   hopper_attention_bwd.cuh: the later rungs group their heads the same way.
//
// Fallback: shapes TMA cannot load (unaligned pointers, seq_q or seq_k = 0, sizes near 2^31) run
// 06/v2_mma through the registry, which takes every head dim of this kernel.
//
// Not yet here (next rungs): a producer warpgroup with setmaxnreg (the block-wide barrier per
// tile goes), more stages, dQ accumulated in the dK/dV kernel through an fp32 workspace (with
// atomics, not deterministic; or with a second pass that is), skipping per warpgroup the causal
// tiles its 64 rows never see; at D = 256, one warpgroup computing S^T and the other dP^T and
// exchanging them through shared memory (2 x 16 KiB of fp32 more, which still fits: 227 KiB),
// which takes dkdv from 6 units back to 4 and dq from 5 to 3 at the price of a barrier per tile.
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 411.8 TFLOP/s (2.5x forward FLOPs),
// FlashAttention-2 294.2 (notes/measured/h100-2026-11-23c/sdpa_flush.log).
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;  // 64: wgmma M, the rows one warpgroup owns

// How a block's two warpgroups share its work at head dim D (see "D = 256" in the header).
//   D <= 128: each warpgroup owns 64 rows of the block's 128 (keys in dkdv, queries in dq) and
//             all D columns of their gradient.
//   D  > 128: the block holds 64 rows; both warpgroups compute the same S^T and dP^T (S and dP)
//             over all D columns, and warpgroup w accumulates columns 128 w .. 128 w + 127 of
//             the gradient. The accumulators are then those of D = 128.
template <int D>
struct Split {
  static constexpr int kAccCols = D <= 128 ? D : 128;  // N of dV, dK, dQ per warpgroup
  static constexpr int kParts = D / kAccCols;          // column parts: 1, or 2 at D = 256
  static constexpr int kRows = kParts == 1 ? kWarpgroups * kWgRows : kWgRows;  // rows per block
  static_assert(kParts == 1 || kParts == kWarpgroups, "one column part per warpgroup");
  static_assert(kParts * kAccCols == D && kAccCols % kSwizzleCols == 0,
                "parts tile D and start on a 64-column strip");
  // Warpgroup wg's first row within the block's tile, and its first gradient column.
  __device__ static int row_off(int wg) { return kParts == 1 ? wg * kWgRows : 0; }
  __device__ static int col0(int wg) { return kParts == 1 ? 0 : wg * kAccCols; }
};

struct BwdParams {
  const float* lse;
  const float* delta;
  void* dq;
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int d;             // the real head dim, the rows' length in global memory (D rounds it up)
  int64_t n_tiles;   // tiles per (batch, head): of keys (dkdv) or of queries (dq)
  int group;         // query heads per K/V head (1: no grouping)
  int split;         // dkdv: blocks per (key tile, K/V head), each over group / split heads
  int64_t kv_bh;     // batch * heads_kv
  float* parts;      // split > 1: fp32 dK parts [split][kv_bh][seq_k][D], then dV's likewise
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- dK, dV --------------------------------------------------------------------------------------
template <int D>
constexpr int kKvBc = Split<D>::kRows;  // keys per block: 128, or 64 at D = 256
constexpr int kKvBr = 64;               // queries per streamed tile: N of S^T and dP^T

template <int D>
struct DkdvSmem {
  static constexpr int kKVBytes = kKvBc<D> * D * 2;  // K or V
  static constexpr int kQBytes = kKvBr * D * 2;      // Q or dO, one stage
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                    // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;   // stage s at + s * kQBytes
  static constexpr int kLOffset = kdOOffset + kStages * kQBytes;   // float [kStages][kKvBr]
  static constexpr int kDOffset = kLOffset + kStages * kKvBr * 4;  // float [kStages][kKvBr]
  static constexpr int kBarOffset = kDOffset + kStages * kKvBr * 4;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                const BwdParams p) {
  using Sm = DkdvSmem<D>;
  using Sp = Split<D>;
  constexpr int kBc = kKvBc<D>;
  constexpr int kStrips = D / kSwizzleCols;
  constexpr int kSAcc = kKvBr / 2;  // S^T (and dP^T) accumulators per thread
  constexpr int kN = Sp::kAccCols;  // columns of dK and dV this warpgroup accumulates
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sK = smem + Sm::kKOffset;
  unsigned char* sV = smem + Sm::kVOffset;
  auto sQ = [&](int s) { return smem + Sm::kQOffset + s * Sm::kQBytes; };
  auto sdO = [&](int s) { return smem + Sm::kdOOffset + s * Sm::kQBytes; };
  float* sL = reinterpret_cast<float*>(smem + Sm::kLOffset);  // stage s at + s * kKvBr
  float* sD = reinterpret_cast<float*>(smem + Sm::kDOffset);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* q_full = kv_full + 1;  // one per stage: Q and dO bytes of the tile have landed

  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128, q = t % 4;
  const int64_t unit = int64_t(blockIdx.x) / p.n_tiles;  // (K/V head, part) (GQA: header)
  const int64_t kv_bh = unit / p.split;
  const int part = int(unit % p.split), heads = p.group / p.split;  // this block's query heads
  const int64_t k0 = (int64_t(blockIdx.x) % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  // The Q tiles that see this block's keys: causal, from the one holding the first query that
  // sees key k0 (every earlier tile is entirely masked). Possibly none.
  const int64_t n_qt = ceil_div(seq_q, kKvBr);
  int64_t qt_begin = 0;
  if (p.causal) {
    const int64_t first = causal_first_query(k0, seq_q, seq_k);
    if (first > 0) qt_begin = first / kKvBr;
  }
  // GQA: the group's query heads one after the other, n_per tiles each (header).
  const int n_per = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;
  const int n_iter = n_per * heads;
  // Iteration j: its query head (b * heads + h) and its first query row.
  auto head_of = [&](int j) { return kv_bh * p.group + part * heads + j / n_per; };
  auto row_of = [&](int j) { return (qt_begin + j % n_per) * kKvBr; };

  // Thread 0: Q and dO of iteration j into stage j % kStages.
  auto request_q = [&](int j) {
    const int s = j % kStages;
    const int row = int(row_of(j)), bh = int(head_of(j));
    hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
    for (int c = 0; c < kStrips; ++c) {
      hopper::tma_load_3d(sQ(s) + c * kKvBr * 128, &tm_q, &q_full[s], c * kSwizzleCols, row, bh);
      hopper::tma_load_3d(sdO(s) + c * kKvBr * 128, &tm_do, &q_full[s], c * kSwizzleCols, row, bh);
    }
  };
  // Warpgroup 0: threads 0..63 carry L2 of the tile's 64 queries, threads 64..127 their D.
  auto load_ld = [&](int j) {
    const int64_t row = row_of(j) + tid % kKvBr, head_row0 = head_of(j) * seq_q;
    if (tid < kKvBr) return load_l2(p.lse + head_row0, row, seq_q);
    return row < seq_q ? p.delta[head_row0 + row] : 0.0f;
  };
  auto store_ld = [&](int j, float x) {
    const int s = j % kStages;
    if (tid < kKvBr)
      sL[s * kKvBr + tid] = x;
    else if (tid < 2 * kKvBr)
      sD[s * kKvBr + tid - kKvBr] = x;
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
    for (int j = 0; j < kStages && j < n_iter; ++j) request_q(j);
  }
  if (tid < 2 * kKvBr)
    for (int j = 0; j < kStages && j < n_iter; ++j) store_ld(j, load_ld(j));
  __syncthreads();  // barriers initialised, L and D of the first stages stored

  // This warpgroup's 64 keys (rows of K and V in each strip), this thread's two keys, and the
  // first of the kN columns of dK and dV it accumulates (0 unless D > 128).
  const int wrow = Sp::row_off(wg), col0 = Sp::col0(wg);
  const unsigned char* sKw = sK + wrow * 128;
  const unsigned char* sVw = sV + wrow * 128;
  const int64_t key0 = k0 + wrow + 16 * (t / 32) + (t % 32) / 4;  // and key0 + 8
  const int64_t off = causal_last_key(0, seq_q, seq_k);           // query i sees keys j <= i + off

  float dk[kN / 2], dv[kN / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j) {
    const int s = j % kStages;
    const int64_t q0 = row_of(j);
    const bool prefetch = j + kStages < n_iter && tid < 2 * kKvBr;
    const float next_ld = prefetch ? load_ld(j + kStages) : 0.0f;
    const bool need_mask = k0 + kBc > seq_k || (p.causal && k0 + kBc - 1 > q0 + off);
    hopper::mbar_wait(&q_full[s], (j / kStages) & 1);

    // ---- S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries each, contracting over all D
    // columns (at D = 256 both warpgroups compute the same two tiles), two commit groups.
    float st[kSAcc], dpt[kSAcc];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kKvBr, T, 0>(st, desc_k_major<kBc>(sKw, kk), desc_k_major<kKvBr>(sQ(s), kk),
                                    kk > 0);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kKvBr, T, 0>(dpt, desc_k_major<kBc>(sVw, kk),
                                    desc_k_major<kKvBr>(sdO(s), kk), kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // S^T has landed; dP^T may still run
    hopper::fence_registers(st);

    // ---- P^T = exp2(S^T scale log2 e - L2): element i is key key0 + 8 ((i / 2) % 2), query
    // q0 + 8 (i / 4) + 2q + i % 2 (the accumulator layout, hopper.cuh).
    const float* l2 = sL + s * kKvBr;
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

    // ---- dV[:, col0 ..] += P^T dO[:, col0 ..]: k = the 64 queries, P^T from registers, dO
    // MN-major from its strip col0 / 64 on.
    uint32_t pf[kKvBr / 16][4];
    pack_p<T>(st, pf);
    hopper::fence_registers(dv);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKvBr / 16; ++kk)
      hopper::wgmma_rs<kN, T, 1>(dv, pf[kk], desc_mn_major<kKvBr>(sdO(s), kk, col0), 1);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // dP^T (committed before dV) has landed; dV may still run
    hopper::fence_registers(dpt);

    // ---- dS^T = P^T o (dP^T - D), D per query (column).
    const float* dd = sD + s * kKvBr;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (i / 4) + 2 * q);
      dpt[i] = st[i] * (dpt[i] - d2.x);
      dpt[i + 1] = st[i + 1] * (dpt[i + 1] - d2.y);
    }

    // ---- dK[:, col0 ..] += dS^T Q[:, col0 ..]: k = the 64 queries, dS^T from registers, Q
    // MN-major from its strip col0 / 64 on.
    uint32_t dsf[kKvBr / 16][4];
    pack_p<T>(dpt, dsf);
    hopper::fence_registers(dk);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKvBr / 16; ++kk)
      hopper::wgmma_rs<kN, T, 1>(dk, dsf[kk], desc_mn_major<kKvBr>(sQ(s), kk, col0), 1);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dk);
    hopper::fence_registers(dv);
#pragma unroll
    for (int kk = 0; kk < kKvBr / 16; ++kk) {
      hopper::fence_registers(pf[kk]);
      hopper::fence_registers(dsf[kk]);
    }

    // ---- Stage s is free once both warpgroups are done with it: refill it with tile j + 2.
    __syncthreads();
    if (j + kStages < n_iter) {
      if (tid == 0) request_q(j + kStages);
      store_ld(j + kStages, next_ld);  // read again only after next iteration's barrier
    }
  }

  // Keys no query sees (causal) leave with dK = dV = 0, as they must. Rows k0 + wrow .., columns
  // col0 .. col0 + kN - 1 of this K/V head's [seq_k x D] dK and dV, summed over its group.
  const int64_t row0 = k0 + wrow;
  if (p.split > 1) {  // this part's fp32 sums; sum_parts_kernel adds the parts (header, GQA)
    const int64_t head = int64_t(part) * p.kv_bh + kv_bh, all = p.split * p.kv_bh;
    store_acc_rows<float, kN>(p.parts + head * seq_k * p.d + col0, dk, row0, seq_k, 1.0f, t, p.d,
                              p.d - col0);
    store_acc_rows<float, kN>(p.parts + (all + head) * seq_k * p.d + col0, dv, row0, seq_k, 1.0f, t,
                              p.d, p.d - col0);
    return;
  }
  store_acc_rows<T, kN>(static_cast<T*>(p.dk) + kv_bh * seq_k * p.d + col0, dk, row0, seq_k,
                        p.scale, t, p.d, p.d - col0);
  store_acc_rows<T, kN>(static_cast<T*>(p.dv) + kv_bh * seq_k * p.d + col0, dv, row0, seq_k, 1.0f,
                        t, p.d, p.d - col0);
}

// ---- dQ ------------------------------------------------------------------------------------------
template <int D>
constexpr int kQBr = Split<D>::kRows;  // queries per block: 128, or 64 at D = 256
constexpr int kQBc = 64;               // keys per streamed K/V tile: N of S and dP

template <int D>
struct DqSmem {
  static constexpr int kQBytes = kQBr<D> * D * 2;  // Q or dO
  static constexpr int kKVBytes = kQBc * D * 2;    // K or V, one stage
  static constexpr int kQOffset = 0;
  static constexpr int kdOOffset = kQBytes;
  static constexpr int kKOffset = 2 * kQBytes;                    // stage s at + s * kKVBytes
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;  // stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dq_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
              const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
              const BwdParams p) {
  using Sm = DqSmem<D>;
  using Sp = Split<D>;
  constexpr int kBr = kQBr<D>;
  constexpr int kStrips = D / kSwizzleCols;
  constexpr int kSAcc = kQBc / 2;   // S (and dP) accumulators per thread
  constexpr int kN = Sp::kAccCols;  // columns of dQ this warpgroup accumulates
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem + Sm::kQOffset;
  unsigned char* sdO = smem + Sm::kdOOffset;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKVBytes; };
  auto sV = [&](int s) { return smem + Sm::kVOffset + s * Sm::kKVBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* kv_full = q_full + 1;  // one per stage: K and V bytes of the tile have landed

  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128, q = t % 4;
  const int64_t bh = int64_t(blockIdx.x) / p.n_tiles;
  const int kv_bh = int(bh / p.group);  // the K/V head it reads (GQA: header)
  // Heaviest tiles first under causal masking (the last query tiles see the most keys).
  const int64_t q0 = (p.n_tiles - 1 - int64_t(blockIdx.x) % p.n_tiles) * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const KvTiles range = kv_tiles(q0, kBr, seq_q, seq_k, kQBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  // Thread 0: K and V tile j into stage j % kStages.
  auto request_kv = [&](int j) {
    const int s = j % kStages;
    hopper::mbar_arrive_expect_tx(&kv_full[s], 2 * Sm::kKVBytes);
    for (int c = 0; c < kStrips; ++c) {  // all D columns: S and dP contract over them
      hopper::tma_load_3d(sK(s) + c * kQBc * 128, &tm_k, &kv_full[s], c * kSwizzleCols, j * kQBc,
                          kv_bh);
      hopper::tma_load_3d(sV(s) + c * kQBc * 128, &tm_v, &kv_full[s], c * kSwizzleCols, j * kQBc,
                          kv_bh);
    }
  };

  if (tid == 0) {
    hopper::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&kv_full[s], 1);
    hopper::mbar_fence_init();
    if (n_tiles > 0) {
      hopper::mbar_arrive_expect_tx(q_full, 2 * Sm::kQBytes);
      for (int c = 0; c < kStrips; ++c) {
        hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0), int(bh));
        hopper::tma_load_3d(sdO + c * kBr * 128, &tm_do, q_full, c * kSwizzleCols, int(q0),
                            int(bh));
      }
    }
    for (int j = 0; j < kStages && j < n_tiles; ++j) request_kv(j);
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  // This warpgroup's 64 query rows; this thread's two rows, their L2, D and last visible key; the
  // first of the kN columns of dQ it accumulates (0 unless D > 128).
  const int wrow = Sp::row_off(wg), col0 = Sp::col0(wg);
  const unsigned char* sQw = sQ + wrow * 128;
  const unsigned char* sdOw = sdO + wrow * 128;
  const int64_t row0 = q0 + wrow + 16 * (t / 32) + (t % 32) / 4;
  float l2[2], dd[2];
  int64_t last_key[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 8 * h;
    l2[h] = load_l2(p.lse + bh * seq_q, row, seq_q);
    dd[h] = row < seq_q ? p.delta[bh * seq_q + row] : 0.0f;
    last_key[h] = last_visible_key(row, seq_q, seq_k, p.causal);
  }

  float dq[kN / 2];
  zero(dq);

  if (n_tiles > 0) hopper::mbar_wait(q_full, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % kStages;
    hopper::mbar_wait(&kv_full[s], (j / kStages) & 1);

    // ---- S = Q K^T and dP = dO V^T: 64 rows x 64 keys each, contracting over all D columns (at
    // D = 256 both warpgroups compute the same two tiles), two commit groups.
    float sc[kSAcc], dp[kSAcc];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kQBc, T, 0>(sc, desc_k_major<kBr>(sQw, kk), desc_k_major<kQBc>(sK(s), kk),
                                   kk > 0);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kQBc, T, 0>(dp, desc_k_major<kBr>(sdOw, kk), desc_k_major<kQBc>(sV(s), kk),
                                   kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // S has landed; dP may still run
    hopper::fence_registers(sc);

    // ---- P = exp2(S scale log2 e - L2); element i is row h = (i / 2) % 2, key
    // j Bc + 8 (i / 4) + 2q + i % 2. Keys past a row's last visible key (or seq_k) get 0.
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) sc[i] = ex2_approx(fmaf(sc[i], p.scale_log2, -l2[(i / 2) % 2]));
    if (j >= n_unmasked) {
      const int64_t kt0 = int64_t(j) * kQBc;
#pragma unroll
      for (int i = 0; i < kSAcc; ++i)
        if (kt0 + 8 * (i / 4) + 2 * q + (i % 2) > last_key[(i / 2) % 2]) sc[i] = 0.0f;
    }
    hopper::wgmma_wait<0>();  // dP has landed
    hopper::fence_registers(dp);

    // ---- dS = P o (dP - D), D per row.
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) dp[i] = sc[i] * (dp[i] - dd[(i / 2) % 2]);

    // ---- dQ[:, col0 ..] += dS K[:, col0 ..]: k = the 64 keys, dS from registers, K MN-major
    // from its strip col0 / 64 on.
    uint32_t dsf[kQBc / 16][4];
    pack_p<T>(dp, dsf);
    hopper::fence_registers(dq);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQBc / 16; ++kk)
      hopper::wgmma_rs<kN, T, 1>(dq, dsf[kk], desc_mn_major<kQBc>(sK(s), kk, col0), 1);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dq);
#pragma unroll
    for (int kk = 0; kk < kQBc / 16; ++kk) hopper::fence_registers(dsf[kk]);

    // ---- Stage s is free once both warpgroups are done with it: refill it with tile j + 2.
    __syncthreads();
    if (tid == 0 && j + kStages < n_tiles) request_kv(j + kStages);
  }

  // Rows q0 + wrow .., columns col0 .. col0 + kN - 1 of this head's [seq_q x D] dQ.
  store_acc_rows<T, kN>(static_cast<T*>(p.dq) + bh * seq_q * p.d + col0, dq, q0 + wrow, seq_q,
                        p.scale, t, p.d, p.d - col0);
}

// ---- Launcher ------------------------------------------------------------------------------------
template <class T, int D>
void launch(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t n_kt = ceil_div(s.seq_k, kKvBc<D>), n_qt = ceil_div(s.seq_q, kQBr<D>);
  const int64_t kv_bh = s.batch * s.kv_heads();  // K, V, dK, dV: batch * heads_kv heads (GQA)
  FA_UNSUPPORTED_IF(n_kt * kv_bh > INT_MAX || n_qt * s.bh() > INT_MAX,
                    "07/bwd_v1_tma_wgmma: more than 2^31-1 thread blocks");
  // dkdv's iterations, the group's query heads x the Q tiles, count in an int.
  FA_UNSUPPORTED_IF(ceil_div(s.seq_q, kKvBr) * s.group() > INT_MAX,
                    "07/bwd_v1_tma_wgmma: more than 2^31-1 query tiles per K/V head");
  BwdParams p{};
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.d = int(s.head_dim);
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  p.group = int(s.group());
  p.kv_bh = kv_bh;
  p.split = dkdv_split<dkdv_kernel<T, D>, DkdvSmem<D>::kBytes>(s, kThreads, kKvBc<D>, kKvBr);
  p.parts = a.workspace;  // not otherwise used by this kernel

  // 2. dK, dV: K/V boxes of kKvBc rows (kept), Q/dO boxes of 64 rows (streamed); every box is
  // 64 columns wide, one 128-byte swizzled strip.
  {
    const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, p.d, kKvBr, a.dtype);
    const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, p.d, kKvBr, a.dtype);
    const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, p.d, kKvBc<D>, a.dtype);
    const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, p.d, kKvBc<D>, a.dtype);
    constexpr int kSmem = DkdvSmem<D>::kBytes;
    set_smem_limit_once<dkdv_kernel<T, D>, kSmem>();
    p.n_tiles = n_kt;
    dkdv_kernel<T, D>
        <<<unsigned(n_kt * kv_bh * p.split), kThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, p);
    FA_CHECK_LAUNCH();
    if (p.split > 1) sum_parts<T>(p.parts, a, p.split, p.scale, stream);
  }
  // 3. dQ: Q/dO boxes of kQBr rows (kept), K/V boxes of 64 rows (streamed).
  {
    const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, p.d, kQBr<D>, a.dtype);
    const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, p.d, kQBr<D>, a.dtype);
    const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, p.d, kQBc, a.dtype);
    const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, p.d, kQBc, a.dtype);
    constexpr int kSmem = DqSmem<D>::kBytes;
    set_smem_limit_once<dq_kernel<T, D>, kSmem>();
    p.n_tiles = n_qt;
    dq_kernel<T, D>
        <<<unsigned(n_qt * s.bh()), kThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, p);
    FA_CHECK_LAUNCH();
  }
}

template <class T>
void dispatch_head_dim(const AttentionBwdArgs& a, cudaStream_t stream) {
  switch (head_dim_instance(a.shape.head_dim)) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    case 256:
      return launch<T, 256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "07/bwd_v1_tma_wgmma: head_dim " + std::to_string(a.shape.head_dim) +
                                  " not instantiated (64, 128, 256)");
  }
}

void attention_bwd_v1(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    "07/bwd_v1_tma_wgmma takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(head_dim_instance(s.head_dim) == 0,
                    "07/bwd_v1_tma_wgmma is instantiated for head_dim 64, 128 and 256 (the "
                    "multiples of 8 between them rounded up) only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    "07/bwd_v1_tma_wgmma uses sm_90a instructions (wgmma, TMA): it runs on "
                    "compute capability 9.0 (H100, H200) only");
  FA_REQUIRE(s.valid_heads(), "07/bwd_v1_tma_wgmma: heads must be a multiple of heads_kv");
  if (s.bh() == 0) return;  // nothing to write
  if (s.is_gqa() && !tma_can_load(a)) return grouped_fallback(a, stream, "07/bwd_v1_tma_wgmma");
  if (!tma_can_load(a)) return run_fallback(a, stream);
  // 1. D = rowsum(dO o O), before the two kernels that read it (same stream).
  delta_preprocess_launch(a.o, a.dout, a.delta, s, a.dtype, stream);
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {"07/bwd_v1_tma_wgmma",
             attention_bwd_v1,
             "Hopper backward: TMA + wgmma, dK/dV kernel (S^T = K Q^T, P^T and dS^T from "
             "registers) + dQ kernel, 2 warpgroups, 2-stage rings, no atomics",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*deterministic=*/true,
             /*gqa=*/true,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
