// 09/hopper_v6_varlen_heaviest_first: 09/hopper_v3_varlen_persistent with its units dealt
// heaviest first. Read v3 first (hopper_v3_varlen_persistent.cu): the units, the cursor over
// cu_seqlens, the producer, the ring, the turns and the epilogue are its own, unchanged. What
// changed is the order in which the persistent blocks take the units: that is the whole diff.
//
// What changed vs v3, and why
//   One idea: the static deal as a list scheduler deals, heaviest first (ch09_deal.h). v3 numbers
//   the units sequence after sequence and block b takes units b, b + G, ...; on a batch of uneven
//   sequences some blocks draw the long sequences' units round after round. Nsight Compute counts
//   it on the long batch of fa_bench and compare_serving.py (15 sequences of 260-4456 tokens, D
//   128, H100): v3's busiest SM 12.7% (causal) and 6.8% (full) above the mean, where
//   hopper_v1_varlen's hardware deal leaves 1.8% and 1.2%, while v3's mean SM needs 9-10% fewer
//   cycles than hopper_v1's (chapter README, "The steps as diffs").
//   v6 keeps v3's units and changes their numbers and their deal:
//   * the host numbers the sequences in the order of their units' cost, heaviest first
//     (heaviest_first: the key tiles a unit's query tiles visit, plus one per query tile), and
//     hands the order to the kernel in its parameters (Schedule::order, up to kMaxOrdered
//     sequences; a batch of more keeps v3's order). The cursor walks the sequences in that order:
//     position pos of the deal is sequence order[pos], and everything it reads from cu_seqlens is
//     that sequence's. Each round of G units then holds units of about one cost, the last rounds
//     the cheapest;
//   * round k goes to blocks 0 .. G - 1 when k is even and to G - 1 .. 0 when it is odd
//     (serpentine_unit), so that the block that drew a round's heaviest unit draws the next
//     round's lightest. Sorted but dealt one way, block 0 would draw the heaviest unit of every
//     round: the two halves are one idea, a sorted static deal (either alone gains little: the
//     model below).
//   A block's units still grow from round to round, so the cursor still only moves forward (each
//   sequence is read once per block). A unit's K/V tiles stay with its sequence and head as in
//   v3, and consecutive units of a round still share them in L2 (ordering single query tiles by
//   cost across the whole batch would balance better, 1%, but a round would then touch as many
//   heads as units: no reuse, for this batch's 268 MB of Q, K, V and O).
//   The order is 2 KiB of kernel parameters (1024 sequences of 16 bits); read with a run-time
//   index, so the parameter struct is __grid_constant__ (indexed in the parameter space, not
//   copied to local memory).
//
// Prediction. The list-scheduling model (notes/figures/fig_varlen_deal.py, 132 SMs) puts the
// busiest block over the mean at 1.063 (causal) and 1.010 (full) on the long batch, against v3's
// 1.130 and 1.069; on fa_bench's mixed batch 1.051 and 1.017 against 1.125 and 1.048; on its
// square batch (equal lengths) the same as v3. The order alone: 1.087, 1.020 (long), the
// serpentine alone 1.112, 1.046. So 1.03-1.07x v3 on the long and mixed batches if the SMs' work
// per unit stays v3's, 1.00x on the square batch; on the long batch about hopper_v1's time causal
// and 1.05x it full.
// Measured (NVIDIA H100 80GB HBM3, 2026-12-06, notes/measured/h100-2026-12-06/varlen_v6_rounds.md:
// three rounds of one fa_bench process timing both, medians), against v3: D 128 1.00-1.05x (the
// long batch causal 1.049x, full 1.001x), D 192 1.00-1.13x, D 256 1.00-1.04x; D 64 0.98-1.02x and
// D 96 0.97-1.04x (the long batch 0.97x both ways at D 96), so the dispatch keeps v3 up to D 96.
// Nsight Compute on the long batch at D 128 (ncu_long_batch_v6.txt): the busiest SM 6.7% above
// the mean causal (the model: 6.3%) and 1.1% full (1.0%), against v3's 12.7% and 6.8%, the mean
// SM's active cycles unchanged; at the profiler's locked clocks the kernel was 1.05x (causal)
// and 1.07x (full) faster than v3, where at the GPU's own clocks fa_bench finds the full batch
// level (not explained; not profiled further). Through the library on the same batch
// (compare_serving.py, varlen_v6_peers.log): 579.2 | 476.9 TFLOP/s full | causal, v3 556.6 |
// 468.3, hopper_v1_varlen 592.1 | 514.2.
//
// Map of the kernel (as v3 and 07/t52)
//   grid        min(work units, SMs) blocks, one per SM
//   work unit   one query tile (Br = 128 rows) of one head of one sequence; causal: a pair
//   deal        the sequences heaviest first; block b's round k: unit serpentine_unit(k, b, G)
//   block       3 warpgroups (384 threads), producer + 2 consumers
//   tiles       Bc = 128 at D 64, 176 at D 96 and 128, 112 at D 192, 80 at D 256
//   smem        as t52: D 64 144 KiB, D 96 and 128 208 KiB, D 192 216 KiB, D 256 224 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills
//               (-Xptxas -v, CUDA 13.0)
// Speed: measured in chapters/09_serving/README.md
#include <cuda.h>

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "hopper_attention.cuh"
#include "gpu.h"
#include "../ch09_deal.h"

