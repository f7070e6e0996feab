// 09/hopper_paged_prefill_persistent: chapter 07's fastest forward (07/t52_wide_kv_tiles_persistent:
// v5's persistent blocks with FlashAttention-3's K/V tile widths, instances at D 96 and 192,
// grouped K/V heads) over a paged KV cache. Read 07/t52 first (chapters/07_flash_hopper/tuning/
// t52_wide_kv_tiles_persistent.cu) and 09/hopper_paged_prefill (sm90a/hopper_paged_prefill.cu),
// which makes the same change to 07/v4: the producer, the ring carried across work units, the
// turns and the epilogue are t52's, unchanged; where a K/V tile comes from is
// hopper_paged_prefill's. That is the whole diff against t52.
//
// The problem is 09/hopper_paged_prefill's (shapes.h, PagedShape): sequence b brings seq_q new
// queries (Q, O [batch, heads, seq_q, d], as in chapter 07) and attends to its cache of
// seqlens_k[b] keys, causal bottom-right; key j of sequence b is row j % page_size of page
// block_table[b * max_pages + j / page_size] of the pools K, V [num_pages, heads_kv, page_size, d].
//
// What changed vs 07/t52, and why
//   One idea: the producer finds each K/V tile through the block table, as hopper_paged_prefill
//   does (its header says why each step is right; in short): the maps describe the pools as
//   [num_pages * heads_kv][page_size][d], a tile's Bc keys are cut into boxes that each lie in
//   one page, each box read and issued by its own lane of the producer's first warp (its table
//   entry too), a box past the sequence's last key takes that key's page, keys past seq_k are
//   masked as in 07 and consumer 0 zeroes the last tile's V rows past seq_k before its last P V.
//
//   What t52's tiles change in that. hopper_paged_prefill's tiles (128 or 64 keys) and the pages
//   are both powers of two, so its boxes can all be min(Bc, page_size) rows. t52's are not: 176
//   keys at D 96 and 128, 112 at D 192, 80 at D 256 (11, 7 and 5 times 16), and tile j starts at
//   key j Bc, which a page boundary may cut anywhere on a multiple of 16. A box must lie in one
//   page and in the tile, so boxes of one size would be 16 rows: 11 a strip at D 128, where
//   hopper_paged_prefill issues 1 or 2 at pages of 64 and 256, and 11 small TMA copies a strip
//   measured 0.94-0.96x hopper_paged_prefill there (H100, D 128). So two sizes, two maps per
//   tensor: big boxes of min(page_size, 64) rows (128 at D 64, whose tile stays 128) at the keys
//   that are multiples of that size, where such a box ends inside the tile, and boxes of 16 rows
//   for the rest. Lane u holds the tile's rows 16u .. 16u + 15: it issues the big box that starts
//   at them, or nothing if a big box another lane issues holds them, or their own 16-row box.
//   Every row is loaded once (the tile's bytes are what lane 0 announced), each box inside one
//   page. At D 128 a strip takes 5 boxes at pages of 64 and more, 11 at 16; at D 192 4 and 7;
//   at D 256 3 to 5, and 5 (notes/figures/fig_paged_boxes.svg draws both rules for four tiles).
//
//   Per unit: its sequence is bh / heads, its K/V head (bh % heads) / group within that
//   sequence's pages, and seqlens_k[b] read on the device gives kv_tiles its seq_k, for the
//   producer's loop and for the consumers' masks (the schedule does not depend on it: a unit is
//   t52's query tile or causal pair, so a sequence's units cost in proportion to its keys).
//   A sequence without keys has no K/V tile: its rows get O = 0 and L = -inf (t52's epilogue).
//
// Map of the kernel (as 07/t52)
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128; persistent
//   tiles       Bc = 128 (D 64), 176 (D 96, 128), 112 (D 192), 80 (D 256)
//   boxes       min(page_size, 64) rows (D 64: 128) where one fits in the tile, else 16 rows
//   pipeline    kStages K slots and kStages V slots (4 at D 64, else 2)
//   smem        as t52: D 128 208 KiB, D 256 224 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills
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
// paged: a K/V tile's TMA boxes (header): big boxes of min(page_size, kBigRows) rows where one
// fits in the tile, boxes of kSmallRows (two swizzle atoms, the smallest page) around them.
constexpr int kSmallRows = 16;
template <int Bc>
constexpr int kBigRows = Bc % 128 == 0 ? 128 : 64;
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

