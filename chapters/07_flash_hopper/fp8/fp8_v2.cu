// 07/fp8_v2: the FP8 (e4m3) forward with chapter 07's fast structure: 07/v4_intra_overlap's
// producer, ring, ping-pong and intra-warpgroup overlap, with 07/fp8_v1's FP8 products (sm_90a:
// H100, H200). Read v4 (v4_intra_overlap.cu, and v2, v3 before it) for the structure and fp8_v1
// (fp8_v1.cu) for the FP8 pieces; this file is a copy of v4 with fp8_v1's products put in (the
// pieces both FP8 rungs use are in ch07_fp8_common.cuh).
//
// Why: with e4m3 wgmma at twice the bf16 rate (1979 against 989 dense TFLOP/s, H100 SXM), the
// exponentials take 126 / D of the matmul time instead of 63 / D (notes/07_flash_hopper.md, "What
// an FP8 rung takes"): at D = 128 the softmax is as long as both matmuls of a tile. fp8_v1 runs
// them in series in one warpgroup, so it reaches about v4's bf16 speed and no more. Here one
// consumer's softmax runs under the other's turn (v3) and under its own P V (v4).
//
// What changed vs 07/v4_intra_overlap
//   * Products: S = Q K^T and P V as wgmma ... .m64n128k32.f32.e4m3.e4m3 from shared memory (both
//     operands K-major: V comes transposed per head, V^T [D, keys], AttentionFwdFp8Args). Q, K and
//     V^T tiles are bytes: a row of D = 128 is one 128-byte swizzle row, one TMA box per tile (no
//     strips). Tiles are 16 KiB (half of bf16's), so the ring has 4 stages, as v4 has at D = 64
//     where the tiles are 16 KiB too: a turn is half as long as at bf16 D = 128 and twice as many
//     tiles must be in flight to cover the same TMA latency.
//   * S accumulates on ONE accumulator over all of D (four wgmmas, one commit group, as v4), not
//     one k32 step at a time as fp8_v1: fp8.h's rule now allows the FP8 tensor core's own
//     accumulation error in S (floor 1e-4 + 2^-10 of fp8_accumulator_bound). Measured on an H100
//     (2026-11-26): with outlier features and the rotation L is off by up to 0.056 at L near 85,
//     which passed fp8_v1's tests but not the earlier floor (2^-9 of the largest single product:
//     after the rotation the products are small and the partial sums large); fp8_v1 adds each
//     k32 step in fp32 and pays for it in waits. One commit group for S is what v4's wait_group 1 needs.
//   * S is dequantised by scale_q * scale_k[j] (times the sign of the softmax scale: negate_if
//     folded into the same multiply). Q's scale block is 64 rows (block_rows_q = 64), exactly one
//     consumer's rows, so each consumer reads its own scale_q once.
//   * P does not stay in registers: the FP8 A operand from registers wants four adjacent keys per
//     32-bit register, not the pairs the S accumulators hold (fp8_v1's header). The softmax of
//     S_j writes P_j = e4m3(P~ * p_scale) to shared memory (fp8_v1's store_p_e4m3, 128-byte
//     swizzled K-major), fences it for the async proxy, and the next turn's P_j V_j reads it
//     with a shared-memory descriptor.
//   * P buffers: two per consumer, alternating (P_j in buffer j % 2). In v4, P_{j-1} sits in
//     registers while P_{j-1} V_{j-1} is in flight and P_j may only replace it after wait_group 0.
//     Here the same holds for shared memory: P_{j-1} V_{j-1}, issued in turn j, still reads
//     buffer (j - 1) % 2 while the softmax of S_j runs. With one buffer, P_j could be stored only
//     after that wgmma completes, putting the quantisation and the 32 shared-memory stores per
//     thread behind the wait, on the critical path the overlap exists to shorten. With two, P_j
//     goes to the other buffer right after its exponentials. Buffer j % 2 was last read by
//     P_{j-2} V_{j-2}, issued in turn j - 1 and completed by every thread's wait_group 0 there,
//     before the turn barrier (bar.sync) that every thread of the consumer passes at the start
//     of turn j: no thread writes P_j before every warp's read of P_{j-2} is done. The writes
//     reach the wgmma of turn j + 1 through each thread's fence.proxy.async and the bar.sync that
//     starts turn j + 1 (all 128 threads of the consumer sync there before the wgmma is issued).
//     Cost: 2 x 2 x 8 KiB of shared memory, which is there (below).
//   * The V scale stays exact, as fp8_v1: P_{j-1} V_{j-1} accumulates on a fresh register tile
//     (scale-d = 0 on its first k32 step) and after wait_group 0 is folded into O in fp32:
//     O = alpha_j (O + scale_v[j-1] / p_scale PV_{j-1}) = alpha_j O + (alpha_j scale_v[j-1] /
//     p_scale) PV_{j-1}, one FMA and one multiply per element, which replaces v4's rescale of O
//     by alpha_j. This computes what fp8.cpp's naive forward does (each key block's P V times its
//     own V scale, in fp32), so the rule's semantics do not change. The two alternatives were
//     rejected: accumulating every tile's P V into O in place (v4's form) would keep V's scale
//     exact only by rescaling O by scale_v[j-1] / scale_v[j] between tiles, and would chain the
//     FP8 tensor core's accumulation (about 14 bits kept, DeepSeek-V3's report, section 3.3.2)
//     over all keys, 256 k32 steps at N = 8192, where fp8_v1 and DeepSeek-V3 promote to fp32
//     every 128; folding scale_v[j] into P_j before quantising (e4m3(P~ p_scale scale_v[j] /
//     ref)) would quantise P at other points than the naive forward (a factor that is not a
//     power of two moves every rounding, and may saturate at 448) and no longer measure the
//     kernel's arithmetic against the same quantisation.
//     The price is registers: while the softmax of S_j runs, S_j (64 fp32), PV_{j-1} (64, being
//     written by the wgmma in flight) and O (64) are all live, 192 against v4's 160 (S, P in
//     16 bits and O). ptxas (CUDA 13.0) fits it in the 240 of setmaxnreg without spills;
//     lowering kConsumerRegs shows it needs 217..224 (v4 at D = 128: 185..200).
//
// What changed vs 07/fp8_v1: everything structural is v4's (a producer warpgroup with TMA into a
// 4-stage ring with full / empty mbarriers per K and V^T slot, two consumer warpgroups of 64 rows
// each, Br = 128, taking turns through named barriers, S_j and P_{j-1} V_{j-1} as two commit
// groups); S on one accumulator; P in two buffers per consumer. Arithmetic per element is
// fp8_v1's: the same code products, scales, running-max P quantisation (e4m3(P~ * p_scale),
// P~ = exp(S - m) with the running max; the naive forward uses the final max: same format and
// scale, different rounding points, within the rule per tests/cpu/test_fp8.cpp's tiled model),
// l summed from fp32 P~, O folded as alpha O + scale_v / p_scale PV.
//
// Map of the kernel
//   block       3 warpgroups (384 threads): producer + 2 consumers of 64 rows; Br = 128
//   tiles       D = 128 only, Bc = 128: Q 128 x 128 B (consumer c's rows at c * 8 KiB), K
//               128 x 128 B, V^T 128 x 128 B, P 64 x 128 B: each tile row is one swizzle row
//   pipeline    4 K slots and 4 V^T slots, one full and one empty mbarrier each (v3's phases)
//   barriers    named barriers 1 and 2 (consumer 0's and 1's turn), 256 threads each (v3)
//   per turn j  S_j (4 x wgmma m64n128k32, chained) and PV_{j-1} (4 x m64n128k32 from P buffer
//               (j-1) % 2, fresh) as two commit groups; wait_group 1; S_j *= +-scale_q scale_k[j];
//               mask; online softmax; P_j -> e4m3 -> buffer j % 2; fence.proxy.async; wait_group
//               0; O = alpha_j O + alpha_j scale_v[j-1] / p_scale PV_{j-1}
//   smem        Q 16 KiB + 4 x (K 16 + V^T 16) KiB + 2 x 2 x P 8 KiB = 176 KiB, + barriers and
//               alignment (177.1 KiB)
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills
//   ragged      TMA zero-fills Q rows past seq_q, K rows and V^T columns past seq_k; keys past
//               seq_k are masked; O and L stores are predicated on the row; causal (bottom-right)
//               and rows with no visible key as v4 (O = 0, L = -inf). A consumer whose 64 rows all
//               lie past seq_q (the last q tile holds 64 rows or fewer) has no Q scale: it takes
//               its turns (the ping-pong needs both) on zeros with scale 1 and stores nothing.
//               seq_k = 0: no turn is taken (the maps are described with one key, never read).
//   refused     (UNSUPPORTED) another head dim, block sizes other than 64 / 128, grouped K/V heads,
//               a window, pointers TMA cannot take (16-byte alignment), sizes near 2^31.
//
// Prediction: well above fp8_v1's 580 TFLOP/s, well below the paper's ~1.2 PFLOP/s: about 800
// (N 8192, D 128, non-causal). Per tile and consumer the two products are 4 x 64 x 128 x 128 FLOPs,
// about 512 clocks of an SM's FP8 tensor cores, and the 8192 exponentials take 512 clocks of its
// MUFU (16 per clock): with the two consumers alternating, the tensor cores are busy only if each
// consumer's softmax fits under the other's turn. It does not quite: on top of v4's softmax this
// one has the dequantising multiply, the e4m3 conversion and 32 shared-memory stores of P, and an
// FMA plus a multiply per O element for the fold (v4: one multiply), about 8 instructions per S
// element issued by 4 schedulers, as long as the matmul by itself. v4 reaches ~62% of the bf16
// peak; with the softmax side now longer than the matmul, expect ~40% of the FP8 peak.
// Speed: measured in chapters/07_flash_hopper/README.md (H100 80GB HBM3, 2026-11-26, B 2, H 16,
// N 8192): 676.6 TFLOP/s full, 613.7 causal; fp8_v1 578.8 / 545.9 and the bf16 v4 666.1 / 617.6
// in the same call. 1.17x fp8_v1, level with bf16 v4, 34% of the FP8 peak: the prediction (~800)
// was high, and the rung is as slow as the softmax side it predicted would limit it.
#include <cuda.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "hopper_attention.cuh"
#include "ch07_fp8_common.cuh"
#include "fp8.h"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr int kConsumers = 2;                           // warpgroups that compute
constexpr int kThreads = 128 * (1 + kConsumers);        // + the producer warpgroup
constexpr int kBr = kConsumers * kRowsPerWarpgroup;     // 128 query rows per block
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168
constexpr int kTurnBar = 1;            // named barriers 1, 2: consumer 0's, 1's turn
constexpr int kTurnThreads = 2 * 128;  // the giver's arrive + the taker's sync
constexpr int kD = 128;
constexpr int kBc = 128;  // keys per tile: also K's and V's quantisation block
constexpr int kStages = 4;
constexpr int kPBuffers = 2;        // per consumer: P_j in buffer j % 2 (header)
constexpr int kSAcc = kBc / 2;      // S accumulators per thread (64 x 128 fp32 over 128 threads)
constexpr int kOAcc = kD / 2;       // O (and one tile's P V) accumulators per thread
constexpr int kKSteps = kD / 32;    // k32 steps of S = Q K^T
constexpr int kPVSteps = kBc / 32;  // k32 steps of P V

