// 09/hopper_v3_varlen_persistent: chapter 07's fastest forward (07/t52_wide_kv_tiles_persistent:
// v5's persistent blocks with FlashAttention-3's K/V tile widths and instances at D 96 and 192) on
// a variable-length batch. Read 07/t52 first (chapters/07_flash_hopper/tuning/
// t52_wide_kv_tiles_persistent.cu) and 07/v5 before it (sm90a/v5_persistent.cu): the producer,
// the ring carried across work tiles, the turns and the epilogue are theirs, unchanged. What
// changed is where a work unit's rows and keys come from: that is the whole diff against t52.
//
// What changed vs 07/t52, and why
//   One idea: the persistent schedule walks a packed batch. The batch is packed as
//   09/hopper_v1_varlen has it (VarlenShape, common/shapes.h): Q is [heads, total_q, D], K and V
//   [heads_kv, total_k, D], sequence b owns rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 of every
//   head's slab. 09/hopper_v1_varlen put the offset table in front of 07/v4's tile loop, one block
//   per (Q tile, head, sequence) with ceil(max_seq_q / Br) tiles for every sequence (blocks past a
//   sequence's end return at once). A persistent block cannot do that: its units must be numbered
//   without holes, or each block would walk through the empty ones.
//
//   Units. t52 numbers the units of one batch*head 0 .. units_per_head - 1 (a query tile, or a
//   causal pair), heads one after the other. Here every sequence has its own count, since its
//   length is its own: sequence b has ceil(seq_q(b) / Br) query tiles, per_head(b) units per head
//   (the tiles, or causal the (tiles + 1) / 2 pairs of t52), per_head(b) * heads units in all; the
//   batch's units are sequence 0's, then sequence 1's, ..., within a sequence t52's order (head by
//   head, each head's units in turn). The host sums the counts from the lengths it holds (the
//   schedule's `units`) and launches min(units, SMs) blocks; block b takes units b, b + G, ... as
//   in t52.
//
//   Finding a unit's sequence. A block's units only grow, so each thread keeps a cursor on the
//   sequence it is in (its first unit, one past its last, its offsets and lengths) and moves it
//   forward over cu_seqlens (device memory, as FlashAttention's varlen functions get it) until the
//   unit falls inside: each sequence is read once per block over the whole launch, a few cached
//   loads, whatever the number of units (a batch of B sequences: at most B steps a thread). The producer's thread and every consumer thread walk the
//   same units with the same cursor, so both sides agree on every unit's tiles, which t52's ring
//   counts (fill, q_loads) need. FlashAttention-3 finds the sequence the same way in principle,
//   with a warp reading 31 lengths at a time and a prefix sum over them (its varlen tile
//   scheduler, hopper/tile_scheduler.hpp, github.com/Dao-AILab/flash-attention).
//
//   Inside a unit it is t52 on a problem of seq_q x seq_k whose row 0 lies at the sequence's
//   offset: the TMA row coordinate is the offset plus the tile's first row, the epilogue's base
//   the sequence's first row of this head's slab. A box that runs past the end of one sequence
//   reads the next sequence's rows, not zeros; 09/hopper_v1_varlen's header says why each place
//   that reads them stays correct (keys past seq_k fall in the masked tiles, their V rows meet P =
//   0, extra Q rows are never stored, store_o_l writes rows 0 .. seq_q - 1 only). A sequence
//   without keys visits no tile (t52's work tile with visit = 0: no Q, no turns, O = 0 and
//   L = -inf); one without queries has no unit.
//
//   Balance. Dealt out statically as in t52, consecutive units go to consecutive blocks, so each
//   block gets about the same number of every sequence's units, long and short. Unlike t52's, the
//   units are not all alike: where a round of G units straddles a long and a short sequence, some
//   blocks draw the long ones, and that adds up over the rounds. A list-scheduling model of 15
//   uneven sequences of 260-4456 tokens (132 SMs) puts the busiest block 7% (full) and 13%
//   (causal) above the average; a dynamic deal, tried after this rung, did not measure faster
//   (chapter README).
//
// Prediction (bf16, fa_bench's batches: 14 sequences of 0 to 4096 tokens, or 14 of 1170, 16384
// tokens in all, against 09/hopper_v1_varlen in the same run): t52's gain over v4 on fixed
// lengths (1.03-1.10x at D 128) plus the boundaries of the short sequences' blocks, which v4 pays
// once per query tile (a sequence of 129 tokens is two blocks of 2 and 1 key tiles):
// 1.05-1.20x, the most causal and at D 64, the least full at D 256; at D 192 and 96 more (t52's
// instances take 112 and 176 keys a tile where v1_varlen's take 64 and 128).
// Measured (NVIDIA H100 80GB HBM3, 2026-12-06, notes/measured/h100-2026-12-06/varlen_v3_bench.log
// and varlen_v3_long_batch.log): 1.02-1.25x hopper_v1_varlen on those batches at D 64-256, and
// 1.02-1.14x on fa_bench's long batch (15 uneven sequences of 260-4456 tokens) at D 64, 96, 192,
// 256; at D 128 on that batch within about 5% either way, by harness (chapter README, "The steps
// as diffs"); three later rounds at D 128 (varlen_d128_rounds.md): 1.08-1.16x on the mixed and
// square batches, 0.96x (full) and 0.99x (causal) on the long one. The dispatch's packed forward on
// Hopper up to D 96 (from D 104 the next rung, hopper_v6_varlen_heaviest_first.cu).
//
// Map of the kernel (as 07/t52)
//   grid        min(work units, SMs) blocks, one per SM
//   work unit   one query tile (Br = 128 rows) of one head of one sequence; causal: a pair
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

