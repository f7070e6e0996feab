// 07/t68_half_last_key_tile (tuning step after 07/t60_v5_wide_o_stores): t60, whose consumers
// compute the last key tile of a causal work tile over half its keys where their rows see no more.
// Read v5 first (../sm90a/v5_persistent.cu), then t60's header; everything else is t60's.
//
// Why
//   Below 2048 causal keys at D 64 and 4096 at D 128 the dispatch's forward runs v5 and t60,
//   0.90-0.98x cuDNN (NVIDIA H200, 2026-12-07): v5 0.90x at D 64 N 512, 0.92x at 1024; t60 0.93x,
//   0.96x, 0.98x at D 128 N 512-2048. A causal work tile of 128 query rows on the diagonal walks
//   the key tile of its own 128 keys last, and consumer 0's 64 rows see only its first 64 keys:
//   the second half of its S, its exponentials and its P V are all masked. Counted in 64 x 64
//   blocks of S, a head at N 512 (four work tiles of 1-4 key tiles) computes 40 where 36 are
//   visible: a tenth of the work is thrown away, 5.6% at N 1024, 2.8% at 2048, 1.4% at 4096.
//
// The idea: a consumer whose last row's last visible key lies in the first half of the work
//   tile's last key tile computes that tile's S with a wgmma of N = Bc / 2 and its P V over the
//   first Bc / 2 keys (half the k16 slices). Its turns are the same in number and order; only the
//   last S and the last P V are narrower. The shapes of a turn stay compile-time (the turn takes
//   the key counts of its S and its P V instead of t60's yes/no), so a narrow work tile runs other
//   instances of the same turn code. The same test covers a non-causal row whose seq_k ends in
//   the first half of its last key tile (N 1000 at Bc 128: 1000 - 896 = 104 keys, not narrow;
//   N 960: 64 keys, narrow), and a causal work tile with seq_q != seq_k whose consumer 1 is the
//   narrow one.
//
// Prediction (bf16, B = 16384 / N, H = 2048 / D, causal, against t60 in processes of their own):
//   the strip count saves 10%, 5.6% and 2.8% at N 512, 1024, 2048; a narrow turn keeps the turn's
//   fixed costs (its barriers, the token, the wgmma waits), so about two thirds of it: 1.06-1.07x
//   at N 512, 1.03-1.04x at 1024, 1.02x at 2048, level from 4096. Full rows (N a multiple of 128)
//   never narrow: level.
//
// Measured (NVIDIA H100 80GB HBM3, 2026-12-08, bf16, each kernel an fa_bench process of its own,
//   the order rotated; notes/measured/h100-2026-12-08/): against t60, three rounds on the causal
//   rows up to 4096 keys, D 64 1.00x at N 512, 1.04x at 1024 to 4096; D 128 1.01x, 1.02x, 1.03x,
//   1.02x (fair_rounds_short_causal.md). Two rounds on every row (fair_rounds_t68.md): D 64
//   causal 1.02x, 1.07x, 1.03x, 1.04x at N 512-4096, 1.01x after; D 128 causal 0.985x, 1.01x,
//   1.04x, 1.06x and 1.07-1.08x at 8192 and 16384 (those two spread 1.02-1.14x by round); full
//   rows level to 1.035x. Against v5 at D 64 causal 1.01x, 1.07x, 1.05x at N 512-2048. At or
//   past the prediction at 1024 and 2048, short of it at 512. Under Nsight Compute (one launch, D 128
//   causal N 512) t68 issued 2.2% fewer instructions than t60 but took 127.4 us to t60's 120.5:
//   at N 512 the two are level at best.
//   Lesson: the first version wrote the middle turns' loop twice, once in each branch (8 inlined
//   turns where t60 has 3): 5104 SASS instructions at D 128 against t60's 2632. It measured 0.90x
//   t60 at causal N 512 (D 64 and 128) and 0.96x at 1024 (fair_rounds_fwd_d64.md,
//   fair_rounds_fwd_d128.md). Written as here, the loop once (6 turns, 3744 instructions), the
//   same arithmetic came out 1.00-1.07x: a turn inlines about 600 instructions, and the copies
//   cost more than the masked half saved (code_size.txt; the instruction cache is the likely
//   reason, not profiled). The dispatch runs t68 at D 64 on causal rows below 2048 keys and at
//   D 128 on causal rows from 1024 to 4095 keys (tuning/README.md, "What t67 and t68 say").
#include <cuda.h>

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "hopper_attention.cuh"
#include "ch07_launch.cuh"