struct Fp8V2Smem {
  static constexpr int kQBytes = kBr * kD;                 // one byte per element, 128-byte rows
  static constexpr int kKBytes = kBc * kD;                 // K tile [Bc keys][D]
  static constexpr int kVtBytes = kD * kBc;                // V^T tile [D][Bc keys]
  static constexpr int kPBytes = kRowsPerWarpgroup * kBc;  // one consumer's P [64 rows][Bc keys]
  static constexpr int kKOffset = kQBytes;                 // K stage s at + s * kKBytes
  static constexpr int kVtOffset = kKOffset + kStages * kKBytes;  // V^T stage s at + s * kVtBytes
  // Consumer c's P buffer b at + (c * kPBuffers + b) * kPBytes.
  static constexpr int kPOffset = kVtOffset + kStages * kVtBytes;
  static constexpr int kBarOffset = kPOffset + kConsumers * kPBuffers * kPBytes;
  static constexpr int kBytes = kBarOffset + (1 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKBytes % kAtomBytes == 0 &&
                    kVtBytes % kAtomBytes == 0 && kPBytes % kAtomBytes == 0,
                "swizzle atoms stay 1024-byte aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_fp8_v2_kernel(const __grid_constant__ CUtensorMap tm_q,
                            const __grid_constant__ CUtensorMap tm_k,
                            const __grid_constant__ CUtensorMap tm_vt, const Fp8Params p) {
  using Sm = Fp8V2Smem;
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKBytes; };
  auto sVt = [&](int s) { return smem + Sm::kVtOffset + s * Sm::kVtBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* full_k = q_full + 1;          // per stage: the K tile has landed
  uint64_t* full_v = full_k + kStages;    // per stage: the V^T tile has landed
  uint64_t* empty_k = full_v + kStages;   // per stage: both consumers are done reading K
  uint64_t* empty_v = empty_k + kStages;  // per stage: both consumers are done reading V^T

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
    // ---- Producer: gives its registers away, then one thread keeps the ring full. Q is one box
    // of 128 rows x 128 bytes, K tile j one of Bc keys x 128 bytes, V^T tile j one of D rows x
    // Bc keys (bytes).
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
      hopper::tma_load_3d(sQ, &tm_q, q_full, 0, int(q0), int(bh));
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKBytes);
        hopper::tma_load_3d(sK(s), &tm_k, &full_k[s], 0, j * kBc, int(bh));
        if (use > 0) hopper::mbar_wait(&empty_v[s], (use - 1) & 1);  // freed a turn after K
        hopper::mbar_arrive_expect_tx(&full_v[s], Sm::kVtBytes);
        hopper::tma_load_3d(sVt(s), &tm_vt, &full_v[s], j * kBc, 0, int(bh));
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * 128;  // its 64 rows of Q
  unsigned char* sPc = smem + Sm::kPOffset + consumer * kPBuffers * Sm::kPBytes;  // its P buffers
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, p.seq_q, p.seq_k, p.causal),
                               last_visible_key(row0 + 8, p.seq_q, p.seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);
  // Q's scale block is this consumer's 64 rows (block wg_row0 / 64). A consumer whose rows all lie
  // past seq_q has no block (q_blocks ends before it): its Q rows are TMA's zeros, scale 1 serves.
  // The sign of the softmax scale rides in the same multiply (negate_if in v4).
  const float scale_q =
      wg_row0 < p.seq_q ? p.q_scale[bh * p.q_blocks + wg_row0 / kRowsPerWarpgroup] : 1.0f;
  const float signed_scale_q = p.scale_log2 < 0.0f ? -scale_q : scale_q;
  const float* k_scale = p.k_scale + bh * p.kv_blocks;
  const float* v_scale = p.v_scale + bh * p.kv_blocks;

  float o[kOAcc];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int n_turns = n_tiles > 0 ? n_tiles + 1 : 0;

  // Turn j. kS: it has an S (j < n_tiles), kPV: it has a P V (j > 0); compile-time, so that no
  // wgmma sits on a run-time branch (ptxas would serialise them).
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    const int s = j % kStages, sp = (j + kStages - 1) % kStages;  // stages of tile j and j - 1
    unsigned char* sP_j = sPc + (j % kPBuffers) * Sm::kPBytes;    // written by this turn's softmax
    const unsigned char* sP_prev = sPc + ((j + kPBuffers - 1) % kPBuffers) * Sm::kPBytes;
    // The scales of this turn, loaded before the waits so that their latency hides there.
    const float dequant = kS ? signed_scale_q * k_scale[j] : 0.0f;
    const float v_factor = kPV ? v_scale[j - 1] * p.inv_p_scale : 0.0f;
    if constexpr (kS) hopper::mbar_wait(&full_k[s], (j / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);

    // ---- This consumer's turn: S_j = Q K_j^T (one accumulator over D), then PV_{j-1} =
    // P_{j-1} V_{j-1} on a fresh tile, two commit groups. Every thread of this consumer has
    // passed the bar.sync below only when all of them finished turn j - 1: P_{j-1} is written
    // and fenced by all, and P_{j-2} V_{j-2} (the last reader of buffer j % 2) is complete.
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    float sc[kSAcc];
    float pv[kOAcc];
    hopper::wgmma_fence();
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        wgmma_e4m3_m64n128k32(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk), kk > 0);
      hopper::wgmma_commit();  // the older group: S_j
    }
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk)
        wgmma_e4m3_m64n128k32(pv, desc_k_major<kRowsPerWarpgroup>(sP_prev, kk),
                              desc_k_major<kD>(sVt(sp), kk), kk > 0);
      hopper::wgmma_commit();  // the newer group: PV_{j-1}
    }
    // ---- The other consumer's turn may start now (consumer 1 hands over nothing after its last).
    if (consumer == 0 || j + 1 < n_turns)
      hopper::named_bar_arrive(kTurnBar + 1 - consumer, kTurnThreads);

    // ---- Softmax of S_j as soon as S_j is done, while PV_{j-1} still runs: it touches neither
    // O, pv nor buffer (j - 1) % 2. P_j goes to the other buffer.
    float alpha[2] = {1.0f, 1.0f};
    if constexpr (kS) {
      if constexpr (kPV)
        hopper::wgmma_wait<1>();  // all but the newest group done: S_j is
      else
        hopper::wgmma_wait<0>();
      hopper::fence_registers(sc);
      hopper::mbar_arrive(&empty_k[s]);  // done with K_j
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) sc[i] *= dequant;
      if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
      online_softmax(sc, m, l, c, alpha);
      store_p_e4m3(sc, sP_j, p.p_scale, t);
      // The generic-proxy stores of P_j reach the async proxy (the wgmma of turn j + 1) through
      // this fence and the bar.sync that starts turn j + 1.
      hopper::fence_proxy_async_smem();
    }
    if constexpr (kPV) {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(pv);
      hopper::mbar_arrive(&empty_v[sp]);  // done with V_{j-1}
      // ---- O = alpha_j (O + scale_v[j-1] / p_scale PV_{j-1}): the accumulator of row h carries
      // alpha[h] (1 on the last turn, which has no S). Turn 0 has no P V and O is still 0.
      const float f[2] = {alpha[0] * v_factor, alpha[1] * v_factor};
#pragma unroll
      for (int i = 0; i < kOAcc; i += 4) {
        o[i] = fmaf(o[i], alpha[0], f[0] * pv[i]);
        o[i + 1] = fmaf(o[i + 1], alpha[0], f[0] * pv[i + 1]);
        o[i + 2] = fmaf(o[i + 2], alpha[1], f[1] * pv[i + 2]);
        o[i + 3] = fmaf(o[i + 3], alpha[1], f[1] * pv[i + 3]);
      }
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  hopper::mbar_wait(q_full, 0);
  // Consumer 0 takes the first turn. Every bar.arrive meets exactly one bar.sync (v3's header).
  if (consumer == 1 && n_turns > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_turns > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // PV_{n-1} only
  }

  store_o_l<__nv_bfloat16, kD>(o, m, l, c, static_cast<__nv_bfloat16*>(p.o) + bh * p.seq_q * kD,
                               p.lse + bh * p.seq_q, wg_row0, p.seq_q, t);
}

// ---- Host side ---------------------------------------------------------------------------------
constexpr const char* kName = "07/fp8_v2";

void attention_fwd_fp8_v2(const AttentionFwdFp8Args& a, cudaStream_t stream) {
  Fp8Launch l;
  if (!prepare_fp8_launch(a, kName, kD, kBr, kRowsPerWarpgroup, kBc, l)) return;
  set_smem_limit_once<flash_fwd_fp8_v2_kernel, Fp8V2Smem::kBytes>();
  flash_fwd_fp8_v2_kernel<<<l.blocks, kThreads, Fp8V2Smem::kBytes, stream>>>(l.tm_q, l.tm_k,
                                                                             l.tm_vt, l.p);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(AttentionFwdFp8Kernel,
            {kName,
             attention_fwd_fp8_v2,
             "Hopper FP8 (e4m3): v4's producer, ping-pong and intra-warpgroup overlap with "
             "fp8_v1's e4m3 products; S on one accumulator over D, P through two shared-memory "
             "buffers per consumer, each tile's P V on a fresh accumulator",
             {128},
             90,
             kRowsPerWarpgroup,
             kBc});

}  // namespace fa::ch07
