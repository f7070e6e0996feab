// 07/t67_wide_kv_dynamic_schedule (tuning step after 07/t56_wide_o_stores), at D 128 only: t56
// with t66's list schedule. Read v5 first (../sm90a/v5_persistent.cu, "Work order"), then t52's,
// t56's and t66's headers; everything else is t56's.
//
// Why
//   At D 128 the dispatch's forward is 0.93-1.00x cuDNN (NVIDIA H200, 2026-12-07): t56 (176-key
//   tiles) on full rows and causal rows from 4096 keys, t60 (128-key tiles) on shorter causal ones.
//   t56 deals v5's causal pairs statically, and with 176-key tiles a pair of 128-row query tiles
//   is not a constant amount of work: tile k walks ceil(128 (k + 1) / 176) key tiles, so the pairs
//   (n - 1 - r, r) differ by a key tile, and block b always takes the same rank when 132 is a
//   multiple of the units a head has. t66's model (the strips a block computes;
//   tests/cpu/test_ch07_tiles.cpp, ListScheduleOfWideKeyTilesAtD128) puts t56's busiest causal
//   block 9-15% past the average at N 512-2048 and 3% from 4096; the list schedule ends within
//   2.5% of it. On full rows the units are equal and
//   132 blocks take 2048 of them, 15.5 each: the busiest takes 16 either way.
//
// The idea: t66's, unchanged: units are single query tiles, numbered heaviest first in sections of
//   heads whose K and V fit half the L2; block b starts with unit b and its producer takes the
//   next number from a counter in global memory once it has issued a unit's last load, handing it
//   to the consumers through a two-slot ring in shared memory. The producer needs 32 registers
//   for it (24 spills); the two consumers take 232 each instead of 240.
//
// Prediction (bf16, B = 16384 / N, H = 2048 / D, against t56 in processes of their own; the
//   model): causal 1.14x at N 512, 1.09x at 1024, 1.07x at 2048, 1.03x from 4096; full level.
//   Against t60 on causal rows below 4096 (1.06-1.37x t56 there): level to 1.05x behind at 512 and
//   1024, where 128-key tiles waste less of a diagonal tile than 176-key ones.
//
// Measured (NVIDIA H100 80GB HBM3, 2026-12-08, bf16, three rounds, each kernel an fa_bench process
//   of its own, the order rotated; notes/measured/h100-2026-12-08/fair_rounds_fwd_d128.md):
//   against t56 causal 1.10x at N 512, level at 1024 and 2048 (0.99x, 1.00x), 0.97-0.98x at 4096
//   and 8192, 1.05x at 16384; full 0.93x at 512, 0.95x at 1024, 0.96x at 2048, 0.98-1.01x after.
//   Against t60, which the dispatch runs on causal rows below 4096 keys, 0.79x, 0.85x, 0.94x at
//   N 512-2048. Grouped heads (H 32, H_kv 32/8/4/1, N 4096 and 8192, two rounds) 0.95-1.01x t56
//   full, 0.98-1.03x causal. Against cuDNN in the same run 0.99x, 1.02x, 1.07x at causal N 4096,
//   8192, 16384. Only N 512 and 16384 came out as predicted; the model counts strips, and at
//   N 1024-8192 the static deal's busiest block is not what the time follows. On full rows,
//   where the model predicts nothing, every unit costs the counter's atomicAdd and a round trip
//   through the ring, which the shortest rows feel most. The dispatch keeps t56 and t60
//   (tuning/README.md, "What t67 and t68 say").
#include <cuda.h>

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "hopper_attention.cuh"
#include "ch07_launch.cuh"
#include "stream_buffer.h"

