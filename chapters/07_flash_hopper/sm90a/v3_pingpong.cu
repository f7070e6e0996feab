// 07/v3_pingpong: v2 with the two consumer warpgroups taking turns on the tensor cores, the
// FlashAttention-3 paper's "ping-pong" (inter-warpgroup overlap of softmax and GEMMs). Read v2
// first (v2_warp_specialized.cu); the producer, the tiles and the math are its own.
//
// What changed vs v2, and why it pays
//   The tensor cores idle whenever no warpgroup has a wgmma in flight, and on an H100 the softmax
//   is long enough for that to matter: dense 16-bit wgmma runs at ~989 TFLOP/s, the special-
//   function units (MUFU, which compute ex2) at ~3.9 TFLOP/s (FlashAttention-3 paper), i.e.
//   4096 FLOPs against 16 exponentials per clock per SM. Each (query, key) pair costs 4 D FLOPs of
//   matmul (S = Q K^T and P V) and one exponential, so the exponentials alone take 63 / D of the
//   matmul time: as long as the matmuls at D = 64, half of them at D = 128, a quarter at D = 256,
//   before the max, the sums, the rescale and the conversions on the FMA pipes.
//   In v2 nothing arranges for one consumer's softmax to meet the other's GEMMs. Both wait on the
//   same "full" barrier of the same K/V stage, so they tend to run in step: both issue S, both
//   wait, both exponentiate while the tensor cores idle, both issue P V. v3 makes the overlap a
//   schedule:
//   * one tensor-core turn per tile: turn j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} as one
//     batch (one commit group), then the warpgroup waits for it and runs the softmax of S_j
//     (which yields P_j for turn j + 1). A turn is a whole tile's worth of matmul, as long as or
//     longer than the softmax at D >= 64, so one warpgroup's softmax hides under the other's turn.
//     (Turns of S alone and P V alone would each be half as long as the softmax they must cover.)
//   * the turns alternate strictly, consumer 0, 1, 0, 1, ..., through two named barriers used as
//     a token: consumer c waits on barrier kTurnBar + c (bar.sync) before issuing its turn and
//     hands the token over with bar.arrive on the other's barrier right after the commit, without
//     waiting for its own wgmmas. Each barrier completes with 256 threads: 128 arriving (the
//     giver) + 128 syncing (the taker). Consumer 1 hands consumer 0 the first token.
//   * V_{j-1} is now read one turn after K_{j-1}, so the ring releases them separately: each
//     stage gets full/empty mbarriers for K and for V, and the producer refills a K slot a turn
//     before the V slot of the same tile is free. With one pair per stage (as v2), tile j + 2
//     could only be requested after both consumers' turn j + 1 and would arrive late for the next
//     turn: at kStages = 2 every turn would wait for a whole TMA round trip.
//
//   Deadlock freedom (the named barriers count arrivals, they cannot tell turns apart, so every
//   bar.arrive must meet exactly one bar.sync):
//   * both consumers iterate the block's K/V range (v2's kv_tiles with Br = 128), so both take
//     exactly n_tiles + 1 turns: turn 0 has no P V, turn n_tiles has no S. A consumer whose rows
//     see none of a tile's keys (causal diagonal, seq_q > seq_k, the ragged end) still takes the
//     turn on a fully masked tile; a block with n_tiles = 0 takes no turns and hands no token.
//   * consumer 0 syncs on barrier kTurnBar n_tiles + 1 times and consumer 1 arrives there once
//     before its first turn and after each turn but its last: n_tiles + 1 times. Consumer 1 syncs
//     on kTurnBar + 1 n_tiles + 1 times, matched by consumer 0's arrive after each of its turns.
//     A giver cannot arrive twice before the taker's sync: its next arrive comes after its own
//     next sync, which needs the taker's arrive, which comes after the taker's sync.
//   * the data waits (mbarriers) come before taking the token, and turn j needs only K_j and
//     V_{j-1}, whose slots were freed by both consumers in turns <= j - 1 (kStages >= 2): the
//     producer never waits on a turn that waits on it.
//
// Map of the kernel
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128 query rows, as v2
//   tiles       Bc as v1 (128 for D = 64, 128; 64 for D = 256)
//   pipeline    kStages K slots and kStages V slots (4 for D = 64, 2 for D = 128 and 256), one
//               full and one empty mbarrier each; phase parity (use / kStages) & 1; turn j needs
//               K_j and V_{j-1}
//   barriers    named barriers 1 (consumer 0's turn) and 2 (consumer 1's turn), 256 threads each
//   smem        as v2 (+ 2 x kStages mbarriers): D 64: 144 KiB, D 128: 160 KiB, D 256: 192 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills. During
//               a turn a consumer holds S_j (Bc / 2), P_{j-1} (Bc / 4) and O (D / 2) at once:
//               128 / 160 / 176 for D = 64 / 128 / 256 (hopper_attention.cuh's table; v2 never held
//               all three, its S is dead once P is packed). Lowering kConsumerRegs until ptxas
//               (CUDA 13.0) spills: D = 64 needs <= 168, D = 128 185..200, D = 256 217..224
//               (v2: <= 168, <= 184, 185..200)
//   not done    the softmax of a consumer still waits for its own P V (one commit group per
//               turn): v4 splits the turn so the softmax of S_j runs while P_{j-1} V_{j-1} does
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 628.4 TFLOP/s, FlashAttention-2 341.7
// (notes/measured/h100-2026-11-23c/sdpa_flush.log).
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
struct V3Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * D * 2;
  static constexpr int kKVBytes = Tiles<D>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_v3_kernel(const __grid_constant__ CUtensorMap tm_q,
                        const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const Params p) {
  using Tl = Tiles<D>;
  using Sm = V3Smem<D>;
  constexpr int kBc = Tl::kBc;
  FA_TL_INIT(threadIdx.x / 128);  // the timeline build's phase marks (ch07_timeline.cuh)
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
        FA_TL_START(tl_slot);
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        FA_TL_END(tl_slot, kProducerWait, j);
        hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(sK(s) + c * kBc * 128, &tm_k, &full_k[s], c * kSwizzleCols, j * kBc,
                              int(bh));
        FA_TL_START(tl_slot_v);
        if (use > 0) hopper::mbar_wait(&empty_v[s], (use - 1) & 1);  // freed a turn after K
        FA_TL_END(tl_slot_v, kProducerWait, j);
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
    FA_TL_START(tl_kv);
    if constexpr (kS) hopper::mbar_wait(&full_k[s], (j / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);
    FA_TL_END(tl_kv, kWaitKV, j);

    // ---- This consumer's turn: S_j = Q K_j^T and O += P_{j-1} V_{j-1}, one commit group.
    FA_TL_START(tl_turn);
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    FA_TL_END(tl_turn, kWaitTurn, j);
    float sc[Tl::kSAcc];
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    FA_TL_START(tl_gemm);
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
                                    kk > 0);
    }
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk)
        hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D>(sV(sp), kk), 1);
    }
    hopper::wgmma_commit();
    // ---- The other consumer's turn may start now (consumer 1 hands over nothing after its last).
    if (consumer == 0 || j + 1 < n_turns)
      hopper::named_bar_arrive(kTurnBar + 1 - consumer, kTurnThreads);
    hopper::wgmma_wait<0>();
    hopper::fence_registers(o);
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk) hopper::fence_registers(pf[kk]);
      hopper::mbar_arrive(&empty_v[sp]);  // done with V_{j-1}
    }
    FA_TL_END(tl_gemm, kQKPV, j);

    // ---- Softmax of S_j in registers, while the other consumer's turn runs: P_j for turn j + 1.
    if constexpr (kS) {
      FA_TL_START(tl_softmax);
      hopper::fence_registers(sc);
      hopper::mbar_arrive(&empty_k[s]);  // done with K_j
      negate_if(sc, p.scale_log2 < 0.0f);
      if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
      float alpha[2];
      online_softmax(sc, m, l, c, alpha);
      rescale(o, alpha);
      pack_p<T>(sc, pf);
      FA_TL_END(tl_softmax, kSoftmax, j);
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  FA_TL_START(tl_q);
  hopper::mbar_wait(q_full, 0);
  FA_TL_END(tl_q, kWaitQ, 0);
  // Consumer 0 takes the first turn. Every bar.arrive meets exactly one bar.sync (header).
  if (consumer == 1 && n_turns > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_turns > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // P_{n-1} V_{n-1} only
  }

  FA_TL_START(tl_epilogue);
  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + bh * p.seq_q * p.d, p.lse + bh * p.seq_q,
                  wg_row0, p.seq_q, t, p.d);
  FA_TL_END(tl_epilogue, kEpilogue, n_tiles);
}

// ---- Host side: ch07_launch.cuh checks the arguments, picks T and D, and calls Launch<T, D>::run.
constexpr const char* kName = "07/v3_pingpong";

template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    launch_fwd<flash_fwd_v3_kernel<T, D>, D, kBr, kThreads, V3Smem<D>::kBytes>(kName, a, stream);
  }
};

void attention_fwd_v3(const AttentionFwdArgs& a, cudaStream_t stream) {
  run_fwd_rung<Launch>(kName, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {kName,
             attention_fwd_v3,
             "v2 + ping-pong: the 2 consumer warpgroups alternate tensor-core turns (S_j and "
             "P_{j-1} V_{j-1}) through named barriers, one's softmax under the other's GEMMs; "
             "separate K and V full/empty mbarriers",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*gqa=*/false,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
