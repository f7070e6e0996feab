// 09/hopper_bwd_v1_varlen: chapter 07's backward (07/bwd_v1_tma_wgmma: TMA + wgmma, a dK/dV kernel
// over key tiles and a dQ kernel over query tiles, no atomics) on a variable-length batch. Read
// 07/bwd_v1 first (chapters/07_flash_hopper/sm90a/bwd_v1_tma_wgmma.cu): the two kernels, their
// rings, products, masks and stores are its own, unchanged; only where a block's rows and keys
// come from changed. O and L come from 09/hopper_v3_varlen_persistent (the packed forward with
// grouped heads). 07/bwd_v1's block (warpgroups, stages, Split, the two kernels' shared-memory
// layouts) comes from common/device/hopper_bwd_v1_block.cuh; 07/bwd_v1 carries its own copy.
//
// What changed vs 07/bwd_v1, and why
//   One idea: an offset table in front of both tile loops. The batch is packed without padding,
//   head-major (VarlenShape, common/shapes.h): Q, O, dO, dQ are [heads, total_q, D], K, V, dK, dV
//   [heads_kv, total_k, D], L and D [heads, total_q], and sequence b owns rows cu_seqlens_q[b] ..
//   cu_seqlens_q[b+1] - 1 of every head's slab (K: cu_seqlens_k). Each block reads its
//   sequence's two offsets and two lengths from cu_seqlens (device memory) and from then on is
//   07's block on a problem of seq_q x seq_k whose row 0 lies at that offset; causal masking is
//   per sequence, bottom-right aligned (off = the sequence's seq_k - seq_q).
//
//   The grids: 07's blocks were (tile, batch * head) with ceil(seq / rows) tiles per head; here
//   (tile, head, sequence) with the tiles of the longest sequence, the host knowing only that
//   one. A dK/dV block whose key tile starts at or past its sequence's seq_k (a dQ block: query
//   tile, seq_q) returns at once, before any mbarrier is initialised or any __syncthreads, so
//   nothing waits for it. A sequence with seq_q = 0 still has its dK/dV blocks, which visit no
//   Q tile and store dK = dV = 0; one with seq_k = 0 has its dQ blocks, which store dQ = 0.
//
//   The tensor maps stay 07's three-dimensional ones, now [heads][total][D] instead of
//   [batch * heads][seq][D]; a box's row coordinate is the sequence's offset plus the tile's
//   first row. In 07, TMA zero-filled the rows of a box past seq_q and seq_k; that fill now
//   happens only at the end of the whole packed slab: a box that runs past the end of one
//   sequence reads the next sequence's rows, real data. 07's masks never relied on the zeros
//   (they test row and key indices), which is why each place that reads such rows stays correct:
//   * Q and dO past seq_q (dkdv: the last streamed Q tile; dq: the kept tile). A row's L2 and D
//     come from plain loads predicated on the row index (load_l2 returns +inf at row >= seq_q, D
//     is 0 there), so P^T (P) = exp2(finite - inf) = +0 exactly for every such query,
//     dS = 0 * (dP - 0) = 0, and dV += P^T dO, dK += dS^T Q add 0 * (finite) = 0 from them. The
//     dq kernel never stores their dQ.
//   * K and V past seq_k: masked to P = 0 on every tile that reaches past seq_k (dkdv:
//     need_mask's k0 + Bc > seq_k; dq: such a tile is never among kv_tiles' unmasked ones and
//     last_visible_key <= seq_k - 1), so dQ += dS K adds 0 * K of the next sequence; their own
//     dK and dV rows are never stored (store_acc_rows skips rows >= seq_k).
//   * "Finite" is the new assumption, as in 09/hopper_v1_varlen: dense 07 had zeros there, now
//     an Inf or NaN planted in another sequence's rows would leak in as NaN.
//   * The stores: 07 stores dK, dV and dQ with plain stores predicated on the row (not TMA).
//     Handed this sequence's base (row h * total + cu_seqlens[b]) and length they write exactly
//     its rows, none of the next sequence's.
//   No atomics, so nothing can add into another sequence's dQ, and the result stays bitwise
//   deterministic: every dQ element is still summed by one thread in a fixed order. The fp32
//   workspace of VarlenBwdArgs holds only the split parts of grouped heads (below).
//
//   The preprocess D = rowsum(dO o O) runs as 09/bwd_v1_varlen runs it: over the packed layout
//   D's rows are the heads * total_q rows of O and dO in order, so chapter 06's preprocess
//   (compiled here through hopper_attention_bwd.cuh) takes them as one sequence of total_q queries
//   per head; L and D of (sequence b, head h) start at element h * total_q + cu_seqlens_q[b].
//
//   Coordinates are int32 for TMA; cu_seqlens are int32 already, and the launcher checks that a
//   box starting at a sequence's last tile (offset + up to 128 rows) still fits. Offsets into the
//   tensors are 64-bit. A slab with no rows at all (total_q or total_k = 0) has no tensor map:
//   the other slab's map stands in, never read. 07's fallback (06/v2_mma for shapes TMA cannot
//   load) has no varlen counterpart: misaligned tensors are refused. Head dims between 64, 128
//   and 256 (multiples of 8) run the next instance as 07/bwd_v1 does: the maps' rows are d long,
//   so the columns past d arrive as zeros and give zero gradient columns, which the stores (rows
//   of d) leave out.
//
//   Grouped K/V heads (GQA, MQA) as 07/bwd_v1 takes them (its header): K, V, dK and dV are
//   [heads_kv, total_k, D]; a dK/dV block is a (key tile, K/V head, sequence) and its loop walks
//   the group's query heads one after the other, dK and dV summed in its registers (no copies,
//   no atomics, still deterministic); a dQ block reads K and V at head h / group. Where that
//   grid would leave SMs idle (few sequences, few K/V heads: MQA over two sequences of 4096 has
//   64 dK/dV blocks for 132 SMs, and ran 2.29x its MHA time per query head causal, 1.53x full;
//   H200, 2026-12-03, notes/measured/h200-2026-12-03/gqa_varlen_bwd_unsplit.log), 07's split
//   holds too: `split` blocks per (key tile, K/V head, sequence) over group / split query heads
//   each, their fp32 parts in the workspace ([split][heads_kv][total_k][D], every row written),
//   added in a fixed order by sum_parts_kernel. dkdv_split (hopper_attention_bwd.cuh) estimates
//   the split on the fixed-length problem of the batch's mean lengths.
//
// Map of the kernels (as 07/bwd_v1; Bc, Br = 128 at D 64 and 128, 64 at D 256)
//   1. D = rowsum(dO o O) over the heads * total_q rows.
//   2. dkdv_kernel, one block per (key tile, K/V head, sequence), 2 warpgroups: the offset
//      table, return if past seq_k; K, V kept, for each query head of the group the Q tiles that
//      see them (causal: from causal_first_query) through a 2-stage ring with L, D;
//      S^T = K Q^T, dP^T = V dO^T
//      (wgmma_ss), P^T, dV += P^T dO, dS^T, dK += dS^T Q (wgmma_rs); dK * scale, dV stored.
//   3. dq_kernel, one block per (query tile, head, sequence): return if past seq_q; Q, dO kept,
//      the visible K/V tiles (kv_tiles) through a 2-stage ring; S, dP, P, dS, dQ += dS K;
//      dQ * scale stored.
//   smem      dkdv D 64: 65 KiB, D 128: 130 KiB, D 256: 194 KiB; dq 65 / 129 / 193 KiB
//   registers (ptxas, CUDA 13.0, sm_90a, fp16 = bf16; 256 threads, up to 255 each): dkdv 214
//             (D 64) / 255 (D 128) / 250 (D 256), dq 145 / 191 / 159, no spills (07/bwd_v1:
//             206 / 254 / 254 and 136 / 182 / 155)
// Speed: measured in chapters/09_serving/README.md
#include <cuda.h>