namespace fa::ch07 {
namespace {

constexpr int kConsumers = 2;                        // warpgroups that compute
constexpr int kThreads = 128 * (1 + kConsumers);     // + the producer warpgroup
constexpr int kBr = kConsumers * kRowsPerWarpgroup;  // 128 query rows per block
// t67: 32 + 2 x 232 = 496 <= 3 x 168. The producer's unit arithmetic (t66's unit_at) does not fit
// 24: there ptxas (CUDA 13.0) spills 16 bytes, at 32 none; the consumers give up 8 (no spills).
constexpr int kProducerRegs = 32, kConsumerRegs = 232;
constexpr int kTurnBar = 1;            // named barriers 1, 2: consumer 0's, 1's turn
constexpr int kTurnThreads = 2 * 128;  // the giver's arrive + the taker's sync
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
  // t67: + 2 x 2 barriers and 2 slots of the unit ring (t66's)
  static constexpr int kUnitOffset = kBarOffset + (2 + 4 * kStages + 4) * 8;
  static constexpr int kBytes = kUnitOffset + 2 * 4 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

// t67: t66's dynamic schedule. A unit is one query tile. They are numbered heaviest first inside
// sections of `section` heads (the last section may hold fewer): unit x of a section is rank
// x / width of head x % width, and rank k is query tile num_q_tiles - 1 - k causally (the
// longest row first), tile k otherwise (the last, ragged tile last). Block b starts with unit b;
// then its producer takes the next number from `counter` when it has issued its unit's last load,
// so that the next unit goes to whichever block frees first (header, "The idea").
struct Schedule {
  uint32_t units;        // num_q_tiles * batch * heads, < 2^31 (the launch checks)
  uint32_t num_q_tiles;  // per head
  uint32_t heads;        // batch * heads
  uint32_t section;      // heads per section: their K and V fit half the L2 (make_schedule)
  uint32_t group;        // query heads per K/V head: head bh reads K/V head bh / group
  uint32_t* counter;     // units handed out after each block's first, zero at launch; nullptr:
                         // no buffer could be had, and block b takes b, b + G, ... (v5's order)
};

// Which head and query tile unit x is. The order is bwd_v6's head-group order (head_group_place,
// kv_tiles.h, with `section` heads a group and the ranks as key tiles), here in 32 bits: in 64,
// ptxas (CUDA 13.0) spills 16 bytes of the producer's 32 registers.
__device__ __forceinline__ void unit_at(const Schedule& sched, bool causal, uint32_t x, int& bh,
                                        int& q_tile) {
  const uint32_t per_section = sched.section * sched.num_q_tiles;
  const uint32_t h0 = x / per_section * sched.section, y = x % per_section;
  const uint32_t width = min(sched.section, sched.heads - h0);  // the last section may be narrower
  const uint32_t k = y / width;                                 // the rank: 0 is the heaviest
  bh = int(h0 + y % width);
  q_tile = int(causal ? sched.num_q_tiles - 1 - k : k);
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_t67_kernel(const __grid_constant__ CUtensorMap tm_q,
                         const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_v, const Params p,
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
  uint64_t* q_empty = q_full + 1;           // v5: both consumers are done reading this tile's Q
  uint64_t* full_k = q_empty + 1;           // per stage: the K tile has landed
  uint64_t* full_v = full_k + kStages;      // per stage: the V tile has landed
  uint64_t* empty_k = full_v + kStages;     // per stage: both consumers are done reading K
  uint64_t* empty_v = empty_k + kStages;    // per stage: both consumers are done reading V
  uint64_t* unit_full = empty_v + kStages;  // t67: per slot: the producer wrote the next unit
  uint64_t* unit_empty = unit_full + 2;     // t67: per slot: every consumer thread has read it
  volatile uint32_t* unit_slot = reinterpret_cast<uint32_t*>(smem + Sm::kUnitOffset);

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
    for (int s = 0; s < 2; ++s) {
      hopper::mbar_init(&unit_full[s], 1);
      hopper::mbar_init(&unit_empty[s], 128 * kConsumers);
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
      uint32_t u = blockIdx.x;
      for (uint32_t n = 0;; ++n) {  // t67: the block's n-th unit, u
        // t67: hand u to the consumers through slot n % 2 (u >= units: no more), once they have
        // read what the slot held two units ago.
        if (n >= 2) hopper::mbar_wait(&unit_empty[n % 2], ((n - 2) / 2) & 1);
        unit_slot[n % 2] = u;
        hopper::mbar_arrive(&unit_full[n % 2]);  // releases the store to whoever waits on it
        if (u >= sched.units) break;
        int bh, q_tile;
        unit_at(sched, p.causal, u, bh, q_tile);
        const int kv_bh = int(uint32_t(bh) / sched.group);  // its K/V head (header, GQA)
        const int64_t q0 = int64_t(q_tile) * kBr;
        const int n_tiles = int(kv_tiles(q0, kBr, p.seq_q, p.seq_k, kBc, p.causal).visit);
        if (n_tiles > 0) {  // no key for any row: no Q, no turns (header)
          // v5: the previous Q is free once both consumers' last S of its tile is done.
          if (q_loads > 0) hopper::mbar_wait(q_empty, (q_loads - 1) & 1);
          ++q_loads;
          hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
          for (int c = 0; c < Tl::kStrips; ++c)
            hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0), bh);
#pragma unroll 1  // v5: unrolled, the loop's hoisted addresses spill the producer's 24 registers
          for (int j = 0; j < n_tiles; ++j, ++fill) {
            const int s = int(fill % kStages);
            const uint64_t use = fill / kStages;
            if (use > 0) hopper::mbar_wait(&empty_k[s], uint32_t(use - 1) & 1);  // both freed it
            hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKVBytes);
            for (int c = 0; c < Tl::kStrips; ++c)
              hopper::tma_load_3d(sK(s) + c * kBc * 128, &tm_k, &full_k[s], c * kSwizzleCols,
                                  j * kBc, kv_bh);
            if (use > 0) hopper::mbar_wait(&empty_v[s], uint32_t(use - 1) & 1);  // a turn after K
            hopper::mbar_arrive_expect_tx(&full_v[s], Sm::kKVBytes);
            for (int c = 0; c < Tl::kStrips; ++c)
              hopper::tma_load_3d(sV(s) + c * kBc * 128, &tm_v, &full_v[s], c * kSwizzleCols,
                                  j * kBc, kv_bh);
          }
        }
        // t67: the unit's loads are issued: take the next number.
        u = sched.counter != nullptr ? gridDim.x + atomicAdd(sched.counter, 1u) : u + gridDim.x;
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
  for (uint32_t n = 0;; ++n) {  // t67: the block's n-th unit, as the producer handed it over
    hopper::mbar_wait(&unit_full[n % 2], (n / 2) & 1);
    const uint32_t u = unit_slot[n % 2];
    hopper::mbar_arrive(&unit_empty[n % 2]);  // read: the slot may take unit n + 2
    if (u >= sched.units) break;
    int bh, q_tile;
    unit_at(sched, p.causal, u, bh, q_tile);
    {  // t67: the unit's one query tile (t56's loop over the tiles of a causal pair)
      const int64_t q0 = int64_t(q_tile) * kBr;
      const KvTiles range = kv_tiles(q0, kBr, p.seq_q, p.seq_k, kBc, p.causal);
      n_tiles = int(range.visit);
      n_unmasked = int(range.unmasked);
      const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;
      const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;  // this thread's two rows
      last_key[0] = last_visible_key(row0, p.seq_q, p.seq_k, p.causal);
      last_key[1] = last_visible_key(row0 + 8, p.seq_q, p.seq_k, p.causal);
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

      // t56: 16 bytes a thread (header, "The idea"; store_o_l_16 in hopper_attention.cuh)
      store_o_l_16<T, D>(o, m, l, c, static_cast<T*>(p.o) + int64_t(bh) * p.seq_q * p.d,
                         p.lse + int64_t(bh) * p.seq_q, wg_row0, p.seq_q, t, p.d);
    }
  }
  // v5: the token consumer 1 handed over after the block's last turn (at the start, if none).
  if (consumer == 0) hopper::named_bar_sync(kTurnBar, kTurnThreads);
}

// ---- Host side: ch07_launch.cuh checks the arguments, picks T and D, and calls Launch<T, D>::run.
constexpr const char* kName = "07/t67_wide_kv_dynamic_schedule";

// t67 (t66's): the units and their order (Schedule, above). A section holds the most heads, a
// power of two, whose K and V together fit half the L2, so that the blocks running at once, which
// work on one or two sections, read them from there (FlashAttention-3's
// DynamicPersistentTileScheduler sizes its sections of heads the same way, by the L2,
// hopper/tile_scheduler.hpp).
Schedule make_schedule(int num_q_tiles, const AttentionShape& s) {
  // As v4's grid: unit numbers stay below 2^31, so that gridDim.x + the counter cannot wrap in
  // 32 bits. Unreachable in practice: a unit has at least one row of Q (128 bytes or more), so
  // 2^31 units need 256 GiB of Q.
  FA_UNSUPPORTED_IF(int64_t(num_q_tiles) * s.bh() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 work units");
  const int64_t kv_head_bytes = 2 * s.seq_k * s.head_dim * 2;  // K and V, 2 bytes an element
  // The K and V that `heads` query heads read: `group` of them share one K/V head.
  auto kv_bytes = [&](int64_t heads) {
    return (heads + s.group() - 1) / s.group() * kv_head_bytes;
  };
  const int64_t budget = int64_t(gpu_info().l2_bytes) / 2;
  int64_t section = 1;
  while (2 * section <= s.bh() && kv_bytes(2 * section) <= budget) section *= 2;
  Schedule sched;
  sched.units = uint32_t(int64_t(num_q_tiles) * s.bh());
  sched.num_q_tiles = uint32_t(num_q_tiles);
  sched.heads = uint32_t(s.bh());
  sched.section = uint32_t(section);
  sched.group = uint32_t(s.group());  // <= heads < 2^31
  sched.counter = nullptr;
  return sched;
}

// v5: launch_fwd of ch07_launch.cuh with the persistent grid, min(units, SMs) blocks.
template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    if constexpr (D != 128) {  // t67: refused before (attention_fwd_t67); no kernel instantiated
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " + std::to_string(D));
    } else {
      run_d128(a, stream);
    }
  }
  static void run_d128(const AttentionFwdArgs& a, cudaStream_t stream) {
    constexpr auto kKernel = flash_fwd_t67_kernel<T, D>;
    constexpr int kSmemBytes = V5Smem<D>::kBytes;
    if (!aligned(a.o, 16)) return run_fallback(a, stream);  // t56: O in 16-byte stores (header)
    const AttentionShape& s = a.shape;
    const int num_q_tiles = int((s.seq_q + kBr - 1) / kBr);  // seq_q < 2^31 - 512 (tma_can_load)
    Schedule sched = make_schedule(num_q_tiles, s);
    // t67: the counter, zero at launch, in a stream-ordered buffer of its own (two calls on two
    // streams never share one); without it the blocks take v5's static order.
    StreamBuffer counter(sizeof(uint32_t), stream);
    if (counter.as<uint32_t>() != nullptr) {
      FA_CUDA_CHECK(cudaMemsetAsync(counter.as<uint32_t>(), 0, sizeof(uint32_t), stream));
      sched.counter = counter.as<uint32_t>();
    }
    const int sms = gpu_info().sm_count;
    FA_REQUIRE(sms > 0, std::string(kName) + ": the GPU reports no SMs");
    const unsigned blocks = sched.units < unsigned(sms) ? sched.units : unsigned(sms);  // >= 1
    set_smem_limit_once<kKernel, kSmemBytes>();
    const int d = int(s.head_dim);  // <= D: the boxes' columns past it arrive as zeros
    const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, d, kBr, a.dtype);
    const int64_t kv_bh = s.batch * s.kv_heads();  // K and V: batch * heads_kv heads (GQA)
    const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, d, kWideBc<D>, a.dtype);
    const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, d, kWideBc<D>, a.dtype);
    kKernel<<<blocks, kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, make_params(a, num_q_tiles),
                                                      sched);
    FA_CHECK_LAUNCH();
  }
};

