// 07/fp8_t31_d256_port: fp8_v2 (fp8/fp8_v2.cu) at D = 256, changed only where the registers
// force it. The first step of chapter 07's FP8 tuning appendix (fp8/tuning/README.md): fp8_v2 ->
// fp8_v3 on the main path is this step and the two after it, t32 and t33 (= fp8_v3).
// Status: verified on an H100 (the FP8 GPU tests, the long ones included, and the four
// sanitizers); speed in fp8/tuning/README.md.
//
// What changed vs fp8_v2 (each bullet is spelt out in fp8_v3's header, "What changed"):
//   * D = 256: Q and K rows are two 128-byte swizzle strips, two TMA boxes each; a V^T tile is
//     256 rows of 128 keys; S is 8 k32 steps on one accumulator.
//   * Registers: O is 128 a thread, so P V runs in two column halves on one fresh 64-register
//     tile, each folded into O before the next is issued, and S only after both folds. A
//     consumer's turn is PV_{j-1} lo, fold, PV_{j-1} hi, fold, S_j, softmax: in series.
//   * The turn token orders only the S wgmmas; P V is issued outside it, after a barrier of the
//     consumer's own 128 threads (the P buffers' barrier); the fold takes the alpha of the softmax
//     before, O = alpha_{j-1} O + (scale_v[j-1] / p_scale) PV_{j-1}.
//   * 2 ring stages of 32 KiB K and 32 KiB V^T (fp8_v2: 4 of 16 KiB): the same bytes in flight.
// Kept from fp8_v2 as they were: every consumer thread loads its turn's k_scale[j] and
// v_scale[j-1] from global memory at the start of the turn; the softmax multiplies each S element
// by its dequantising factor (the sign of the softmax scale in it) and store_p_e4m3 each P by
// p_scale; the fold is two instructions an element.
//
// Map of the kernel, tiles, barriers, ragged shapes and refusals: fp8_v3's header
// (fp8/fp8_v3.cu), which describes the finished kernel; "(header)" below points there.
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
constexpr int kTurnBar = 1;            // named barriers 1, 2: consumer 0's, 1's turn to issue S
constexpr int kTurnThreads = 2 * 128;  // the giver's arrive + the taker's sync
constexpr int kOwnBar = 3;             // named barriers 3, 4: consumer 0's, 1's own threads
constexpr int kD = 256;
constexpr int kBc = 128;  // keys per tile: also K's and V's quantisation block
constexpr int kStages = 2;
constexpr int kPBuffers = 2;        // per consumer: P_j in buffer j % 2 (header)
constexpr int kAcc = 64;            // one m64n128 accumulator: S, or one column half of P V
constexpr int kOAcc = kD / 2;       // O accumulators per thread (two halves of kAcc)
constexpr int kHalves = kD / 128;   // column halves of P V
constexpr int kKSteps = kD / 32;    // k32 steps of S = Q K^T: 4 in each 128-byte strip
constexpr int kPVSteps = kBc / 32;  // k32 steps of P V
constexpr int kStrips = kD / 128;   // 128-byte swizzle strips of a Q or K row
constexpr int kStripCols = 128;     // bytes (= e4m3 columns) of one strip