namespace fa::ch07 {
namespace {

constexpr int kConsumers = 2;                           // warpgroups that compute
constexpr int kThreads = 128 * (1 + kConsumers);        // + the producer warpgroup
constexpr int kBr = kConsumers * kRowsPerWarpgroup;     // 128 query rows per block
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168
constexpr int kTurnBar = 1;            // named barriers 1, 2: consumer 0's, 1's turn
constexpr int kTurnThreads = 2 * 128;  // the giver's arrive + the taker's sync
template <int D>
constexpr int stages() {
  return D == 64 ? 4 : 2;
}

template <int D>
struct V5Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * D * 2;
  static constexpr int kKVBytes = Tiles<D>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (2 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
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
    flash_fwd_t68_kernel(const __grid_constant__ CUtensorMap tm_q,
                         const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_v, const Params p,
                         const Schedule sched) {
  using Tl = Tiles<D>;
  using Sm = V5Smem<D>;
  constexpr int kBc = Tl::kBc;
  constexpr int kHalf = kBc / 2;  // t68: the keys of a narrow last tile
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
      for (uint32_t u = blockIdx.x; u < sched.units; u += gridDim.x) {
        const int bh = int(u / sched.units_per_head), r = int(u % sched.units_per_head);
        const int kv_bh = int(uint32_t(bh) / sched.group);  // its K/V head (header, GQA)
        for (int k = 0; k < unit_tiles(sched, r, p.num_q_tiles); ++k) {
          const int64_t q0 = int64_t(unit_q_tile(r, k, p.num_q_tiles)) * kBr;
          const int n_tiles = int(kv_tiles(q0, kBr, p.seq_q, p.seq_k, kBc, p.causal).visit);
          if (n_tiles == 0) continue;  // no key for any row: no Q, no turns (header)
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

  // Turn j. t68: kSKeys, the keys of tile j its S covers (0: no S, j = n_tiles; kBc, or kHalf
  // for the last tile of a narrow work tile), kPVKeys the keys of tile j - 1 its P V covers (0: no
  // P V, j = 0); compile-time, so that no wgmma sits on a run-time branch (ptxas would serialise
  // them).
  auto turn = [&](int j, auto s_keys, auto pv_keys) {
    constexpr int kSKeys = decltype(s_keys)::value, kPVKeys = decltype(pv_keys)::value;
    constexpr bool kS = kSKeys > 0, kPV = kPVKeys > 0;
    // v5: stage and parity of tile j from the block's fill count, as the producer numbers them.
    const uint64_t f = fill + uint64_t(j);
    const int s = int(f % kStages), sp = int((f + kStages - 1) % kStages);  // tiles j and j - 1
    if constexpr (kS) hopper::mbar_wait(&full_k[s], uint32_t(f / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&full_v[sp], uint32_t((f - 1) / kStages) & 1);

    // ---- This consumer's turn: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, two commit groups.
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    float sc[kS ? kSKeys / 2 : 1];  // t68: S accumulators of the keys it covers
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopper::wgmma_ss<kSKeys, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
                                       kk > 0);
      hopper::wgmma_commit();  // the older group: S_j
    }
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < kPVKeys / 16; ++kk)  // t68: the k16 slices of the keys P covers
        hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D>(sV(sp), kk), 1);
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
      // t68: P of kSKeys keys fills the first kSKeys / 16 slices of pf, which the next turn's
      // P V reads (its kPVKeys is this turn's kSKeys).
      pack_p<T>(sc, *reinterpret_cast<uint32_t(*)[kSKeys / 16][4]>(pf));
    }
  };
  using None = std::integral_constant<int, 0>;  // t68: turn's key counts
  using Whole = std::integral_constant<int, kBc>;
  using Half = std::integral_constant<int, kHalf>;

