// hopper_v4_block.cuh: chapter 07's final forward block, 07/v4_intra_overlap, as pieces a later
// rung calls instead of copying: the block's shape and register split, its shared-memory ring and
// mbarriers, and the consumers' turns (S_j = Q K_j^T and P_{j-1} V_{j-1} in two commit groups, the
// softmax of S_j under P_{j-1} V_{j-1}, two warpgroups taking turns on the tensor cores).
//
// Read them in 07/v4 first (chapters/07_flash_hopper/sm90a/v4_intra_overlap.cu): it carries its
// own copy, written out in its kernel, so that the rung reads top to bottom (and with chapter 07's
// timeline marks, which only chapter 07's timeline program records). What a later rung changes is
// where a block's rows and K/V tiles come from (its producer) and which keys of a tile it masks;
// so the producer and the mask are the caller's, and everything between them is here:
//   * chapter 09's Hopper forwards (09/hopper_v1_varlen, hopper_v2_window, hopper_paged_prefill,
//     hopper_paged_pack_gqa) are each this block plus one idea, and their files hold that idea.
// A caller that calls these pieces compiles to the machine code of the kernel it would write out
// (checked by comparing the cubins' kernel code, CUDA 13.0, when chapter 09 moved onto them).
#pragma once
#include <cstdint>
#include <type_traits>

#include "hopper.cuh"
#include "hopper_attention.cuh"
#include "mma.cuh"

namespace fa::ch07::v4 {

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

// Shared memory: Q (Br rows), kStages K slots, kStages V slots, then the mbarriers.
template <int D>
struct V4Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * Tiles<D>::kStrips * 128;  // whole strips (D 96: two)
  static constexpr int kKVBytes = Tiles<D>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

// The ring in the block's dynamic shared memory: where Q, the K and V slots and the barriers lie.
template <int D>
struct Ring {
  using Sm = V4Smem<D>;
  unsigned char* smem;  // smem_raw moved up to the next swizzle atom
  uint64_t* q_full;     // Q has landed
  uint64_t* full_k;     // per stage: the K tile has landed
  uint64_t* full_v;     // per stage: the V tile has landed
  uint64_t* empty_k;    // per stage: both consumers are done reading K
  uint64_t* empty_v;    // per stage: both consumers are done reading V

  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  __device__ __forceinline__ explicit Ring(unsigned char* smem_raw) {
    const uint32_t raw = mma::smem_addr(smem_raw);
    smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
    q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
    full_k = q_full + 1;
    full_v = full_k + Sm::kStages;
    empty_k = full_v + Sm::kStages;
    empty_v = empty_k + Sm::kStages;
  }
  __device__ __forceinline__ unsigned char* q() const { return smem; }
  __device__ __forceinline__ unsigned char* k(int s) const {
    return smem + Sm::kKOffset + s * Sm::kKVBytes;
  }
  __device__ __forceinline__ unsigned char* v(int s) const {
    return smem + Sm::kVOffset + s * Sm::kKVBytes;
  }

  // Thread 0 initialises the barriers; every thread of the block must call this, before any wait.
  __device__ __forceinline__ void init() const {
    if (threadIdx.x == 0) {
      hopper::mbar_init(q_full, 1);
      for (int s = 0; s < Sm::kStages; ++s) {
        hopper::mbar_init(&full_k[s], 1);  // the producer's expect_tx arrival
        hopper::mbar_init(&full_v[s], 1);
        hopper::mbar_init(&empty_k[s], 128 * kConsumers);  // every consumer thread, once per use
        hopper::mbar_init(&empty_v[s], 128 * kConsumers);
      }
      hopper::mbar_fence_init();
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them
  }
};

// A rung's hook that does nothing: the last turn of a rung with nothing to prepare in it.
struct NoLastTurn {
  __device__ __forceinline__ void operator()(int /*j*/, int /*sp*/) const {}
};

// One consumer warpgroup's turns over n_tiles K/V tiles: 07/v4's loop, from o = 0, m = -inf, l = 0
// to the accumulators the caller hands on to store_o_l. mask(sc, j) masks the scores of tile
// j where the tile needs it (the caller tests j: 07 against n_unmasked); last_turn(j, sp) runs at
// the start of the last turn (P V only, tile j - 1 in stage sp), before the turn barrier, for a
// rung that must prepare that tile's V slot. c = |scale_log2| (the caller's epilogue needs it too).
template <class T, int D, class Mask, class LastTurn = NoLastTurn>
__device__ __forceinline__ void consume(const Ring<D>& r, int consumer, int t, int n_tiles,
                                        float scale_log2, float c, float (&o)[D / 2], float (&m)[2],
                                        float (&l)[2], const Mask& mask,
                                        const LastTurn& last_turn = LastTurn{}) {
  using Tl = Tiles<D>;
  constexpr int kBc = Tl::kBc;
  constexpr int kStages = V4Smem<D>::kStages;
#pragma unroll
  for (int i = 0; i < Tl::kOAcc; ++i) o[i] = 0.0f;
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;
  const unsigned char* sQc = r.q() + consumer * kRowsPerWarpgroup * 128;  // its rows in each strip
  uint32_t pf[Tl::kPSlices][4];  // P_{j-1}: written by the softmax of turn j - 1, read in turn j
  const int n_turns = n_tiles > 0 ? n_tiles + 1 : 0;

  // Turn j. kS: it has an S (j < n_tiles), kPV: it has a P V (j > 0); compile-time, so that no
  // wgmma sits on a run-time branch (ptxas would serialise them).
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    const int s = j % kStages, sp = (j + kStages - 1) % kStages;  // stages of tile j and j - 1
    if constexpr (kS) hopper::mbar_wait(&r.full_k[s], (j / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&r.full_v[sp], ((j - 1) / kStages) & 1);
    if constexpr (!kS) last_turn(j, sp);

    // ---- This consumer's turn: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, two commit groups.
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    float sc[Tl::kSAcc];
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(r.k(s), kk),
                                    kk > 0);
      hopper::wgmma_commit();  // the older group: S_j
    }
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk)
        hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D>(r.v(sp), kk), 1);
      hopper::wgmma_commit();  // the newer group: P_{j-1} V_{j-1}
    }
    // ---- The other consumer's turn may start now (consumer 1 hands over nothing after its last).
    if (consumer == 0 || j + 1 < n_turns)
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
      hopper::mbar_arrive(&r.empty_k[s]);  // done with K_j
      negate_if(sc, scale_log2 < 0.0f);
      mask(sc, j);
      online_softmax(sc, m, l, c, alpha);
      hopper::fence_registers(sc);  // the exponentials are computed before the wait below
    }
    if constexpr (kPV) {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o);
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk) hopper::fence_registers(pf[kk]);
      hopper::mbar_arrive(&r.empty_v[sp]);  // done with V_{j-1}
    }
    // ---- O now holds P_{j-1} V_{j-1}: rescale it for tile j, and P_j replaces P_{j-1}.
    if constexpr (kS) {
      rescale(o, alpha);
      pack_p<T>(sc, pf);
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  hopper::mbar_wait(r.q_full, 0);
  // Consumer 0 takes the first turn. Every bar.arrive meets exactly one bar.sync (07/v3).
  if (consumer == 1 && n_turns > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_turns > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // P_{n-1} V_{n-1} only
  }
}

}  // namespace fa::ch07::v4
