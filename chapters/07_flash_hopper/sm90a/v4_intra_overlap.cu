// 07/v4_intra_overlap: v3 with the softmax of tile j overlapped with the last GEMM of the same
// warpgroup, the FlashAttention-3 paper's intra-warpgroup pipelining. Read v3 first
// (v3_pingpong.cu): producer, ring, turns and named barriers are its own; only the inside of a
// turn changed.
//
// What changed vs v3, and why it pays
//   A v3 turn issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} as one commit group and waits for
//   both before the softmax of S_j starts. The softmax needs only S_j: waiting for P V as well
//   puts the whole P V (half of the turn's matmul) on this warpgroup's critical path. The other
//   consumer's turn can fill the tensor cores meanwhile only if its softmax has finished, and on
//   an H100 the softmax is long (~989 TFLOP/s of 16-bit wgmma against ~3.9 TFLOP/s of MUFU ex2,
//   FlashAttention-3 paper: the exponentials alone take 63 / D of the matmul time, as long as the
//   matmuls at D = 64, half of them at D = 128). With the ping-pong alone, a warpgroup's cycle is
//   turn + softmax; when the softmax is longer than the other's turn (D = 64), the tensor cores
//   wait for it.
//   v4 commits S_j and P_{j-1} V_{j-1} as two groups, oldest first, and waits with
//   wgmma.wait_group 1 (every group but the newest is complete: S_j is) before the softmax. The
//   max, the exponentials and the row sums of tile j then run while P_{j-1} V_{j-1} is still on
//   the tensor cores; only what touches O or P waits for it (wait_group 0): the rescale of O by
//   alpha_j and the packing of P_j into the registers P_{j-1} held. Equivalently, the next
//   Q K^T is issued before the softmax of the current S, and each warpgroup keeps a GEMM in flight
//   across its own softmax: the paper's two-stage pipeline inside one warpgroup.
//   K_j is released to the producer as soon as S_j is done (wait_group 1), V_{j-1} after
//   wait_group 0.
//
//   Registers: while the softmax of S_j runs, S_j (fp32, Bc / 2), P_{j-1} (16-bit, Bc / 4, read
//   by the wgmma in flight) and O (D / 2, written by it) are all live, plus the softmax's
//   temporaries: 64 + 32 + 32 = 128 (D = 64), 64 + 32 + 64 = 160 (D = 128), 32 + 16 + 128 = 176
//   (D = 256). This is the paper's "second S": its S_next / S_cur pair, with S_cur already
//   packed to 16 bits (P), so the extra cost over v2's softmax is P_{j-1}, Bc / 4 registers, not
//   another Bc / 2. v3 already holds the same three during its turn, but not during its softmax.
//   ptxas (CUDA 13.0) fits every instantiation in the 240 of setmaxnreg without spills; lowering
//   kConsumerRegs shows what each needs: D = 64 <= 168, D = 128 185..200, D = 256 225..232 (v3:
//   <= 168, 185..200, 217..224), so D = 256 is within 8..15 registers of spilling.
//
//   Deadlock freedom and the turn count are v3's: the turns, the named barriers (ids 1 and 2,
//   256 threads each) and the mbarrier waits are unchanged; turn 0 (S only) and the last turn
//   (P V only) commit one group and wait with wait_group 0.
//
// Map of the kernel
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128, as v2 and v3
//   tiles       Bc as v1 (128 for D = 64, 128; 64 for D = 256)
//   pipeline    as v3: kStages K slots and kStages V slots (4 / 2 / 2 for D = 64 / 128 / 256)
//   barriers    named barriers 1 and 2 (consumer 0's and 1's turn), 256 threads each
//   smem        as v3: D 64: 144 KiB, D 128: 160 KiB, D 256: 192 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills
// Later rungs call this block instead of copying it: common/device/hopper_v4_block.cuh holds the
// same ring and consumers' turns as functions (Ring, consume), without the timeline marks, and
// chapter 09's Hopper forwards bring their own producer and mask to it.
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 592.7 TFLOP/s, FlashAttention-2 341.7
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
struct V4Smem {
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
    flash_fwd_v4_kernel(const __grid_constant__ CUtensorMap tm_q,
                        const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const Params p) {
  using Tl = Tiles<D>;
  using Sm = V4Smem<D>;
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

    // ---- This consumer's turn: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, two commit groups.
    FA_TL_START(tl_turn);
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    FA_TL_END(tl_turn, kWaitTurn, j);
    float sc[Tl::kSAcc];
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    FA_TL_START(tl_qk);
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
                                    kk > 0);
      hopper::wgmma_commit();  // the older group: S_j
    }
    FA_TL_START(tl_pv);
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk)
        hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D>(sV(sp), kk), 1);
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
      FA_TL_END(tl_qk, kQK, j);
      FA_TL_START(tl_softmax);
      hopper::mbar_arrive(&empty_k[s]);  // done with K_j
      negate_if(sc, p.scale_log2 < 0.0f);
      if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
      online_softmax(sc, m, l, c, alpha);
      hopper::fence_registers(sc);  // the exponentials are computed before the wait below
      FA_TL_END(tl_softmax, kSoftmax, j);
    }
    if constexpr (kPV) {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o);
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk) hopper::fence_registers(pf[kk]);
      hopper::mbar_arrive(&empty_v[sp]);  // done with V_{j-1}
      FA_TL_END(tl_pv, kPV, j - 1);
    }
    // ---- O now holds P_{j-1} V_{j-1}: rescale it for tile j, and P_j replaces P_{j-1}.
    if constexpr (kS) {
      FA_TL_START(tl_pack);
      rescale(o, alpha);
      pack_p<T>(sc, pf);
      FA_TL_END(tl_pack, kSoftmax, j);
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
constexpr const char* kName = "07/v4_intra_overlap";

template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    launch_fwd<flash_fwd_v4_kernel<T, D>, D, kBr, kThreads, V4Smem<D>::kBytes>(kName, a, stream);
  }
};

void attention_fwd_v4(const AttentionFwdArgs& a, cudaStream_t stream) {
  run_fwd_rung<Launch>(kName, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {kName,
             attention_fwd_v4,
             "v3 + intra-warpgroup overlap: S_j and P_{j-1} V_{j-1} in two commit groups, the "
             "softmax of S_j runs while P_{j-1} V_{j-1} is on the tensor cores",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*gqa=*/false,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