  // v5: consumer 0 takes the block's first turn; from then on the token goes to the other
  // consumer after every turn, across work tiles, and consumer 0 takes the one left after the
  // block's last turn at the end. Every bar.arrive meets exactly one bar.sync (header).
  if (consumer == 1) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  for (uint32_t u = blockIdx.x; u < sched.units; u += gridDim.x) {  // v5: the block's work tiles
    const int bh = int(u / sched.units_per_head), r = int(u % sched.units_per_head);
    for (int k = 0; k < unit_tiles(sched, r, p.num_q_tiles); ++k) {
      const int64_t q0 = int64_t(unit_q_tile(r, k, p.num_q_tiles)) * kBr;
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

      // t68: narrow when no row of this consumer sees a key of the last tile's second half
      // (kv_tiles.h). The same for every thread of the warpgroup; read from lane 0, so that ptxas
      // knows it is warp-uniform (computed by each thread, the D 128 and 256 instances spilled 8
      // and 44 bytes).
      const bool narrow =
          __shfl_sync(0xffffffffu,
                      n_tiles > 0 && half_last_tile(wg_row0, kRowsPerWarpgroup, p.seq_q, p.seq_k,
                                                    kBc, p.causal, n_tiles),
                      0);

      if (n_tiles > 0) {  // a tile whose rows see no key has no Q and no turns (header)
        hopper::mbar_wait(q_full, q_loads & 1);
        // t68: the tiles whose S covers all kBc keys; a narrow work tile's last covers kHalf. The
        // loop over the middle tiles is written once, for both (each turn call inlines a copy).
        const int n_whole = narrow ? n_tiles - 1 : n_tiles;
        if (n_whole > 0) turn(0, Whole{}, None{});  // S_0 only
        for (int j = 1; j < n_whole; ++j) turn(j, Whole{}, Whole{});
        if (!narrow) {
          turn(n_tiles, None{}, Whole{});  // P_{n-1} V_{n-1} only
        } else {
          if (n_tiles == 1)
            turn(0, Half{}, None{});  // the one tile is the last
          else
            turn(n_tiles - 1, Half{}, Whole{});
          turn(n_tiles, None{}, Half{});
        }
        ++q_loads;
        fill += uint64_t(n_tiles);
      }

      // t60: 16 bytes a thread (store_o_l_16, hopper_attention.cuh); the launcher checked that O
      // is 16-byte aligned.
      store_o_l_16<T, D>(o, m, l, c, static_cast<T*>(p.o) + int64_t(bh) * p.seq_q * p.d,
                         p.lse + int64_t(bh) * p.seq_q, wg_row0, p.seq_q, t, p.d);
    }
  }
  // v5: the token consumer 1 handed over after the block's last turn (at the start, if none).
  if (consumer == 0) hopper::named_bar_sync(kTurnBar, kTurnThreads);
}

// ---- Host side: ch07_launch.cuh checks the arguments, picks T and D, and calls Launch<T, D>::run.
constexpr const char* kName = "07/t68_half_last_key_tile";

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

// v5: launch_fwd of ch07_launch.cuh with the persistent grid, min(units, SMs) blocks.
template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    constexpr auto kKernel = flash_fwd_t68_kernel<T, D>;
    constexpr int kSmemBytes = V5Smem<D>::kBytes;
    if (!aligned(a.o, 16)) return run_fallback(a, stream);  // t60: O in 16-byte stores (header)
    const AttentionShape& s = a.shape;
    const int num_q_tiles = int((s.seq_q + kBr - 1) / kBr);  // seq_q < 2^31 - 512 (tma_can_load)
    const Schedule sched = make_schedule(num_q_tiles, s.bh(), s.group(), s.causal);
    const int sms = gpu_info().sm_count;
    FA_REQUIRE(sms > 0, std::string(kName) + ": the GPU reports no SMs");
    const unsigned blocks = sched.units < unsigned(sms) ? sched.units : unsigned(sms);  // >= 1
    set_smem_limit_once<kKernel, kSmemBytes>();
    const int d = int(s.head_dim);  // <= D: the boxes' columns past it arrive as zeros
    const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, d, kBr, a.dtype);
    const int64_t kv_bh = s.batch * s.kv_heads();  // K and V: batch * heads_kv heads (GQA)
    const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, d, Tiles<D>::kBc, a.dtype);
    const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, d, Tiles<D>::kBc, a.dtype);
    kKernel<<<blocks, kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, make_params(a, num_q_tiles),
                                                      sched);
    FA_CHECK_LAUNCH();
  }
};

// Grouped heads on a shape TMA cannot load: the fallback (chapter 05's forward) takes no grouped
// heads. Without keys it reads no K or V, so it runs the shape as plain multi-head attention (O =
// 0, L = -inf); unaligned or oversized grouped inputs are refused rather than read wrongly.
void attention_fwd_t68(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.valid_heads(), std::string(kName) + ": heads must be a multiple of heads_kv");
  if (a.shape.is_gqa() && (!tma_can_load(a) || !aligned(a.o, 16))) {  // t60: O too
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
             attention_fwd_t68,
             "t60 whose consumers compute the last key tile of a work tile over its first half "
             "where their rows see no more (the causal diagonal)",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*gqa=*/true,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