struct Fp8T31Smem {
  static constexpr int kQBytes = kBr * kD;                 // kStrips strips of [Br rows][128 B]
  static constexpr int kKBytes = kBc * kD;                 // kStrips strips of [Bc keys][128 B]
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
  static_assert(kBytes <= 232448, "fits the 227 KiB (232448 bytes) a block may opt in to");
};

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_fp8_t31_kernel(const __grid_constant__ CUtensorMap tm_q,
                             const __grid_constant__ CUtensorMap tm_k,
                             const __grid_constant__ CUtensorMap tm_vt, const Fp8Params p) {
  using Sm = Fp8T31Smem;
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
    // ---- Producer: gives its registers away, then one thread keeps the ring full. Q and a K
    // tile are two boxes each (strip s: bytes 128s .. 128s + 127 of every row, at s * rows * 128
    // in shared memory), a V^T tile one box of D rows x Bc keys. One expect_tx counts both boxes.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
      for (int st = 0; st < kStrips; ++st)
        hopper::tma_load_3d(sQ + st * kBr * kStripCols, &tm_q, q_full, st * kStripCols, int(q0),
                            int(bh));
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKBytes);
        for (int st = 0; st < kStrips; ++st)
          hopper::tma_load_3d(sK(s) + st * kBc * kStripCols, &tm_k, &full_k[s], st * kStripCols,
                              j * kBc, int(bh));
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
  // Its 64 rows of Q in strip 0; strip 1 is kBr * 128 bytes further (desc_k_major<kBr>).
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * kStripCols;
  unsigned char* sPc = smem + Sm::kPOffset + consumer * kPBuffers * Sm::kPBytes;  // its P buffers
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, p.seq_q, p.seq_k, p.causal),
                               last_visible_key(row0 + 8, p.seq_q, p.seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);
  // Q's scale block is this consumer's 64 rows (block wg_row0 / 64). A consumer whose rows all lie
  // past seq_q has no block (q_blocks ends before it): its Q rows are TMA's zeros, scale 1 serves.
  // The sign of the softmax scale rides in the same multiply (as fp8_v2).
  const float scale_q =
      wg_row0 < p.seq_q ? p.q_scale[bh * p.q_blocks + wg_row0 / kRowsPerWarpgroup] : 1.0f;
  const float signed_scale_q = p.scale_log2 < 0.0f ? -scale_q : scale_q;
  const float* k_scale = p.k_scale + bh * p.kv_blocks;
  const float* v_scale = p.v_scale + bh * p.kv_blocks;

  float o[kOAcc];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  // alpha_j = 2^(c m_{j-1} - c m_j) of the last softmax: O, still scaled to m_{j-1}, is rescaled
  // by it when PV_j is folded in, one turn later (0 after the first tile: O is 0 then).
  float alpha[2] = {0.0f, 0.0f};

  // P_j V_j in two column halves, then S_{j+1} (turn j + 1 of the header). kS: it has an S (the
  // tile exists), kPV: it has a P V; compile-time, so that no wgmma sits on a run-time branch
  // (ptxas would serialise them).
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    const int s = j % kStages, sp = (j + kStages - 1) % kStages;  // stages of tile j and j - 1
    unsigned char* sP_j = sPc + (j % kPBuffers) * Sm::kPBytes;    // written by this turn's softmax
    const unsigned char* sP_prev = sPc + ((j + kPBuffers - 1) % kPBuffers) * Sm::kPBytes;
    float acc[kAcc];  // PV_{j-1} lo, then PV_{j-1} hi, then S_j: one accumulator at a time
    // The scales of this turn, every thread loading the same floats from global memory at the
    // start of the turn, as fp8_v2: their latency hides under the waits below, when it can.
    const float v_factor = kPV ? v_scale[j - 1] * p.inv_p_scale : 0.0f;
    const float dequant = kS ? signed_scale_q * k_scale[j] : 0.0f;

    if constexpr (kPV) {
      // ---- O = alpha_{j-1} O + scale_v[j-1] / p_scale PV_{j-1}, half by half: O is still
      // scaled to m_{j-2}, P_{j-1} already to m_{j-1}. Every thread of this consumer stored and
      // fenced P_{j-1} (buffer (j - 1) % 2) in turn j - 1 before this barrier, and finished
      // P_{j-2} V_{j-2} there too (buffer j % 2 is free for P_j).
      hopper::named_bar_sync(kOwnBar + consumer, 128);
      hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        hopper::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kPVSteps; ++kk)
          wgmma_e4m3_m64n128k32(acc, desc_k_major<kRowsPerWarpgroup>(sP_prev, kk),
                                desc_k_major<kD>(sVt(sp) + h * 128 * kStripCols, kk), kk > 0);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_registers(acc);
        float* oh = o + h * kAcc;  // columns 128h .. 128h + 127: the same fragment layout