// Grouped heads on a shape TMA cannot load: the fallback (chapter 05's forward) takes no grouped
// heads. Without keys it reads no K or V, so it runs the shape as plain multi-head attention (O =
// 0, L = -inf); unaligned or oversized grouped inputs are refused rather than read wrongly.
void attention_fwd_t67(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.valid_heads(), std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(a.shape.head_dim != 128,
                    std::string(kName) +
                        " is instantiated for head_dim 128 only: the head dim it was timed at "
                        "(header)");
  if (a.shape.is_gqa() && (!tma_can_load(a) || !aligned(a.o, 16))) {  // t56: O too
    FA_UNSUPPORTED_IF(a.shape.seq_k > 0,
                      std::string(kName) +
                          ": grouped K/V heads need inputs TMA can load and a 16-byte aligned O "
                          "(sizes below 2^31); its fallback takes no grouped heads");
    AttentionFwdArgs no_keys = a;
    no_keys.shape.heads_kv = 0;  // K and V are empty: no head of them is read
    return run_fwd_rung<Launch>(kName, no_keys, stream);
  }
  run_fwd_rung<Launch>(kName, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {kName,
             attention_fwd_t67,
             "t56 with the query tiles handed out heaviest first to whichever block frees first "
             "(t66's list schedule)",
             {DType::BF16, DType::F16},
             {128},
             90,
             /*gqa=*/true,
             /*decoding=*/false,
             /*rounds_head_dim=*/false});  // D 128 only

}  // namespace fa::ch07