#include <climits>
#include <string>

#include "hopper_attention_bwd.cuh"
#include "hopper_bwd_v1_block.cuh"
#include "gpu.h"

namespace fa::ch09 {
namespace {

using namespace fa::ch07;  // tile layout, descriptors, pack_p, load_l2, store_acc_rows, tensor maps
using namespace fa::ch07::bwd_v1;  // 07/bwd_v1's block and layouts (hopper_bwd_v1_block.cuh)

// 07's BwdParams with the lengths replaced by the offset table: they are per sequence now.
struct VarlenBwdParams {
  const float* lse;    // [heads, total_q]
  const float* delta;  // [heads, total_q]
  void* dq;            // [heads, total_q, D]
  void* dk;            // [heads_kv, total_k, D]
  void* dv;
  const int32_t* cu_seqlens_q;  // batch + 1 offsets into the packed rows, on the device
  const int32_t* cu_seqlens_k;
  int64_t total_q, total_k;    // rows of one head's slab: the sums of the lengths
  int d;                       // the real head dim, the rows' length (D rounds it up)
  int heads, heads_kv, group;  // query heads, K/V heads, query heads per K/V head (1: none)
  int split;     // dkdv: blocks per (key tile, K/V head, sequence), each over group / split heads
  float* parts;  // split > 1: fp32 dK parts [split][heads_kv][total_k][D], then dV's likewise
  int64_t n_tiles;   // tiles per (sequence, head), the longest sequence's: of keys or queries
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- dK, dV --------------------------------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                const VarlenBwdParams p) {
  using Sm = DkdvSmem<D>;
  using Sp = Split<D>;
  constexpr int kBc = kKvBc<D>;
  constexpr int kStrips = D / kSwizzleCols;
  constexpr int kSAcc = kKvBr / 2;  // S^T (and dP^T) accumulators per thread
  constexpr int kN = Sp::kAccCols;  // columns of dK and dV this warpgroup accumulates

  // ---- The offset table: which sequence, K/V head and key tile this block is, and where they
  // lie. In 32 bits: the grid has fewer than 2^31 blocks (the launcher checks), and the block's
  // prologue is paid by every block, the many that return at once too (with 64-bit divisions
  // here the multi-head backward ran 0.97-1.02x, with these 0.98-1.00x the build before the
  // group walk: notes/measured/h200-2026-12-03/varlen_bwd_mha_split.md, _32bit.md).
  const int n_tiles = int(p.n_tiles), block = int(blockIdx.x);
  const int unit = block / n_tiles;  // (sequence, K/V head, part) (GQA)
  const int64_t k0 = int64_t(block % n_tiles) * kBc;
  const int seq_head = unit / p.split;                         // sequence * heads_kv + K/V head
  const int part = unit % p.split, heads = p.group / p.split;  // this block's query heads
  const int b = seq_head / p.heads_kv, kv = seq_head % p.heads_kv;
  const int q_start = p.cu_seqlens_q[b], k_start = p.cu_seqlens_k[b];  // first packed rows
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - q_start, seq_k = p.cu_seqlens_k[b + 1] - k_start;
  if (k0 >= seq_k) return;  // past this sequence's keys: the whole block, before any barrier

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

  // The Q tiles that see this block's keys: causal, from the one holding the first query that
  // sees key k0 (every earlier tile is entirely masked). Possibly none.
  const int64_t n_qt = ceil_div(seq_q, kKvBr);
  int64_t qt_begin = 0;
  if (p.causal) {
    const int64_t first = causal_first_query(k0, seq_q, seq_k);
    if (first > 0) qt_begin = first / kKvBr;
  }
  // GQA: the group's query heads one after the other, n_per tiles each (07/bwd_v1's header).
  const int n_per = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;
  const int n_iter = n_per * heads;
  // Iteration j's place (query head, Q tile qt_begin + i), stepped with j (GroupPlace, as
  // 07/bwd_v4 steps it: dividing j by n_per twice an iteration made the plain multi-head loop
  // 2-8% slower, H200, 2026-12-03, notes/measured/h200-2026-12-03/varlen_bwd_mha_divided.md);
  // `ahead` is iteration j + kStages's, the tile the loop requests and whose L and D it loads.
  GroupPlace at{kv * p.group + part * heads, 0}, ahead = at;

  // Thread 0: Q and dO of the tile at place `pl` into stage s. The row is a packed row: the
  // sequence's offset plus the tile's first row (the box may run into the next sequence; see
  // the header).
  auto request_q = [&](int s, GroupPlace pl) {
    const int row = q_start + int((qt_begin + pl.i) * kKvBr), h = pl.head;
    hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
    for (int c = 0; c < kStrips; ++c) {
      hopper::tma_load_3d(sQ(s) + c * kKvBr * 128, &tm_q, &q_full[s], c * kSwizzleCols, row, h);
      hopper::tma_load_3d(sdO(s) + c * kKvBr * 128, &tm_do, &q_full[s], c * kSwizzleCols, row, h);
    }
  };
  // Warpgroup 0: threads 0..63 carry L2 of the tile's 64 queries, threads 64..127 their D. L and
  // D of the sequence and head start at element h * total_q + q_start of the [heads, total_q]
  // vectors; rows at or past seq_q (the next sequence's) get L2 = +inf and D = 0.
  auto load_ld = [&](GroupPlace pl) {
    const int64_t row = (qt_begin + pl.i) * kKvBr + tid % kKvBr;
    const int64_t head_row0 = int64_t(pl.head) * p.total_q + q_start;
    if (tid < kKvBr) return load_l2(p.lse + head_row0, row, seq_q);
    return row < seq_q ? p.delta[head_row0 + row] : 0.0f;
  };
  auto store_ld = [&](int s, float x) {
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
        hopper::tma_load_3d(sK + c * kBc * 128, &tm_k, kv_full, c * kSwizzleCols, k_start + int(k0),
                            kv);
        hopper::tma_load_3d(sV + c * kBc * 128, &tm_v, kv_full, c * kSwizzleCols, k_start + int(k0),
                            kv);
      }
    }
    GroupPlace pl = ahead;
    for (int j = 0; j < kStages && j < n_iter; ++j, pl.step(n_per)) request_q(j, pl);
  }
  for (int j = 0; j < kStages && j < n_iter; ++j, ahead.step(n_per))
    if (tid < 2 * kKvBr) store_ld(j, load_ld(ahead));
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
  for (int j = 0; j < n_iter; ++j, at.step(n_per), ahead.step(n_per)) {
    const int s = j % kStages;
    const int64_t q0 = (qt_begin + at.i) * kKvBr;
    const bool prefetch = j + kStages < n_iter && tid < 2 * kKvBr;
    const float next_ld = prefetch ? load_ld(ahead) : 0.0f;
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
      if (tid == 0) request_q(s, ahead);
      store_ld(s, next_ld);  // read again only after next iteration's barrier
    }
  }

  // Keys no query sees (causal, or seq_q = 0) leave with dK = dV = 0, as they must. Rows
  // k0 + wrow .., columns col0 .. col0 + kN - 1 of this sequence's [seq_k x D] part of the K/V
  // head's slab, summed over its group; store_acc_rows skips rows at or past seq_k, which belong
  // to the next sequence.
  const int64_t row0 = k0 + wrow;
  const int64_t first_row = int64_t(kv) * p.total_k + k_start;  // in the [heads_kv, total_k] slabs
  if (p.split > 1) {  // this part's fp32 sums; sum_parts_kernel adds the parts (07/bwd_v1, GQA)
    const int64_t rows = int64_t(p.heads_kv) * p.total_k, at_part = part * rows + first_row;
    const int64_t dv_part = (int64_t(p.split) * rows + at_part) * p.d;
    store_acc_rows<float, kN>(p.parts + at_part * p.d + col0, dk, row0, seq_k, 1.0f, t, p.d,
                              p.d - col0);
    store_acc_rows<float, kN>(p.parts + dv_part + col0, dv, row0, seq_k, 1.0f, t, p.d, p.d - col0);
    return;
  }
  store_acc_rows<T, kN>(static_cast<T*>(p.dk) + first_row * p.d + col0, dk, row0, seq_k, p.scale, t,
                        p.d, p.d - col0);
  store_acc_rows<T, kN>(static_cast<T*>(p.dv) + first_row * p.d + col0, dv, row0, seq_k, 1.0f, t,
                        p.d, p.d - col0);
}