#pragma unroll
        for (int i = 0; i < kAcc; i += 4) {
          oh[i] = fmaf(oh[i], alpha[0], v_factor * acc[i]);
          oh[i + 1] = fmaf(oh[i + 1], alpha[0], v_factor * acc[i + 1]);
          oh[i + 2] = fmaf(oh[i + 2], alpha[1], v_factor * acc[i + 2]);
          oh[i + 3] = fmaf(oh[i + 3], alpha[1], v_factor * acc[i + 3]);
        }
      }
      hopper::mbar_arrive(&empty_v[sp]);  // done with V_{j-1}
    }

    if constexpr (kS) {
      // ---- S_j = Q K_j^T on one accumulator over D, in this consumer's turn: the S of the two
      // consumers alternate, and so do their softmaxes.
      hopper::mbar_wait(&full_k[s], (j / kStages) & 1);
      hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
      hopper::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        wgmma_e4m3_m64n128k32(acc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
                              kk > 0);
      hopper::wgmma_commit();
      // The other consumer may issue its S now (consumer 1 hands over nothing after its last).
      if (consumer == 0 || j + 1 < n_tiles)
        hopper::named_bar_arrive(kTurnBar + 1 - consumer, kTurnThreads);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(acc);
      hopper::mbar_arrive(&empty_k[s]);  // done with K_j
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] *= dequant;
      if (j >= n_unmasked) mask_tile(acc, int64_t(j) * kBc, last_key, q);
      online_softmax(acc, m, l, c, alpha);
      store_p_e4m3(acc, sP_j, p.p_scale, t);
      // The generic-proxy stores of P_j reach the async proxy (P_j V_j, next turn) through this
      // fence and the consumer barrier that starts the next turn.
      hopper::fence_proxy_async_smem();
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  hopper::mbar_wait(q_full, 0);
  // Consumer 0 issues the first S. Every bar.arrive meets exactly one bar.sync (v3's header): each
  // consumer syncs n_tiles times on its own turn barrier; consumer 1 arrives on consumer 0's once
  // here and after each S but its last, consumer 0 on consumer 1's after each S.
  if (consumer == 1 && n_tiles > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_tiles > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // PV_{n-1} only
  }

  store_o_l<__nv_bfloat16, kD>(o, m, l, c, static_cast<__nv_bfloat16*>(p.o) + bh * p.seq_q * kD,
                               p.lse + bh * p.seq_q, wg_row0, p.seq_q, t);
}

// ---- Host side ---------------------------------------------------------------------------------
constexpr const char* kName = "07/fp8_t31_d256_port";

void attention_fwd_fp8_t31(const AttentionFwdFp8Args& a, cudaStream_t stream) {
  Fp8Launch l;
  if (!prepare_fp8_launch(a, kName, kD, kBr, kRowsPerWarpgroup, kBc, l)) return;
  set_smem_limit_once<flash_fwd_fp8_t31_kernel, Fp8T31Smem::kBytes>();
  flash_fwd_fp8_t31_kernel<<<l.blocks, kThreads, Fp8T31Smem::kBytes, stream>>>(l.tm_q, l.tm_k,
                                                                               l.tm_vt, l.p);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(
    AttentionFwdFp8Kernel,
    {kName,
     attention_fwd_fp8_t31,
     "Hopper FP8 (e4m3) at D = 256, tuning step: fp8_v2 ported to D = 256 (P V in two column "
     "halves folded before S, S turns alternating), fp8_v2's scales and softmax",
     {256},
     90,
     kRowsPerWarpgroup,
     kBc});

}  // namespace fa::ch07