// 09/hopper_paged_prefill's parameters: t52's Params with seq_k replaced by the paged cache.
struct PagedParams {
  void* o;
  float* lse;
  const int32_t* block_table;  // [batch, max_pages]: key j of sequence b in page [b][j >> shift]
  const int32_t* seqlens_k;    // [batch]: keys per sequence, on the device
  int64_t seq_q;
  int64_t max_pages;  // the table's width
  int d;              // the real head dim, O's row length (D rounds it up)
  int heads, heads_kv;
  int page_shift;  // log2(page_size)
  int big_shift;   // log2(rows of a big box): min(page_size, kBigRows) (header)
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e); its absolute value is used (see negate_if)
};

// v5: the static schedule. Units of one batch*head are numbered 0 .. units_per_head - 1, heads
// one after the other (v4's block order); block b takes units b, b + G, ... A unit is one query
// tile, or (causal) the pair of the longest and the shortest left (header, "Work order").
struct Schedule {
  uint32_t units;           // units_per_head * batch * heads, < 2^31 (the launch checks)
  uint32_t units_per_head;  // num_q_tiles, or causal (num_q_tiles + 1) / 2
  uint32_t group;           // query heads per K/V head: head bh reads K/V head bh / group
  bool pairs;               // causal: unit r of a head is query tiles num_q_tiles - 1 - r and r
};

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
    flash_paged_fwd_persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                                      const __grid_constant__ CUtensorMap tm_k,
                                      const __grid_constant__ CUtensorMap tm_v,
                                      const __grid_constant__ CUtensorMap tm_k16,
                                      const __grid_constant__ CUtensorMap tm_v16,
                                      const PagedParams p, const Schedule sched) {
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
    // ---- Producer: gives its registers away, then one warp keeps the ring full (paged: lane 0
    // as t52's thread, every lane for a tile's boxes), across the work tiles of this block (v5).
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t < 32) {
      uint64_t fill = 0;     // v5: K/V stage fills of this block, over all its work tiles
      uint32_t q_loads = 0;  // v5: Q loads of this block
      const int in_page = (1 << p.page_shift) - 1;
      for (uint32_t u = blockIdx.x; u < sched.units; u += gridDim.x) {
        const int bh = int(u / sched.units_per_head), r = int(u % sched.units_per_head);
        const int b = bh / p.heads;                                  // paged: its sequence
        const int h_kv = int(uint32_t(bh % p.heads) / sched.group);  // its K/V head (GQA)
        const int seq_k = p.seqlens_k[b];                            // paged: its keys
        const int32_t* table = p.block_table + int64_t(b) * p.max_pages;
        // paged: tile j of K or V through the table (hopper_paged_prefill's load, boxes as the
        // header says): lane u holds the tile's rows 16u .. 16u + 15; it issues the big box that
        // starts there if one fits in the tile, nothing if such a box holds its rows, else a box
        // of its 16 rows. Each lane reads its box's table entry (a box starting past seq_k takes
        // the last key's page). Lane 0 announces the tile's bytes first.
        auto load_paged_tile = [&](unsigned char* slot, const CUtensorMap* tm_big,
                                   const CUtensorMap* tm_16, uint64_t* full, int j) {
          if (t == 0) hopper::mbar_arrive_expect_tx(full, Sm::kKVBytes);
          __syncwarp();
          const int row = t * kSmallRows, key = j * kBc + row;       // this lane's rows
          const int start = row - (key & ((1 << p.big_shift) - 1));  // its big box's first row
          const bool in_big = start >= 0 && start + (1 << p.big_shift) <= kBc;
          if (row < kBc && (!in_big || start == row)) {
            const int page = __ldg(table + (min(key, seq_k - 1) >> p.page_shift));
            for (int c = 0; c < Tl::kStrips; ++c)
              hopper::tma_load_3d(slot + c * kBc * 128 + row * 128, in_big ? tm_big : tm_16, full,
                                  c * kSwizzleCols, key & in_page, page * p.heads_kv + h_kv);
          }
        };
        for (int k = 0; k < unit_tiles(sched, r, p.num_q_tiles); ++k) {
          const int64_t q0 = int64_t(unit_q_tile(r, k, p.num_q_tiles)) * kBr;
          const int n_tiles = int(kv_tiles(q0, kBr, p.seq_q, seq_k, kBc, p.causal).visit);
          if (n_tiles == 0) continue;  // no key for any row: no Q, no turns (header)
          // v5: the previous Q is free once both consumers' last S of its tile is done.
          if (q_loads > 0) hopper::mbar_wait(q_empty, (q_loads - 1) & 1);
          ++q_loads;
          if (t == 0) {
            hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
            for (int c = 0; c < Tl::kStrips; ++c)
              hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0), bh);
          }
#pragma unroll 1  // v5: unrolled, the loop's hoisted addresses spill the producer's 24 registers
          for (int j = 0; j < n_tiles; ++j, ++fill) {
            const int s = int(fill % kStages);
            const uint64_t use = fill / kStages;
            if (use > 0) hopper::mbar_wait(&empty_k[s], uint32_t(use - 1) & 1);  // both freed it
            load_paged_tile(sK(s), &tm_k, &tm_k16, &full_k[s], j);
            if (use > 0) hopper::mbar_wait(&empty_v[s], uint32_t(use - 1) & 1);  // a turn after K
            load_paged_tile(sV(s), &tm_v, &tm_v16, &full_v[s], j);
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
  int seq_k = 0;  // paged: the unit's sequence's keys
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
    // paged: the last turn's V_{j-1} is the last tile; its rows past seq_k (unwritten rows of the
    // last page) become zeros, by consumer 0, before its turn (hopper_paged_prefill's header).
    if constexpr (!kS) {
      if (consumer == 0 && int64_t(j) * kBc > seq_k) {
        const int first = seq_k - (j - 1) * kBc;  // the tile's first row past seq_k
        // 16-byte chunk i of a strip is row i / 8 (the swizzle only permutes a row's chunks).
        for (int c = 0; c < Tl::kStrips; ++c)
          for (int i = first * 8 + t; i < kBc * 8; i += 128)
            *reinterpret_cast<uint4*>(sV(sp) + c * kBc * 128 + i * 16) = uint4{};
        hopper::fence_proxy_async_smem();  // for the wgmma's reads (the async proxy)
      }
    }

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
  for (uint32_t u = blockIdx.x; u < sched.units; u += gridDim.x) {  // v5: the block's work tiles
    const int bh = int(u / sched.units_per_head), r = int(u % sched.units_per_head);
    seq_k = p.seqlens_k[bh / p.heads];  // paged: its sequence's keys
    for (int k = 0; k < unit_tiles(sched, r, p.num_q_tiles); ++k) {
      const int64_t q0 = int64_t(unit_q_tile(r, k, p.num_q_tiles)) * kBr;
      const KvTiles range = kv_tiles(q0, kBr, p.seq_q, seq_k, kBc, p.causal);
      n_tiles = int(range.visit);
      n_unmasked = int(range.unmasked);
      const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;
      const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;  // this thread's two rows
      last_key[0] = last_visible_key(row0, p.seq_q, seq_k, p.causal);
      last_key[1] = last_visible_key(row0 + 8, p.seq_q, seq_k, p.causal);
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

      store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + int64_t(bh) * p.seq_q * p.d,
                      p.lse + int64_t(bh) * p.seq_q, wg_row0, p.seq_q, t, p.d);
    }
  }
  // v5: the token consumer 1 handed over after the block's last turn (at the start, if none).
  if (consumer == 0) hopper::named_bar_sync(kTurnBar, kTurnThreads);
}