// varlen: the static schedule over the packed batch. Sequence after sequence; within one, t52's
// units of a head (a query tile, or causal the pair of the longest and the shortest left), head
// after head. Block b takes units b, b + G, ... (header, "Units").
struct Schedule {
  uint32_t units;  // per_head(b) * heads summed over the sequences, < 2^31 (the launch checks)
  uint32_t heads;  // query heads
  uint32_t group;  // query heads per K/V head: head h reads K/V head h / group
  bool pairs;      // causal: unit r of a head is query tiles num_q_tiles - 1 - r and r
};

// varlen: the sequence a unit belongs to, and where its rows lie. A thread's units only grow, so
// seek moves the cursor forward, a sequence at a time, never back (header, "Finding a unit's
// sequence"). Starts before sequence 0 (end = 0).
struct SeqCursor {
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
    ++cur.b;
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
                               const Schedule sched) {
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
      for (uint32_t u = blockIdx.x; u < sched.units; u += gridDim.x) {
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
  for (uint32_t u = blockIdx.x; u < sched.units; u += gridDim.x) {  // v5: the block's work tiles
    seek(cur, u, sched, p);                                         // varlen
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
constexpr const char* kName = "09/hopper_v3_varlen_persistent";

// varlen: the units of the static schedule, summed over the sequences (header, "Units").
Schedule make_schedule(const VarlenShape& s) {
  int64_t units = 0;
  for (int64_t len : s.seqlens_q) {
    const int64_t tiles = ceil_div(len, int64_t(kBr));
    units += (s.causal ? (tiles + 1) / 2 : tiles) * s.heads;
  }
  // As v5: unit numbers stay below 2^31, so that u + gridDim.x cannot wrap in 32 bits.
  FA_UNSUPPORTED_IF(units > INT_MAX, std::string(kName) + ": more than 2^31-1 work units");
  Schedule sched;
  sched.units = uint32_t(units);
  sched.heads = uint32_t(s.heads);
  sched.group = uint32_t(s.heads / s.kv_heads());
  sched.pairs = s.causal;
  return sched;
}

template <class T, int D>
void launch(const VarlenFwdArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = flash_varlen_fwd_v3_kernel<T, D>;
  constexpr int kSmemBytes = V5Smem<D>::kBytes;
  const VarlenShape& s = a.shape;
  const Schedule sched = make_schedule(s);  // >= 1 unit: total_q > 0 and heads > 0
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
             "07/t52 on a packed variable-length batch: the persistent blocks walk the "
             "sequences' units (a cursor over cu_seqlens), TMA boxes at packed rows",
             {DType::F16, DType::BF16},
             {64, 96, 128, 192, 256},
             /*min_sm=*/90,
             /*gqa=*/true,
             /*window=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