namespace fa::ch09 {
namespace {

using namespace fa::ch07;  // Tiles, descriptors, mask, online softmax, epilogue, tensor maps

constexpr int kConsumers = 2;                           // warpgroups that compute
constexpr int kThreads = 128 * (1 + kConsumers);        // + the producer warpgroup
constexpr int kBr = kConsumers * kRowsPerWarpgroup;     // 128 query rows per block
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168
constexpr int kTurnBar = 1;            // named barriers 1, 2: consumer 0's, 1's turn
constexpr int kTurnThreads = 2 * 128;  // the giver's arrive + the taker's sync
constexpr bool kWith192 = true;        // an instance at D 192 (header), not only 64, 128 and 256
constexpr bool kWith96 = true;         // and one at D 96 (header)
template <int D>
constexpr int stages() {
  return D == 64 ? 4 : 2;
}

template <int D>
struct V5Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * Tiles<D, kWideBc<D>>::kStrips * 128;  // whole strips
  static constexpr int kKVBytes = Tiles<D, kWideBc<D>>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (2 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

// 09/hopper_v1_varlen's parameters: t52's Params with the lengths replaced by the offset table.
struct VarlenParams {
  void* o;
  float* lse;
  const int32_t* cu_seqlens_q;  // batch + 1 offsets into the packed rows, on the device
  const int32_t* cu_seqlens_k;
  int64_t total_q;  // rows of one head's slab of Q, O and L
  int d;            // the real head dim, O's row length (D rounds it up)
  bool causal;
  float scale_log2;  // softmax_scale * log2(e); its absolute value is used (see negate_if)
};

// varlen: the static schedule over the packed batch. Sequence after sequence, heaviest first
// (order); within one, t52's units of a head (a query tile, or causal the pair of the longest and
// the shortest left), head after head. Round k of block b: unit serpentine_unit(k, b, G).
struct Schedule {
  uint32_t units;  // per_head(b) * heads summed over the sequences, < 2^31 (the launch checks)
  uint32_t heads;  // query heads
  uint32_t group;  // query heads per K/V head: head h reads K/V head h / group
  bool pairs;      // causal: unit r of a head is query tiles num_q_tiles - 1 - r and r
  bool ordered;    // the sequences in the order below; false: in batch order (a longer batch)
  uint16_t order[kMaxOrdered];  // position pos of the deal is sequence order[pos]
};

// varlen: the sequence a unit belongs to, and where its rows lie. A thread's units only grow, so
// seek moves the cursor forward, a sequence at a time, never back (header, "Finding a unit's
// sequence"). Starts before sequence 0 (end = 0).
struct SeqCursor {
  int pos = -1;          // its position in the deal's order
  int b = -1;            // the sequence
  uint32_t first = 0;    // its first unit
  uint32_t end = 0;      // one past its last unit
  int q_start, k_start;  // its first packed row of Q and of K, V
  int seq_q, seq_k;      // its lengths
  int num_q_tiles;       // ceil(seq_q / Br)
  int per_head;          // its units per head
};

__device__ __forceinline__ void seek(SeqCursor& cur, uint32_t u, const Schedule& sched,
                                     const VarlenParams& p) {
  while (u >= cur.end) {
    ++cur.pos;
    cur.b = sched.ordered ? int(sched.order[cur.pos]) : cur.pos;
    cur.first = cur.end;
    cur.q_start = p.cu_seqlens_q[cur.b];
    cur.k_start = p.cu_seqlens_k[cur.b];
    cur.seq_q = p.cu_seqlens_q[cur.b + 1] - cur.q_start;
    cur.seq_k = p.cu_seqlens_k[cur.b + 1] - cur.k_start;
    cur.num_q_tiles = (cur.seq_q + kBr - 1) / kBr;
    cur.per_head = sched.pairs ? (cur.num_q_tiles + 1) / 2 : cur.num_q_tiles;
    cur.end = cur.first + uint32_t(cur.per_head) * sched.heads;  // a sequence without queries: none
  }
}

// The query tiles of unit r of a head: 1, or 2 for a causal pair (the middle tile of an odd
// count stands alone). Tile k = 0 is the longer: num_q_tiles - 1 - r, as v4's block r of a head.
__device__ __forceinline__ int unit_tiles(const Schedule& sched, int r, int num_q_tiles) {
  return sched.pairs && r < num_q_tiles - 1 - r ? 2 : 1;
}
__device__ __forceinline__ int unit_q_tile(int r, int k, int num_q_tiles) {
  return k == 0 ? num_q_tiles - 1 - r : r;
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_varlen_fwd_v3_kernel(const __grid_constant__ CUtensorMap tm_q,
                               const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_v, const VarlenParams p,
                               const __grid_constant__ Schedule sched) {
  using Tl = Tiles<D, kWideBc<D>>;
  using Sm = V5Smem<D>;
  constexpr int kBc = Tl::kBc;
  constexpr int kStages = Sm::kStages;
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKVBytes; };
  auto sV = [&](int s) { return smem + Sm::kVOffset + s * Sm::kKVBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* q_empty = q_full + 1;         // v5: both consumers are done reading this tile's Q
  uint64_t* full_k = q_empty + 1;         // per stage: the K tile has landed
  uint64_t* full_v = full_k + kStages;    // per stage: the V tile has landed
  uint64_t* empty_k = full_v + kStages;   // per stage: both consumers are done reading K
  uint64_t* empty_v = empty_k + kStages;  // per stage: both consumers are done reading V

  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128, q = t % 4;

  if (threadIdx.x == 0) {
    hopper::mbar_init(q_full, 1);
    hopper::mbar_init(q_empty, 128 * kConsumers);  // every consumer thread, once per Q
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&full_k[s], 1);  // the producer's expect_tx arrival
      hopper::mbar_init(&full_v[s], 1);
      hopper::mbar_init(&empty_k[s], 128 * kConsumers);  // every consumer thread, once per use
      hopper::mbar_init(&empty_v[s], 128 * kConsumers);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  if (warpgroup == 0) {
    // ---- Producer: gives its registers away, then one thread keeps the ring full, across the
    // work tiles of this block (v5).
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      uint64_t fill = 0;     // v5: K/V stage fills of this block, over all its work tiles
      uint32_t q_loads = 0;  // v5: Q loads of this block
      SeqCursor cur;         // varlen: the sequence of the current unit
      for (uint32_t k = 0, u; (u = serpentine_unit(k, blockIdx.x, gridDim.x)) < sched.units; ++k) {
        seek(cur, u, sched, p);               // varlen
        const uint32_t unit = u - cur.first;  // varlen: the unit's number within its sequence
        const int h = int(unit / uint32_t(cur.per_head)), r = int(unit % uint32_t(cur.per_head));
        const int h_kv = int(uint32_t(h) / sched.group);  // its K/V head (07/v5's header, GQA)
        for (int k = 0; k < unit_tiles(sched, r, cur.num_q_tiles); ++k) {
          const int q0 = unit_q_tile(r, k, cur.num_q_tiles) * kBr;
          const int n_tiles = int(kv_tiles(q0, kBr, cur.seq_q, cur.seq_k, kBc, p.causal).visit);
          if (n_tiles == 0) continue;  // no key for any row: no Q, no turns (header)
          // v5: the previous Q is free once both consumers' last S of its tile is done.
          if (q_loads > 0) hopper::mbar_wait(q_empty, (q_loads - 1) & 1);
          ++q_loads;
          hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
          for (int c = 0; c < Tl::kStrips; ++c)
            hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols,
                                cur.q_start + q0, h);  // varlen: packed rows
#pragma unroll 1  // v5: unrolled, the loop's hoisted addresses spill the producer's 24 registers
          for (int j = 0; j < n_tiles; ++j, ++fill) {
            const int s = int(fill % kStages);
            const uint64_t use = fill / kStages;
            if (use > 0) hopper::mbar_wait(&empty_k[s], uint32_t(use - 1) & 1);  // both freed it
            hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKVBytes);
            for (int c = 0; c < Tl::kStrips; ++c)
              hopper::tma_load_3d(sK(s) + c * kBc * 128, &tm_k, &full_k[s], c * kSwizzleCols,
                                  cur.k_start + j * kBc, h_kv);
            if (use > 0) hopper::mbar_wait(&empty_v[s], uint32_t(use - 1) & 1);  // a turn after K
            hopper::mbar_arrive_expect_tx(&full_v[s], Sm::kKVBytes);
            for (int c = 0; c < Tl::kStrips; ++c)
              hopper::tma_load_3d(sV(s) + c * kBc * 128, &tm_v, &full_v[s], c * kSwizzleCols,
                                  cur.k_start + j * kBc, h_kv);
          }
        }
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute exactly as v1 on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * 128;  // its rows in each strip
  const float c = fabsf(p.scale_log2);

  // v5: the current work tile, set at its start (the loop below): its K/V range, the last key
  // each of this thread's two rows may see, and its O, m and l.
  int n_tiles = 0, n_unmasked = 0;
  int64_t last_key[2];
  float o[Tl::kOAcc];
  float m[2], l[2];

  uint32_t pf[Tl::kPSlices][4];  // P_{j-1}: written by the softmax of turn j - 1, read in turn j
  uint64_t fill = 0;             // v5: the first K/V fill of the current work tile
  uint32_t q_loads = 0;          // v5: Q loads before the current work tile's

  // Turn j. kS: it has an S (j < n_tiles), kPV: it has a P V (j > 0); compile-time, so that no
  // wgmma sits on a run-time branch (ptxas would serialise them).
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    // v5: stage and parity of tile j from the block's fill count, as the producer numbers them.
    const uint64_t f = fill + uint64_t(j);
    const int s = int(f % kStages), sp = int((f + kStages - 1) % kStages);  // tiles j and j - 1
    if constexpr (kS) hopper::mbar_wait(&full_k[s], uint32_t(f / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&full_v[sp], uint32_t((f - 1) / kStages) & 1);

    // ---- This consumer's turn: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, two commit groups.
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    float sc[Tl::kSAcc];
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
                                    kk > 0);
      hopper::wgmma_commit();  // the older group: S_j
    }
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk)
        hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D, kBc>(sV(sp), kk), 1);
      hopper::wgmma_commit();  // the newer group: P_{j-1} V_{j-1}
    }
    // ---- The other consumer's turn may start now. v5: after every turn, the block's last too.
    hopper::named_bar_arrive(kTurnBar + 1 - consumer, kTurnThreads);

