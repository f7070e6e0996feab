// 07/t51_wide_kv_tiles (tuning step after 07/v4_intra_overlap): v4 with FlashAttention-3's
// K/V tile widths, Bc = 176 keys at D = 128 and 80 at D = 256 (64 stays at 128). Read v4 first
// (../sm90a/v4_intra_overlap.cu): everything but the width of a K/V tile is its own.
//
// What changed vs v4, and why it might pay
//   Per tile, a consumer's softmax does work that grows with Bc (the max, the exponentials and the
//   sums over Bc / 2 accumulators) and work that does not: the rescale of O (D / 2 multiplies), the
//   quad shuffles of the max, the turn's barriers and waits, the mbarrier arrivals. Measured in
//   v4's timeline (notes/07_flash_hopper.md, section 10) the softmax, not the tensor cores, sets
//   the pace, so the fixed part per key is what a wider tile can save: at D = 128, 176 keys a tile
//   spread it over 1.375x the keys; at D = 256, where the rescale of O is 128 multiplies against a
//   softmax of 32 exponentials, 80 keys spread it over 1.25x.
//   FlashAttention-3 (hopper/tile_size.h, github.com/Dao-AILab/flash-attention) takes 128 x 176 at
//   D = 128 without a mask (128 x 128 with one) and 128 x 80 at D = 256; this step takes the wide
//   tile for causal attention as well, and measures both.
//
//   Registers (per consumer thread, tiles only): D = 128: S 88 + O 64 + P 44 = 196 (v4: 160);
//   D = 256: S 40 + O 128 + P 20 = 188 (v4: 176). Shared memory: D = 128: Q 32 KiB + 2 stages of
//   K and V at 44 KiB = 208 KiB (v4: 160); D = 256: 64 + 2 x 2 x 40 = 224 KiB (v4: 192), at the
//   227 KiB limit, which is why FlashAttention-3 stops at 80 there. The wgmma of S takes N = 176
//   and N = 80 (hopper.cuh); P V's N stays D, its k16 slices number Bc / 16 (11 and 5).
//
// Map of the kernel
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128, as v4
//   tiles       Bc = 128 for D = 64, 176 for D = 128, 80 for D = 256
//   pipeline    as v4: kStages K slots and kStages V slots (4 / 2 / 2 for D = 64 / 128 / 256)
//   barriers    as v4
//   smem        D 64: 144 KiB, D 128: 208 KiB, D 256: 224 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills;
//               lowering kConsumerRegs shows D = 128 needs 225..232 and D = 256 233..240
// Speed (NVIDIA H200, 2026-12-03, bf16, medians of three rounds): D 128 N 8192 full 656.1 TFLOP/s
// (v4 554.8, v5 612.1, cuDNN 683.4); D 256 N 4096 full 711.7 (v4 611.8, cuDNN 740.6)
// (notes/measured/h200-2026-12-03/wide_kv_tiles_console.log; ../tuning/README.md).
#include <cuda.h>

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
struct V4Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * D * 2;
  static constexpr int kKVBytes = Tiles<D, kWideBc<D>>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_t51_kernel(const __grid_constant__ CUtensorMap tm_q,
                         const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_v, const Params p) {
  using Tl = Tiles<D, kWideBc<D>>;
  using Sm = V4Smem<D>;
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
  uint64_t* full_k = q_full + 1;          // per stage: the K tile has landed
  uint64_t* full_v = full_k + kStages;    // per stage: the V tile has landed
  uint64_t* empty_k = full_v + kStages;   // per stage: both consumers are done reading K
  uint64_t* empty_v = empty_k + kStages;  // per stage: both consumers are done reading V

  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128, q = t % 4;
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const KvTiles range = kv_tiles(q0, kBr, p.seq_q, p.seq_k, kBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  if (threadIdx.x == 0) {
    hopper::mbar_init(q_full, 1);
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
    // ---- Producer: gives its registers away, then one thread keeps the ring full.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
      for (int c = 0; c < Tl::kStrips; ++c)
        hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0), int(bh));
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(sK(s) + c * kBc * 128, &tm_k, &full_k[s], c * kSwizzleCols, j * kBc,
                              int(bh));
        if (use > 0) hopper::mbar_wait(&empty_v[s], (use - 1) & 1);  // freed a turn after K
        hopper::mbar_arrive_expect_tx(&full_v[s], Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(sV(s) + c * kBc * 128, &tm_v, &full_v[s], c * kSwizzleCols, j * kBc,
                              int(bh));
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute exactly as v1 on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * 128;  // its rows in each strip
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, p.seq_q, p.seq_k, p.causal),
                               last_visible_key(row0 + 8, p.seq_q, p.seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);

  float o[Tl::kOAcc];
#pragma unroll
  for (int i = 0; i < Tl::kOAcc; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  uint32_t pf[Tl::kPSlices][4];  // P_{j-1}: written by the softmax of turn j - 1, read in turn j
  const int n_turns = n_tiles > 0 ? n_tiles + 1 : 0;

  // Turn j. kS: it has an S (j < n_tiles), kPV: it has a P V (j > 0); compile-time, so that no
  // wgmma sits on a run-time branch (ptxas would serialise them).
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    const int s = j % kStages, sp = (j + kStages - 1) % kStages;  // stages of tile j and j - 1
    if constexpr (kS) hopper::mbar_wait(&full_k[s], (j / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);

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
      hopper::mbar_arrive(&empty_k[s]);  // done with K_j
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

  hopper::mbar_wait(q_full, 0);
  // Consumer 0 takes the first turn. Every bar.arrive meets exactly one bar.sync (header).
  if (consumer == 1 && n_turns > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_turns > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // P_{n-1} V_{n-1} only
  }

  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + bh * p.seq_q * p.d, p.lse + bh * p.seq_q,
                  wg_row0, p.seq_q, t, p.d);
}

// ---- Host side: ch07_launch.cuh checks the arguments, picks T and D, and calls Launch<T, D>::run.
constexpr const char* kName = "07/t51_wide_kv_tiles";

template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    launch_fwd<flash_fwd_t51_kernel<T, D>, D, kBr, kThreads, V4Smem<D>::kBytes, kWideBc<D>>(
        kName, a, stream);
  }
};

void attention_fwd_t51(const AttentionFwdArgs& a, cudaStream_t stream) {
  run_fwd_rung<Launch>(kName, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {kName,
             attention_fwd_t51,
             "v4 with FlashAttention-3's K/V tile widths: 176 keys at D 128, 80 at D 256",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*gqa=*/false,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