// ---- Host side: t52's persistent grid, hopper_paged_prefill's maps and refusals.
constexpr const char* kName = "09/hopper_paged_prefill_persistent";
constexpr int kMinPage = kSmallRows;  // a page holds whole small boxes

int log2_of(int64_t x) {
  int s = 0;
  while ((int64_t(1) << s) < x) ++s;
  return s;
}

// v5: the units of the static schedule (header, "Work order").
Schedule make_schedule(int num_q_tiles, int64_t bh, int64_t group, bool causal) {
  const int per_head = causal ? (num_q_tiles + 1) / 2 : num_q_tiles;
  // As v4's grid: unit numbers (v4: block numbers) stay below 2^31, so that u + gridDim.x cannot
  // wrap in 32 bits. Unreachable in practice: a unit has at least one row of Q (128 bytes or
  // more), so 2^31 units need 256 GiB of Q.
  FA_UNSUPPORTED_IF(int64_t(per_head) * bh > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 work units");
  Schedule sched;
  sched.pairs = causal;
  sched.group = uint32_t(group);  // <= heads < 2^31
  sched.units_per_head = uint32_t(per_head);
  sched.units = uint32_t(int64_t(per_head) * bh);
  return sched;
}

// v5: the persistent grid, min(units, SMs) blocks.
template <class T, int D>
void launch(const PagedFwdArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = flash_paged_fwd_persistent_kernel<T, D>;
  constexpr int kSmemBytes = V5Smem<D>::kBytes;
  constexpr int kBc = kWideBc<D>;
  const PagedShape& s = a.shape;
  const int num_q_tiles = int(ceil_div(s.seq_q, kBr));  // seq_q < 2^31 - 512 (the refusals)
  const int64_t bh = s.batch() * s.heads;
  const Schedule sched = make_schedule(num_q_tiles, bh, s.heads / s.kv_heads(), s.causal);
  const int sms = gpu_info().sm_count;
  FA_REQUIRE(sms > 0, std::string(kName) + ": the GPU reports no SMs");
  const unsigned blocks = sched.units < unsigned(sms) ? sched.units : unsigned(sms);  // >= 1
  set_smem_limit_once<kKernel, kSmemBytes>();
  // Q as 07's [batch * heads][seq_q][d]; the pools as [num_pages * heads_kv][page_size][d], read
  // in big boxes and in boxes of 16 rows (header), a map each. d <= D: the boxes' columns past it
  // arrive as zeros.
  const int d = int(s.head_dim);
  const int big_rows = int(std::min<int64_t>(kBigRows<kBc>, s.page_size));
  const CUtensorMap tm_q = make_tmap(a.q, bh, s.seq_q, d, kBr, a.dtype);
  // no page: no sequence has a key, nothing reads K or V
  CUtensorMap tm_k = tm_q, tm_v = tm_q, tm_k16 = tm_q, tm_v16 = tm_q;
  if (s.num_pages > 0) {
    const int64_t pool_heads = s.num_pages * s.kv_heads();
    tm_k = make_tmap(a.k_pages, pool_heads, s.page_size, d, big_rows, a.dtype);
    tm_v = make_tmap(a.v_pages, pool_heads, s.page_size, d, big_rows, a.dtype);
    tm_k16 = make_tmap(a.k_pages, pool_heads, s.page_size, d, kSmallRows, a.dtype);
    tm_v16 = make_tmap(a.v_pages, pool_heads, s.page_size, d, kSmallRows, a.dtype);
  }
  PagedParams p;
  p.o = a.o;
  p.lse = a.lse;
  p.block_table = a.block_table;
  p.seqlens_k = a.seqlens_k;
  p.seq_q = s.seq_q;
  p.max_pages = s.max_pages;
  p.d = d;
  p.heads = int(s.heads);
  p.heads_kv = int(s.kv_heads());
  p.page_shift = log2_of(s.page_size);
  p.big_shift = log2_of(big_rows);
  p.num_q_tiles = num_q_tiles;
  p.causal = s.causal;
  p.scale_log2 = softmax_scale(s.scale, s.head_dim) * 1.4426950408889634f;  // log2(e)
  kKernel<<<blocks, kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_k16, tm_v16, p, sched);
  FA_CHECK_LAUNCH();
}