    // ---- Softmax of S_j as soon as S_j is done, while P_{j-1} V_{j-1} still runs: it touches
    // neither O nor P_{j-1}, which that wgmma reads and writes.
    float alpha[2];
    if constexpr (kS) {
      if constexpr (kPV)
        hopper::wgmma_wait<1>();  // all but the newest group done: S_j is
      else
        hopper::wgmma_wait<0>();
      hopper::fence_registers(sc);
      hopper::mbar_arrive(&empty_k[s]);                    // done with K_j
      if (j == n_tiles - 1) hopper::mbar_arrive(q_empty);  // v5: and with this work tile's Q
      negate_if(sc, p.scale_log2 < 0.0f);
      if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
      online_softmax(sc, m, l, c, alpha);
      hopper::fence_registers(sc);  // the exponentials are computed before the wait below
    }
    if constexpr (kPV) {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o);
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk) hopper::fence_registers(pf[kk]);
      hopper::mbar_arrive(&empty_v[sp]);  // done with V_{j-1}
    }
    // ---- O now holds P_{j-1} V_{j-1}: rescale it for tile j, and P_j replaces P_{j-1}.
    if constexpr (kS) {
      rescale(o, alpha);
      pack_p<T>(sc, pf);
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  // v5: consumer 0 takes the block's first turn; from then on the token goes to the other
  // consumer after every turn, across work tiles, and consumer 0 takes the one left after the
  // block's last turn at the end. Every bar.arrive meets exactly one bar.sync (header).
  if (consumer == 1) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  SeqCursor cur;  // varlen: the sequence of the current unit, as the producer's
  for (uint32_t k = 0, u; (u = serpentine_unit(k, blockIdx.x, gridDim.x)) < sched.units; ++k) {
    seek(cur, u, sched, p);  // varlen
    const uint32_t unit = u - cur.first;
    const int h = int(unit / uint32_t(cur.per_head)), r = int(unit % uint32_t(cur.per_head));
    const int64_t seq_q = cur.seq_q, seq_k = cur.seq_k;
    for (int k = 0; k < unit_tiles(sched, r, cur.num_q_tiles); ++k) {
      const int64_t q0 = int64_t(unit_q_tile(r, k, cur.num_q_tiles)) * kBr;
      const KvTiles range = kv_tiles(q0, kBr, seq_q, seq_k, kBc, p.causal);
      n_tiles = int(range.visit);
      n_unmasked = int(range.unmasked);
      const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;
      const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;  // this thread's two rows
      last_key[0] = last_visible_key(row0, seq_q, seq_k, p.causal);
      last_key[1] = last_visible_key(row0 + 8, seq_q, seq_k, p.causal);
#pragma unroll
      for (int i = 0; i < Tl::kOAcc; ++i) o[i] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;

      if (n_tiles > 0) {  // a tile whose rows see no key has no Q and no turns (header)
        hopper::mbar_wait(q_full, q_loads & 1);
        turn(0, Yes{}, No{});  // S_0 only
        for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
        turn(n_tiles, No{}, Yes{});  // P_{n-1} V_{n-1} only
        ++q_loads;
        fill += uint64_t(n_tiles);
      }

      // varlen: rows 0 .. seq_q - 1 of this sequence in head h's slab of [heads, total_q] rows
      // (store_o_l skips the rows past seq_q, the next sequence's).
      const int64_t first_row = int64_t(h) * p.total_q + cur.q_start;
      store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + first_row * p.d, p.lse + first_row,
                      wg_row0, seq_q, t, p.d);
    }
  }
  // v5: the token consumer 1 handed over after the block's last turn (at the start, if none).
  if (consumer == 0) hopper::named_bar_sync(kTurnBar, kTurnThreads);
}

