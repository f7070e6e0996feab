// 07/fp8_t32_scales_with_tiles: t31 with the K and V scales delivered by the producer, in shared
// memory beside their tiles. A step of chapter 07's FP8 tuning appendix (fp8/tuning/README.md).
// Status: verified on an H100 (the FP8 GPU tests, the long ones included, and the four
// sanitizers); speed in fp8/tuning/README.md.
//
// What changed vs t31: where a consumer gets k_scale[j] and v_scale[j-1]. In t31 every consumer
// thread loads the same 4 bytes from global memory in every turn, an L2 round trip of several
// hundred cycles; issued at the start of the turn, it still holds up the first use whenever the
// tiles are already in shared memory. Here the producer thread loads each scale before it waits
// for the stage to be free, stores it into the stage's slot with a plain st.shared, and only then
// arrives (expect_tx) on the stage's full barrier; a consumer reads the slot after its full wait.
// The arrive is a release at CTA scope and the wait an acquire (PTX ISA, mbarrier), so a consumer
// that saw the phase complete sees the store; a slot is rewritten only after the stage's empty
// barrier has all 256 arrivals. The same floats enter the same arithmetic: O and L are t31's,
// bit for bit.
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

struct Fp8T32Smem {
  static constexpr int kQBytes = kBr * kD;                 // kStrips strips of [Br rows][128 B]
  static constexpr int kKBytes = kBc * kD;                 // kStrips strips of [Bc keys][128 B]
  static constexpr int kVtBytes = kD * kBc;                // V^T tile [D][Bc keys]
  static constexpr int kPBytes = kRowsPerWarpgroup * kBc;  // one consumer's P [64 rows][Bc keys]
  static constexpr int kKOffset = kQBytes;                 // K stage s at + s * kKBytes
  static constexpr int kVtOffset = kKOffset + kStages * kKBytes;  // V^T stage s at + s * kVtBytes
  // Consumer c's P buffer b at + (c * kPBuffers + b) * kPBytes.
  static constexpr int kPOffset = kVtOffset + kStages * kVtBytes;
  static constexpr int kBarOffset = kPOffset + kConsumers * kPBuffers * kPBytes;
  // The producer's per-stage scale slots (floats): K's, then V's.
  static constexpr int kScaleOffset = kBarOffset + (1 + 4 * kStages) * 8;
  static constexpr int kBytes =
      kScaleOffset + (kStages + kStages) * int(sizeof(float)) + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKBytes % kAtomBytes == 0 &&
                    kVtBytes % kAtomBytes == 0 && kPBytes % kAtomBytes == 0,
                "swizzle atoms stay 1024-byte aligned");
  static_assert(kBytes <= 232448, "fits the 227 KiB (232448 bytes) a block may opt in to");
};

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_fp8_t32_kernel(const __grid_constant__ CUtensorMap tm_q,
                             const __grid_constant__ CUtensorMap tm_k,
                             const __grid_constant__ CUtensorMap tm_vt, const Fp8Params p) {
  using Sm = Fp8T32Smem;
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKBytes; };
  auto sVt = [&](int s) { return smem + Sm::kVtOffset + s * Sm::kVtBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  // Per stage: k_scale[j] of the K tile in it, v_scale[j] of the V^T tile (header).
  float* sKScale = reinterpret_cast<float*>(smem + Sm::kScaleOffset);
  float* sVScale = sKScale + kStages;
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
      const float* k_scale = p.k_scale + bh * p.kv_blocks;
      const float* v_scale = p.v_scale + bh * p.kv_blocks;
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        const float ks = k_scale[j];  // loaded before the wait: its latency hides there
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        sKScale[s] = ks;  // before the release arrive (header)
        hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKBytes);
        for (int st = 0; st < kStrips; ++st)
          hopper::tma_load_3d(sK(s) + st * kBc * kStripCols, &tm_k, &full_k[s], st * kStripCols,
                              j * kBc, int(bh));
        const float vs = v_scale[j];
        if (use > 0) hopper::mbar_wait(&empty_v[s], (use - 1) & 1);  // freed a turn after K
        sVScale[s] = vs;
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

    if constexpr (kPV) {
      // ---- O = alpha_{j-1} O + scale_v[j-1] / p_scale PV_{j-1}, half by half: O is still
      // scaled to m_{j-2}, P_{j-1} already to m_{j-1}. Every thread of this consumer stored and
      // fenced P_{j-1} (buffer (j - 1) % 2) in turn j - 1 before this barrier, and finished
      // P_{j-2} V_{j-2} there too (buffer j % 2 is free for P_j).
      hopper::named_bar_sync(kOwnBar + consumer, 128);
      hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);
      // v_scale[j-1], stored by the producer before the arrive this wait saw (header).
      const float v_factor = sVScale[sp] * p.inv_p_scale;
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
      const float dequant = signed_scale_q * sKScale[s];  // k_scale[j] (header)
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
constexpr const char* kName = "07/fp8_t32_scales_with_tiles";

void attention_fwd_fp8_t32(const AttentionFwdFp8Args& a, cudaStream_t stream) {
  Fp8Launch l;
  if (!prepare_fp8_launch(a, kName, kD, kBr, kRowsPerWarpgroup, kBc, l)) return;
  set_smem_limit_once<flash_fwd_fp8_t32_kernel, Fp8T32Smem::kBytes>();
  flash_fwd_fp8_t32_kernel<<<l.blocks, kThreads, Fp8T32Smem::kBytes, stream>>>(l.tm_q, l.tm_k,
                                                                               l.tm_vt, l.p);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(
    AttentionFwdFp8Kernel,
    {kName,
     attention_fwd_fp8_t32,
     "Hopper FP8 (e4m3) at D = 256, tuning step: t31 with the K and V scales delivered by the "
     "producer in shared memory beside their tiles",
     {256},
     90,
     kRowsPerWarpgroup,
     kBc});

}  // namespace fa::ch07
