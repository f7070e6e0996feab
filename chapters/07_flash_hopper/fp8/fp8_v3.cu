// 07/fp8_v3: the FP8 (e4m3) forward at D = 256 (sm_90a: H100, H200). A copy of 07/fp8_v2
// (fp8_v2.cu: read it first, and its header) with the head dim doubled and the register budget
// that follows from it. Three measured steps of the tuning appendix (tuning/README.md), in the
// order they were taken: t31 the port to D = 256 (tuning/fp8_t31_d256_port.cu), t32 the scales
// delivered with their tiles (tuning/fp8_t32_scales_with_tiles.cu), t33 the softmax's multiplies
// in the exponent's FFMA (this file, instruction for instruction). The bullets below say which.
//
// Why: fp8_v2 at D = 128 runs level with the bf16 v4 (~670 TFLOP/s on an H100) because there the
// softmax of a tile, 8192 exponentials on the MUFU (16 per clock per SM) plus ~8 instructions per
// S element, is as long as both FP8 matmuls of the tile. The matmuls grow with D, the softmax does
// not: at D = 256 one consumer's tile (64 rows x 128 keys) is 2 x 64 x 128 x 256 x 2 = 8.4 MFLOP,
// ~1024 clocks of an SM's FP8 tensor cores (~8192 FLOP per clock), against ~512 clocks of MUFU for
// its softmax. The other consumer's matmuls can now cover one consumer's softmax whole; this is
// where FlashAttention-3 reports its FP8 best (~1.2 PFLOP/s at D = 256: Shah et al.,
// "FlashAttention-3", 2024, the FP8 forward benchmark).
//
// What changed vs 07/fp8_v2
//   * [t31] D = 256, Bc = 128. A row of Q or K is 256 bytes, two 128-byte swizzle strips: Q and K come
//     in two TMA boxes each (columns 0..127 and 128..255, strip s at s * rows * 128 bytes, as the
//     bf16 rungs lay out D = 128), and desc_k_major's k32 step kk lies in strip kk / 4. A V^T tile
//     is 256 rows (d) of 128 keys, one box; P V's column half h reads rows 128h .. 128h + 127.
//     The host side (prepare_fp8_launch, make_tmap_u8) is fp8_v2's: its boxes are already 128
//     bytes wide and box_rows tall, so the maps of D = 256 need nothing new.
//   * [t31] Registers are THE problem. O is 64 x 256 fp32, 128 registers a thread; S_j is 64; a fresh
//     P V tile over all 256 columns would be another 128. fp8_v2's turn keeps S_j, PV_{j-1} and O
//     live together (64 + 64 + 64 at D = 128): here that would be 64 + 128 + 128 = 320, far over
//     the 240 a consumer gets. So P V is computed in two column halves (m64n128k32 on V^T rows
//     0..127, then 128..255), each on a fresh 64-register tile folded into its half of O before
//     the next is issued, and S_j is issued only after both folds: at any time one 64-register
//     accumulator is in flight next to O, 192 registers of tiles. A consumer's turn j is
//         PV_{j-1} lo -> wait -> fold lo, PV_{j-1} hi -> wait -> fold hi, S_j -> wait -> softmax
//     all in series. The overlap of a consumer's softmax with its own P V (fp8_v2's and v4's
//     intra-warpgroup overlap) is given up: it needs a second accumulator. What keeps the tensor
//     cores busy during one consumer's softmax is the other consumer's three batches (v3's
//     ping-pong, below), 1024 clocks of matmul against ~600 of softmax.
//     The alternative, Bc = 64 (S 32 registers), keeps fp8_v2's overlap but halves every wgmma's
//     N: m64n64k32 from shared memory reads as many operand bytes per FLOP as twice the work
//     would, close to the shared-memory bandwidth, and doubles the per-tile overhead (waits,
//     barriers, row statistics, scale loads) per FLOP.
//   * [t31] The turn token of v3 now orders only the S wgmmas: a consumer waits for its turn, issues
//     S_j, and hands the turn over; its P V halves are issued outside the token, whenever their
//     P is ready. So the S_j of the two consumers alternate, and with them the softmaxes: one
//     consumer's softmax runs while the other's P V halves and S run, and a consumer's short
//     folds leave the tensor cores to whatever the other has queued.
//   * [t31] The P buffers need a barrier of their own: in fp8_v2 the turn's bar.sync (all 128 threads
//     of a consumer, before its wgmmas) made every thread's P_{j-1} stores visible to P_{j-1}
//     V_{j-1}; here P V is issued before the turn's bar.sync, so a named barrier of the consumer's
//     128 threads (3 + consumer) comes first. Two buffers per consumer, alternating, as fp8_v2:
//     P_j (buffer j % 2) is written after the softmax of S_j in turn j; the last reader of that
//     buffer is P_{j-2} V_{j-2}, issued and waited (wait_group 0) by every warp in turn j - 1,
//     before the consumer barrier of turn j that every thread passes before it writes P_j.
//   * [t31] The fold moves: fp8_v2 folds PV_{j-1} after the softmax of S_j, O = alpha_j (O +
//     scale_v[j-1] / p_scale PV_{j-1}). Here PV_{j-1} is folded before S_j exists, so O (still
//     scaled to the max m_{j-2}) takes the alpha of the softmax before, and PV_{j-1}, whose P is
//     already scaled to m_{j-1}, none: O = alpha_{j-1} O + (scale_v[j-1] / p_scale) PV_{j-1}.
//     The sum is the same; alpha is carried one turn in two registers.
//   * [t33] The softmax's multiplies ride in the exponent's FFMA (online_softmax_fp8, in this file):
//     the row max is taken on the raw accumulators and dequantised once, and P' = 2^(S_raw (c
//     scale_q scale_k[j]) - c m + log2 p_scale) = P~ p_scale comes out of one FFMA + MUFU, where
//     fp8_v2 multiplies every S element by its scales and every P element by p_scale before the
//     e4m3 conversion: 128 FMULs a thread per tile fewer. l sums P' and is multiplied by 1 /
//     p_scale once, before the epilogue (p_scale = 256: exact); O's fold factor keeps its
//     1 / p_scale, as fp8_v2. The factor must be positive for the max to commute with it, so a
//     negative softmax scale flips the sign bits of Q's codes in shared memory once, at the start.
//   * [t31] Ring: 2 stages of K and V^T (32 KiB each at D = 256; fp8_v2 had 4 of 16 KiB). The bytes in
//     flight are the same, a turn is twice as long.
//   * [t32] The scales ride with their tiles. fp8_v2's consumers load k_scale[j] and v_scale[j-1] from
//     global memory in every turn (every thread the same 4 bytes, an L2 round trip of several
//     hundred cycles); issued before the waits, they still held up the first use whenever the
//     tiles were already in. Here the producer thread loads k_scale[j] (v_scale[j]) before it
//     waits for the stage to be free, stores it into the stage's slot in shared memory with a
//     plain st.shared, and only then arrives (expect_tx) on the stage's full barrier; consumers
//     read the slot after their full wait. The arrive of hopper.cuh's mbar_arrive_expect_tx has
//     no .sem qualifier, so it is a release at CTA scope, and mbar_wait's try_wait an acquire
//     (PTX ISA, mbarrier): a consumer that saw the phase complete sees the store. A slot is
//     rewritten only after its stage's empty barrier has all 256 arrivals, each made after that
//     thread's read. The same floats enter the same arithmetic.
//   * [t31] Accuracy: S still accumulates on one accumulator over all of D, now 8 k32 steps (fp8_v2:
//     4). The rule's floor, 2^-10 of fp8_accumulator_bound = |scale| max_i sum_d |Q_id| max_j
//     |K_jd| (common/fp8.h), is a sum over D as well: it doubles with D as the chain of partial
//     sums does, so the ratio of the error allowed to the error made is what it is at D = 128.
//     P V is as fp8_v2's (a fresh tile per key tile and column half, 4 k32 steps, folded in fp32
//     with its own V scale): the naive forward's semantics.
//
// Map of the kernel
//   block       3 warpgroups (384 threads): producer + 2 consumers of 64 rows; Br = 128
//   tiles       D = 256, Bc = 128: Q 2 strips x 128 rows x 128 B (consumer c's rows at c * 8 KiB in
//               each strip), K 2 strips x 128 keys x 128 B, V^T 256 rows x 128 B, P 64 x 128 B
//   pipeline    2 K slots and 2 V^T slots, one full and one empty mbarrier each (v3's phases)
//   barriers    named barriers 1 and 2: consumer 0's and 1's turn to issue S (256 threads each);
//               3 and 4: consumer 0's and 1's own 128 threads, before a P V reads P
//   per turn j  [j > 0] bar.sync(own); PV_{j-1} lo (4 x m64n128k32, fresh) -> wait 0 -> fold
//               O[:, 0:128]; PV_{j-1} hi -> wait 0 -> fold O[:, 128:256] (O = alpha_{j-1} O + f PV);
//               [j < n] bar.sync(turn); S_j (8 x m64n128k32, chained); bar.arrive(other's turn);
//               wait 0; mask; online softmax dequantising on the way -> alpha_j; P_j -> e4m3 ->
//               buffer j % 2; fence.proxy.async
//   smem        Q 32 KiB + 2 x (K 32 + V^T 32) KiB + 2 x 2 x P 8 KiB = 192 KiB, + barriers, the
//               scale slots (2 + 2 floats) and alignment (193.1 KiB)
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168); ptxas (CUDA 13.0,
//               -Xptxas -v): 168 registers, 12 bytes spill stores / loads, all of them around the
//               last turn's P V (3 registers, once a block; the SASS has no other local access)
//   ragged      as fp8_v2: TMA zero-fills Q rows past seq_q, K rows and V^T columns past seq_k;
//               keys past seq_k are masked; O and L stores are predicated on the row; causal
//               (bottom-right) and rows with no visible key as v4 (O = 0, L = -inf). A consumer
//               whose 64 rows all lie past seq_q takes its turns on zeros with scale 1 (the token
//               needs both) and stores nothing. seq_k = 0: no turn is taken.
//   refused     (UNSUPPORTED) another head dim, block sizes other than 64 / 128, grouped K/V heads,
//               a window, pointers TMA cannot take (16-byte alignment), sizes near 2^31.
//
// Prediction: ~900 TFLOP/s at B 2, H 8, N 8192, D 256, non-causal (about 45% of the 1979 dense
// FP8 TFLOP/s of an H100 SXM), 1.3x fp8_v2 at D = 128. Per tile the two consumers' matmuls are
// 2 x 1024 = 2048 clocks of tensor core. Each consumer's turn has two gaps where it waits for a
// P V half and folds it (wgmma drain, ~70-130 FMAs per thread, the next issue: ~150-250 clocks);
// while the other consumer is in its softmax nothing fills them: ~4 x 200 = 800 clocks per tile
// pair, 2048 / 2850 = 72% of the tensor cores at best. The softmax (~512 MUFU clocks, ~350
// instructions a thread) fits under the other consumer's ~1400 clocks. Against the 72%: clocks
// sag under FP8 load (~1.6-1.7 GHz against the 1.83 of the peak), waits on K tiles with a 2-deep
// ring, and fp8_v2 reached 34% where its arithmetic promised ~40%: hence ~45%, below the 1.0
// PFLOP/s aimed at. Causal: ~10% lower (fp8_v2: 676.6 -> 613.7).
// Measured (H100 80GB HBM3, 2026-11-26, B 2, N 8192, D 256, three rounds with the steps before
// it in the same run: tuning/README.md): 994.5-1000.1 TFLOP/s full and 871.5-873.3 causal at the
// protocol's H 8, 1005.0-1014.2 and 923.6-926.9 at H 16; t31 ran 947.1-956.0 full at H 8, t32
// 983.9-984.3. Above the prediction. Nsight Compute on the first version of this kernel (t31's
// scales from global memory, t33's softmax and the fold below) found the tensor pipe busy 50.6%
// of the active cycles, issue slots 43%, no pipe saturated, the largest stalls "barrier", "wait"
// and "long scoreboard": latency, not throughput. Tried and dropped (notes/07_flash_hopper.md,
// "FP8 at D = 256"): P V in four column quarters, a third K stage, a share of the exponentials on
// the FMA pipe, and a fold of one FFMA for the warps whose rows all kept their max (a vote and a
// second copy of the fold: 1.6-2.8% slower than this file, 972.5-978.5 in the same rounds; not
// analysed further). What holds it now: the serial turn (one accumulator) and the waves (blocks of equal length on 132 SMs: 15.5 waves at H 16, 7.8 at
// H 8, the last one part empty, ~3%).
// Speed: measured in chapters/07_flash_hopper/README.md
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

struct Fp8V3Smem {
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

// fp8_v2's dequantising multiply and online softmax (hopper_attention.cuh's online_softmax) in one:
//   * s holds the raw accumulators (e4m3 codes of Q times those of K); dequant = scale_q scale_k[j]
//     > 0 (a negative softmax scale has flipped Q's signs instead: see the consumer's start). The
//     row max is taken on the raw values and scaled once, max_i(s_i) dequant, which is max_i(s_i
//     dequant) exactly (rounding is monotonic), so m is fp8_v2's m;
//   * the exponent takes dequant in its FFMA, 2^(s (c dequant) - c m_new + lp), and log2(p_scale)
//     in its constant: s becomes P' = P~ * p_scale, ready for e4m3, and l sums P' (the caller
//     multiplies it by 1 / p_scale before the epilogue). alpha and m are as online_softmax's.
// Masked entries are -inf and stay -inf through the positive factors: 2^-inf = 0.
template <int N>
__device__ __forceinline__ void online_softmax_fp8(float (&s)[N], float (&m)[2], float (&l)[2],
                                                   float c, float dequant, float lp,
                                                   float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    mx[0] = fmaxf(mx[0], fmaxf(s[i], s[i + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[i + 2], s[i + 3]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the quad's four threads hold the row
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
  float shift[2];  // lp - c m_new: the exponent's constant term
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(m[h], mx[h] * dequant);
    const float base = m_new == -INFINITY ? 0.0f : m_new * c;  // no key seen yet: no -inf - -inf
    // An unmoved max gives alpha = 1 exactly (hopper_attention.cuh, online_softmax, says why); else
    // 0 while m = -inf.
    alpha[h] = m_new == m[h] ? 1.0f : ex2_approx(fmaf(m[h], c, -base));
    shift[h] = lp - base;
    m[h] = m_new;
    l[h] *= alpha[h];
  }
  const float cd = c * dequant;
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    s[i] = ex2_approx(fmaf(s[i], cd, shift[0]));
    s[i + 1] = ex2_approx(fmaf(s[i + 1], cd, shift[0]));
    s[i + 2] = ex2_approx(fmaf(s[i + 2], cd, shift[1]));
    s[i + 3] = ex2_approx(fmaf(s[i + 3], cd, shift[1]));
    l[0] += s[i] + s[i + 1];
    l[1] += s[i + 2] + s[i + 3];
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_fp8_v3_kernel(const __grid_constant__ CUtensorMap tm_q,
                            const __grid_constant__ CUtensorMap tm_k,
                            const __grid_constant__ CUtensorMap tm_vt, const Fp8Params p) {
  using Sm = Fp8V3Smem;
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
  const float lp = log2f(p.p_scale);  // P' = P~ p_scale = 2^(c s - c m + lp)
  // Q's scale block is this consumer's 64 rows (block wg_row0 / 64). A consumer whose rows all lie
  // past seq_q has no block (q_blocks ends before it): its Q rows are TMA's zeros, scale 1 serves.
  const float scale_q =
      wg_row0 < p.seq_q ? p.q_scale[bh * p.q_blocks + wg_row0 / kRowsPerWarpgroup] : 1.0f;

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
      const float dequant = scale_q * sKScale[s];  // k_scale[j] (header)
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
      if (j >= n_unmasked) mask_tile(acc, int64_t(j) * kBc, last_key, q);
      online_softmax_fp8(acc, m, l, c, dequant, lp, alpha);  // dequantises on the way
      store_p_e4m3(acc, sP_j, 1.0f, t);                      // already P~ * p_scale
      // The generic-proxy stores of P_j reach the async proxy (P_j V_j, next turn) through this
      // fence and the consumer barrier that starts the next turn.
      hopper::fence_proxy_async_smem();
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  hopper::mbar_wait(q_full, 0);
  // A negative softmax scale: scale * S = |scale| * (-S), and -S is S of -Q. Flipping the sign bit
  // of every e4m3 code of this consumer's Q rows (exact; 0 becomes -0, NaN stays NaN) lets the
  // softmax work with |scale| and positive dequantising factors (online_softmax_fp8), where v4
  // negates S and fp8_v2 folds the sign into its multiply. The generic-proxy stores reach the
  // async proxy (S's wgmma) through the fence and the consumer's barrier.
  if (p.scale_log2 < 0.0f) {
    for (int st = 0; st < kStrips; ++st) {
      uint4* rows = reinterpret_cast<uint4*>(sQ + st * kBr * kStripCols +
                                             consumer * kRowsPerWarpgroup * kStripCols);
      for (int i = t; i < kRowsPerWarpgroup * kStripCols / 16; i += 128) {
        uint4 v = rows[i];
        v.x ^= 0x80808080u;
        v.y ^= 0x80808080u;
        v.z ^= 0x80808080u;
        v.w ^= 0x80808080u;
        rows[i] = v;
      }
    }
    hopper::fence_proxy_async_smem();
    hopper::named_bar_sync(kOwnBar + consumer, 128);
  }
  // Consumer 0 issues the first S. Every bar.arrive meets exactly one bar.sync (v3's header): each
  // consumer syncs n_tiles times on its own turn barrier; consumer 1 arrives on consumer 0's once
  // here and after each S but its last, consumer 0 on consumer 1's after each S.
  if (consumer == 1 && n_tiles > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_tiles > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // PV_{n-1} only
  }

  // l summed P' = P~ p_scale (online_softmax_fp8); the epilogue wants the sum of P~.
  l[0] *= p.inv_p_scale;
  l[1] *= p.inv_p_scale;
  store_o_l<__nv_bfloat16, kD>(o, m, l, c, static_cast<__nv_bfloat16*>(p.o) + bh * p.seq_q * kD,
                               p.lse + bh * p.seq_q, wg_row0, p.seq_q, t);
}

// ---- Host side ---------------------------------------------------------------------------------
constexpr const char* kName = "07/fp8_v3";

void attention_fwd_fp8_v3(const AttentionFwdFp8Args& a, cudaStream_t stream) {
  Fp8Launch l;
  if (!prepare_fp8_launch(a, kName, kD, kBr, kRowsPerWarpgroup, kBc, l)) return;
  set_smem_limit_once<flash_fwd_fp8_v3_kernel, Fp8V3Smem::kBytes>();
  flash_fwd_fp8_v3_kernel<<<l.blocks, kThreads, Fp8V3Smem::kBytes, stream>>>(l.tm_q, l.tm_k,
                                                                             l.tm_vt, l.p);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(AttentionFwdFp8Kernel,
            {kName,
             attention_fwd_fp8_v3,
             "Hopper FP8 (e4m3) at D = 256: fp8_v2 with P V in two column halves, each on a "
             "fresh 64-register tile folded into O before S is issued (O 128 + one accumulator "
             "64 registers), S turns alternating between the consumers, the K and V scales "
             "delivered with their tiles through shared memory, the softmax's multiplies in the "
             "exponent's FFMA",
             {256},
             90,
             kRowsPerWarpgroup,
             kBc});

}  // namespace fa::ch07