// ---- Host side: 09/hopper_v1_varlen's checks, t52's persistent grid.
constexpr const char* kName = "09/hopper_v6_varlen_heaviest_first";

// varlen: the units of the static schedule, summed over the sequences (v3's header, "Units"),
// and the order of the deal (header): bc is the kernel's K/V tile width.
Schedule make_schedule(const VarlenShape& s, int64_t bc) {
  int64_t units = 0;
  for (int64_t len : s.seqlens_q) {
    const int64_t tiles = ceil_div(len, int64_t(kBr));
    units += (s.causal ? (tiles + 1) / 2 : tiles) * s.heads;
  }
  // As v5: unit numbers stay below 2^31, so that the next round's (at most 2G past) cannot wrap
  // in 32 bits.
  FA_UNSUPPORTED_IF(units > INT_MAX, std::string(kName) + ": more than 2^31-1 work units");
  Schedule sched{};
  sched.units = uint32_t(units);
  sched.heads = uint32_t(s.heads);
  sched.group = uint32_t(s.heads / s.kv_heads());
  sched.pairs = s.causal;
  const std::vector<int> order = heaviest_first(s, kBr, bc);  // empty: more than kMaxOrdered
  sched.ordered = !order.empty();
  for (size_t pos = 0; pos < order.size(); ++pos) sched.order[pos] = uint16_t(order[pos]);
  return sched;
}