// ---- dQ ------------------------------------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dq_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
              const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
              const VarlenBwdParams p) {
  using Sm = DqSmem<D>;
  using Sp = Split<D>;
  constexpr int kBr = kQBr<D>;
  constexpr int kStrips = D / kSwizzleCols;
  constexpr int kSAcc = kQBc / 2;   // S (and dP) accumulators per thread
  constexpr int kN = Sp::kAccCols;  // columns of dQ this warpgroup accumulates

  // ---- The offset table: which sequence, head and Q tile this block is, and where they lie.
  const int64_t seq_head = int64_t(blockIdx.x) / p.n_tiles;  // sequence * heads + head
  // Heaviest tiles first under causal masking (the last query tiles see the most keys).
  const int64_t q0 = (p.n_tiles - 1 - int64_t(blockIdx.x) % p.n_tiles) * kBr;
  const int b = int(seq_head / p.heads), h = int(seq_head % p.heads);
  const int kv = h / p.group;  // the K/V head it reads (GQA: 07/bwd_v1's header)
  const int q_start = p.cu_seqlens_q[b], k_start = p.cu_seqlens_k[b];  // first packed rows
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - q_start, seq_k = p.cu_seqlens_k[b + 1] - k_start;
  if (q0 >= seq_q) return;  // past this sequence's queries: the whole block, before any barrier

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
  const KvTiles range = kv_tiles(q0, kBr, seq_q, seq_k, kQBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  // Thread 0: K and V tile j into stage j % kStages, at the sequence's packed rows.
  auto request_kv = [&](int j) {
    const int s = j % kStages;
    hopper::mbar_arrive_expect_tx(&kv_full[s], 2 * Sm::kKVBytes);
    for (int c = 0; c < kStrips; ++c) {  // all D columns: S and dP contract over them
      hopper::tma_load_3d(sK(s) + c * kQBc * 128, &tm_k, &kv_full[s], c * kSwizzleCols,
                          k_start + j * kQBc, kv);
      hopper::tma_load_3d(sV(s) + c * kQBc * 128, &tm_v, &kv_full[s], c * kSwizzleCols,
                          k_start + j * kQBc, kv);
    }
  };

  if (tid == 0) {
    hopper::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&kv_full[s], 1);
    hopper::mbar_fence_init();
    if (n_tiles > 0) {
      hopper::mbar_arrive_expect_tx(q_full, 2 * Sm::kQBytes);
      for (int c = 0; c < kStrips; ++c) {
        hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, q_start + int(q0),
                            h);
        hopper::tma_load_3d(sdO + c * kBr * 128, &tm_do, q_full, c * kSwizzleCols,
                            q_start + int(q0), h);
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
  // Rows past seq_q (the next sequence's, in the last tile's box) get L2 = +inf and D = 0 by
  // their index: P = 0, so they add nothing, and their dQ is not stored.
  const int64_t first_row = int64_t(h) * p.total_q + q_start;  // in the [heads, total_q] slabs
  float l2[2], dd[2];
  int64_t last_key[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    l2[r] = load_l2(p.lse + first_row, row, seq_q);
    dd[r] = row < seq_q ? p.delta[first_row + row] : 0.0f;
    last_key[r] = last_visible_key(row, seq_q, seq_k, p.causal);
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

    // ---- P = exp2(S scale log2 e - L2); element i is row r = (i / 2) % 2, key
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

  // Rows q0 + wrow .., columns col0 .. col0 + kN - 1 of this sequence's [seq_q x D] part of the
  // head's dQ slab; rows at or past seq_q (the next sequence's) are skipped.
  store_acc_rows<T, kN>(static_cast<T*>(p.dq) + first_row * p.d + col0, dq, q0 + wrow, seq_q,
                        p.scale, t, p.d, p.d - col0);
}

// ---- Launcher: 07's three launches over the packed layout -------------------------------------
constexpr const char* kName = "09/hopper_bwd_v1_varlen";

template <class T, int D>
void launch(const VarlenBwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  // Tiles of the longest sequence, for every (sequence, head); shorter sequences' blocks past
  // their keys (queries) return at once. dK/dV: one block per K/V head (GQA: 07/bwd_v1's header).
  const int64_t n_kt = ceil_div(s.max_seq_k(), kKvBc<D>), n_qt = ceil_div(s.max_seq_q(), kQBr<D>);
  const int64_t seq_heads = s.batch() * s.heads, seq_kv_heads = s.batch() * s.kv_heads();
  FA_UNSUPPORTED_IF(
      n_kt * seq_kv_heads * (s.heads / s.kv_heads()) > INT_MAX || n_qt * seq_heads > INT_MAX,
      std::string(kName) + ": more than 2^31-1 thread blocks");
  // dkdv's iterations, the group's query heads x the Q tiles, count in an int.
  FA_UNSUPPORTED_IF(ceil_div(s.max_seq_q(), kKvBr) * (s.heads / s.kv_heads()) > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 query tiles per K/V head");
  VarlenBwdParams p{};
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.total_q = s.total_q();
  p.total_k = s.total_k();
  p.d = int(s.head_dim);  // <= D: the boxes' columns past it arrive as zeros
  p.heads = int(s.heads);
  p.heads_kv = int(s.kv_heads());
  p.group = int(s.heads / s.kv_heads());
  p.split = dkdv_split<dkdv_kernel<T, D>, DkdvSmem<D>::kBytes>(s, kThreads, kKvBc<D>, kKvBr);
  p.parts = a.workspace;  // split > 1 only; dkdv_split keeps the parts within its q_numel floats
  p.scale = s.sequence(0).softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;

  // [heads][total][D]: a head's slab is the 07 map's [seq] axis; the packed offsets select rows
  // (K and V: heads_kv slabs).
  // A slab with no rows (every Q, or every K, empty) has no tensor to describe: the other one's
  // map stands in, never read (no block loads a tile of an empty sequence).
  auto maps = [&](int q_box, int k_box, CUtensorMap& tm_q, CUtensorMap& tm_do, CUtensorMap& tm_k,
                  CUtensorMap& tm_v) {
    if (p.total_q > 0) {
      tm_q = make_tmap(a.q, s.heads, p.total_q, p.d, q_box, a.dtype);
      tm_do = make_tmap(a.dout, s.heads, p.total_q, p.d, q_box, a.dtype);
    }
    if (p.total_k > 0) {
      tm_k = make_tmap(a.k, s.kv_heads(), p.total_k, p.d, k_box, a.dtype);
      tm_v = make_tmap(a.v, s.kv_heads(), p.total_k, p.d, k_box, a.dtype);
    }
    if (p.total_q == 0) tm_q = tm_do = tm_k;
    if (p.total_k == 0) tm_k = tm_v = tm_q;
  };

  // 2. dK, dV (every key row of every sequence, zeros where no query sees it): K/V boxes of
  // kKvBc rows (kept), Q/dO boxes of 64 rows (streamed); every box is 64 columns wide, one
  // 128-byte swizzled strip.
  if (p.total_k > 0) {
    CUtensorMap tm_q, tm_do, tm_k, tm_v;
    maps(kKvBr, kKvBc<D>, tm_q, tm_do, tm_k, tm_v);
    constexpr int kSmem = DkdvSmem<D>::kBytes;
    set_smem_limit_once<dkdv_kernel<T, D>, kSmem>();
    p.n_tiles = n_kt;
    dkdv_kernel<T, D><<<unsigned(n_kt * seq_kv_heads * p.split), kThreads, kSmem, stream>>>(
        tm_q, tm_k, tm_v, tm_do, p);
    FA_CHECK_LAUNCH();
    if (p.split > 1) sum_parts<T>(p.parts, a, p.split, p.scale, stream);
  }
  // 3. dQ (every query row, zeros where it sees no key): Q/dO boxes of kQBr rows (kept), K/V
  // boxes of 64 rows (streamed).
  if (p.total_q > 0) {
    CUtensorMap tm_q, tm_do, tm_k, tm_v;
    maps(kQBr<D>, kQBc, tm_q, tm_do, tm_k, tm_v);
    constexpr int kSmem = DqSmem<D>::kBytes;
    set_smem_limit_once<dq_kernel<T, D>, kSmem>();
    p.n_tiles = n_qt;
    dq_kernel<T, D>
        <<<unsigned(n_qt * seq_heads), kThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, p);
    FA_CHECK_LAUNCH();
  }
}

template <class T>
void dispatch_head_dim(const VarlenBwdArgs& a, cudaStream_t stream) {
  launch_head_dim_instance<false>(kName, a.shape.head_dim,
                                  [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
}

// 07's refusals, less its fallback: a shape TMA cannot load is refused, not rerouted (no
// Hopper-less varlen backward of this kernel's head dims to hand it to).
void varlen_bwd(const VarlenBwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  FA_REQUIRE(s.heads >= 0 && s.heads_kv >= 0, "negative head count");
  FA_REQUIRE(s.seqlens_k.size() == s.seqlens_q.size(), "seqlens_q and seqlens_k differ in length");
  for (size_t b = 0; b < s.seqlens_q.size(); ++b)
    FA_REQUIRE(s.seqlens_q[b] >= 0 && s.seqlens_k[b] >= 0, "negative sequence length");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.window_left >= 0 || (!s.causal && s.window_right >= 0),
                    std::string(kName) + ": no sliding window (09/hopper_bwd_v2_window takes one)");
  FA_UNSUPPORTED_IF(head_dim_instance(s.head_dim) == 0,
                    std::string(kName) +
                        " is instantiated for head_dim 64, 128 and 256 (the multiples of 8 "
                        "between them rounded up) only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  FA_REQUIRE(s.heads == 0 || s.heads % s.kv_heads() == 0, "heads must be a multiple of heads_kv");
  if (s.batch() == 0 || s.heads == 0) return;  // nothing to write
  if (s.total_q() == 0 && s.total_k() == 0) return;
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr,
             std::string(kName) + " needs cu_seqlens_q and cu_seqlens_k on the device");
  // TMA's rules (hopper_attention_bwd.cuh, tma_can_load) and int32 box coordinates: a sequence's
  // last box starts below total and reaches at most 128 rows past it.
  FA_UNSUPPORTED_IF(
      !aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.dout, 16) ||
          !aligned(a.dq, 4) || !aligned(a.dk, 4) || !aligned(a.dv, 4),
      std::string(kName) + ": TMA needs 16-byte aligned Q, K, V, dO (dQ, dK, dV: 4 bytes)");
  FA_UNSUPPORTED_IF(
      s.total_q() >= INT_MAX - 512 || s.total_k() >= INT_MAX - 512 || s.heads >= INT_MAX,
      std::string(kName) + ": packed rows or heads past int32 TMA coordinates");

  // 1. D = rowsum(dO o O), before the two kernels that read it (same stream), over the packed
  // layout: one sequence of total_q queries per head (delta_preprocess.cuh), as 09/bwd_v1_varlen
  // runs it.
  if (s.total_q() > 0) {
    delta_preprocess_launch_packed(a.o, a.dout, a.delta, s, a.dtype, stream);
  }
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(VarlenBwdKernel,
            {kName,
             varlen_bwd,
             "07/bwd_v1 on a packed variable-length batch: an offset table (cu_seqlens) in front "
             "of both tile loops, TMA boxes at packed rows, rows of the next sequence given L = "
             "+inf, stores per row; dK/dV and dQ kernels, no atomics",
             {DType::F16, DType::BF16},
             {64, 128, 256},
             /*min_sm=*/90,
             /*window=*/false,
             /*deterministic=*/true,
             /*forward=*/"09/hopper_v3_varlen_persistent",
             /*rounds_head_dim=*/true,
             /*gqa=*/true});

}  // namespace fa::ch09