template <class T>
void dispatch_head_dim(const PagedFwdArgs& a, cudaStream_t stream) {
  launch_head_dim_instance<kWith192, kWith96>(
      kName, a.shape.head_dim, [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
}

// 09/hopper_paged_prefill's refusals: no fallback, a tensor TMA cannot describe is refused.
void paged_prefill(const PagedFwdArgs& a, cudaStream_t stream) {
  const PagedShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.heads >= 0 && s.heads_kv >= 0 && s.num_pages >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  if (s.seq_q == 0 || s.batch() == 0 || s.heads == 0) return;  // nothing to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0, "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(s.page_size < kMinPage || (s.page_size & (s.page_size - 1)) != 0,
                    std::string(kName) + ": page sizes are powers of two from " +
                        std::to_string(kMinPage) + " up, not " + std::to_string(s.page_size));
  FA_REQUIRE(s.max_pages * s.page_size >= s.max_seq_k(),
             "the block table is narrower than the longest sequence");
  FA_UNSUPPORTED_IF(
      !aligned(a.q, 16) || !aligned(a.k_pages, 16) || !aligned(a.v_pages, 16) || !aligned(a.o, 4),
      std::string(kName) + ": TMA needs 16-byte aligned Q and pools (O: 4 bytes)");
  // int32 TMA coordinates and key indices (a tile's last key is j Bc + Bc - 1).
  constexpr int64_t kMargin = 512;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kMargin || s.max_seq_k() > INT_MAX - kMargin ||
                        s.num_pages * s.kv_heads() > INT_MAX || s.batch() * s.heads > INT_MAX,
                    std::string(kName) +
                        ": lengths, pages x heads_kv and batch x heads must fit int32 TMA "
                        "coordinates");
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(PagedFwdKernel,
            {kName,
             paged_prefill,
             "07/t52 over a paged cache (chunked prefill, persistent, FlashAttention-3's K/V "
             "tiles): each K/V tile loaded as TMA boxes through the block table (min(page, 64) "
             "rows where one fits in the tile, 16 around them), the last tile's unwritten V rows "
             "zeroed, each sequence its own length, GQA",
             {DType::BF16, DType::F16},
             {64, 96, 128, 192, 256},
             {16, 64, 256},
             /*min_sm=*/90,
             /*gqa=*/true,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