template <class T, int D>
void launch(const VarlenFwdArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = flash_varlen_fwd_v3_kernel<T, D>;
  constexpr int kSmemBytes = V5Smem<D>::kBytes;
  const VarlenShape& s = a.shape;
  const Schedule sched = make_schedule(s, kWideBc<D>);  // >= 1 unit: total_q > 0 and heads > 0
  const int sms = gpu_info().sm_count;
  FA_REQUIRE(sms > 0, std::string(kName) + ": the GPU reports no SMs");
  const unsigned blocks = sched.units < unsigned(sms) ? sched.units : unsigned(sms);
  set_smem_limit_once<kKernel, kSmemBytes>();
  // [heads][total][d]: a head's slab is the 07 map's [seq] axis; the packed offsets select rows.
  // d <= D: the boxes' columns past it arrive as zeros (head_dim_instance).
  const int d = int(s.head_dim);
  const CUtensorMap tm_q = make_tmap(a.q, s.heads, s.total_q(), d, kBr, a.dtype);
  CUtensorMap tm_k = tm_q, tm_v = tm_q;  // every K empty: no unit loads a K/V tile
  if (s.total_k() > 0) {
    tm_k = make_tmap(a.k, s.kv_heads(), s.total_k(), d, kWideBc<D>, a.dtype);
    tm_v = make_tmap(a.v, s.kv_heads(), s.total_k(), d, kWideBc<D>, a.dtype);
  }
  VarlenParams p;
  p.o = a.o;
  p.lse = a.lse;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.total_q = s.total_q();
  p.d = d;
  p.causal = s.causal;
  p.scale_log2 = s.sequence(0).softmax_scale() * 1.4426950408889634f;  // log2(e)
  kKernel<<<blocks, kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, p, sched);
  FA_CHECK_LAUNCH();
}

template <class T>
void dispatch_head_dim(const VarlenFwdArgs& a, cudaStream_t stream) {
  launch_head_dim_instance<kWith192, kWith96>(
      kName, a.shape.head_dim, [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
}

// 09/hopper_v1_varlen's refusals: a misaligned tensor is refused, not rerouted.
void varlen_fwd(const VarlenFwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  FA_REQUIRE(s.heads >= 0 && s.heads_kv >= 0, "negative head count");
  FA_REQUIRE(s.seqlens_k.size() == s.seqlens_q.size(), "seqlens_q and seqlens_k differ in length");
  for (size_t b = 0; b < s.seqlens_q.size(); ++b)
    FA_REQUIRE(s.seqlens_q[b] >= 0 && s.seqlens_k[b] >= 0, "negative sequence length");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(
      s.has_window(),
      std::string(kName) + ": no sliding window (09/hopper_v5_window_single_units takes one)");
  FA_REQUIRE(s.heads == 0 || s.heads % s.kv_heads() == 0, "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  if (s.batch() == 0 || s.heads == 0 || s.total_q() == 0) return;  // nothing to write
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr, "cu_seqlens on the device");
  // TMA's rules (hopper_attention.cuh, tma_can_load) and int32 box coordinates: a sequence's last
  // box starts below total and reaches at most 176 rows past it.
  FA_UNSUPPORTED_IF(!aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.o, 4),
                    std::string(kName) + ": TMA needs 16-byte aligned Q, K, V (O: 4 bytes)");
  FA_UNSUPPORTED_IF(
      s.total_q() >= INT_MAX - 512 || s.total_k() >= INT_MAX - 512 || s.heads >= INT_MAX,
      std::string(kName) + ": packed rows or heads past int32 TMA coordinates");
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(VarlenFwdKernel,
            {kName,
             varlen_fwd,
             "hopper_v3 with its units dealt heaviest first: the sequences in the order of "
             "their units' cost, each round of units dealt in alternating directions",
             {DType::F16, DType::BF16},
             {64, 96, 128, 192, 256},
             /*min_sm=*/90,
             /*gqa=*/true,
             /*window=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
