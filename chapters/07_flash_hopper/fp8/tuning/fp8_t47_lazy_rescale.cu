// 07/fp8_t47_lazy_rescale: fp8_t45 (fp8_t45_vt_in_p_order.cu) whose row max moves only when a tile
// raises it by more than kLazyLog2 in the exponent, so that O's rescale is skipped on more tiles
// (sm_90a: H100, H200). A measured step of chapter 07's FP8 tuning appendix
// (tuning/README.md). Read fp8_t45_vt_in_p_order.cu first; a "(header)" in the code points at the
// headers of the steps before.
// Status: verified on an H100 (the FP8 tests, the long rows included, the four sanitizers).
//
// Why: fp8_t39 skips O's rescale (64 FMULs a thread) when no row of the warp moved its max, and the
// source page of fp8_t40 (Nsight Compute, N 8192: fp8_t40_ncu_sass in
// notes/measured/h100-2026-12-06) shows the skip firing on only 36% of the turns (the rescale's
// FMULs ran on 375k of 590k): a warp holds 16 rows, and one of them finding a new maximum in a
// 224-key tile is likely on most tiles. m need not be the row's true running max, only a value
// close enough below it that P~ = 2^(c s - c m) stays inside what e4m3(P~ p_scale) can hold: P~ <=
// 2^kLazyLog2 = 1.68 keeps P~ p_scale r_j <= 431 below e4m3's 448. So m moves only when c (max_j -
// m) > kLazyLog2; a smaller rise keeps m, alpha stays exactly 1 and, if no row of the warp moved,
// the warp skips the rescale.
// The first tile always moves m (from -inf), and O, l and the epilogue all use the same m, so the
// result is exact up to P's rounding. FlashAttention-4 does the same on Blackwell: "updates are
// applied only when the maximum has changed enough to impact numerical stability" (Modal, "We
// reverse-engineered Flash Attention 4", 2025).
//
// What changed vs 07/fp8_t45_vt_in_p_order: online_softmax_fp8's m becomes the tile's max only when
// that max exceeds m by more than kLazyLog2 / c; the launch refuses a p_scale without the headroom.
//
// Prediction (before the first run): the CPU model of a warp's 16 rows over N 8192
// (tests/cpu/test_ch07_fp8_lazy_max.cpp, the benchmark's inputs) skips 36% of the turns with the
// exact max, as Nsight Compute measured, and 63% with this one: ~18 FMULs of ~990 instructions a
// consumer warp a tile leave the turn, issue slots the softmax does not wait on: +0.5 to +2% over
// fp8_t45.
// Measured (H100 80GB HBM3, 2026-12-07, two alternating rounds with fp8_t40 and fp8_t45):
// 793.3-798.2 TFLOP/s full, 709.3-710.5 causal; fp8_t45 776.6-776.9 and 698.5-703.8: 1.02x full,
// 1.01x causal (1.05x and 1.04x fp8_t40), the top of the prediction. Nsight Compute counts O's
// rescale on 217,816 of 589,824 warp turns (fp8_t45: 374,715): 63% skipped, as the CPU model said.
// The FP8 default at D = 128 (fa.attention_fp8).
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstring>
#include <string>

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
constexpr int kD = 128;
constexpr int kBc = 224;            // keys per tile: also K's and V's quantisation block (header)
constexpr int kStages = 3;          // (header)
constexpr int kAcc = 64;            // one m64n128 accumulator: one column half of P V
constexpr int kSAcc = kBc / 2;      // S's accumulators: 112 a thread
constexpr int kOAcc = kD / 2;       // O accumulators per thread (one kAcc at D = 128)
constexpr int kHalves = kD / 128;   // column halves of P V
constexpr int kKSteps = kD / 32;    // k32 steps of S = Q K^T: 4 in each 128-byte strip
constexpr int kPVSteps = kBc / 32;  // k32 steps of P V
constexpr int kStrips = kD / 128;   // 128-byte swizzle strips of a Q or K row
constexpr int kStripCols = 128;     // bytes (= e4m3 columns) of one strip
constexpr int kPromoteTiles = 4;    // key tiles the tensor cores add into O' between promotions
constexpr int kVtStrips = (kBc + kStripCols - 1) / kStripCols;  // 128-key strips of a V^T tile
constexpr int kBaseChunks = kOAcc / 16;  // 16-byte chunks of one thread's base codes
constexpr float kMinLog2Ratio = -64.0f;  // log2 r_j's floor (header)

struct Fp8T47Smem {
  static constexpr int kQBytes = kBr * kD;  // kStrips strips of [Br rows][128 B]
  static constexpr int kKBytes = kBc * kD;  // kStrips strips of [Bc keys][128 B]
  static constexpr int kVtBytes = kVtStrips * kD * kStripCols;  // V^T tile: strips of [D][128 keys]
  static constexpr int kKOffset = kQBytes;                      // K stage s at + s * kKBytes
  static constexpr int kVtOffset = kKOffset + kStages * kKBytes;  // V^T stage s at + s * kVtBytes
  // Consumer c's base (header): its 128 threads' O codes, 128 bytes each, at + c * kBaseBytes.
  static constexpr int kBaseBytes = 128 * kOAcc;
  static constexpr int kBaseOffset = kVtOffset + kStages * kVtBytes;
  static constexpr int kBarOffset = kBaseOffset + kConsumers * kBaseBytes;
  // The producer's per-stage scale slots (floats): K's (V's scales are read by the softmax).
  static constexpr int kScaleOffset = kBarOffset + (1 + 4 * kStages) * 8;
  static constexpr int kBytes =
      kScaleOffset + kStages * int(sizeof(float)) + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKBytes % kAtomBytes == 0 &&
                    kVtBytes % kAtomBytes == 0,
                "swizzle atoms stay 1024-byte aligned");
  static_assert(kBytes <= 232448, "fits the 227 KiB (232448 bytes) a block may opt in to");
};

// fp8_v2's dequantising multiply and online softmax (hopper_attention.cuh's online_softmax) in one:
//   * s holds the raw accumulators (e4m3 codes of Q times those of K); dequant = scale_q scale_k[j]
//     > 0 (a negative softmax scale has flipped Q's signs instead: see the consumer's start). The
//     row max is taken on the raw values and scaled once, max_i(s_i) dequant, which is max_i(s_i
//     dequant) exactly (rounding is monotonic), so m is fp8_v2's m;
//   * the exponent takes dequant in its FFMA, 2^(s (c dequant) - c m_new + lp), and lp = log2(p_scale
//     r_j) in its constant (header): s becomes P' = P~ p_scale r_j, ready for e4m3, and l sums
//     P' / r_j = P~ p_scale, the tile's sum times inv_r = 1 / r_j (the caller multiplies l by
//     1 / p_scale before the epilogue). alpha is as online_softmax's; m moves lazily (header).
// Masked entries are -inf and stay -inf through the positive factors: 2^-inf = 0.
constexpr int kChains = 4;  // independent chains of the row max and the row sum (header)
// How far, in the exponent (log2 units), a tile's max may rise above m before m moves (header):
// P~ <= 2^0.75, and P~ p_scale r_j <= 256 * 1.68 = 431 < 448, e4m3's largest finite value.
constexpr float kLazyLog2 = 0.75f;
constexpr float kLazyHeadroom = 1.6818f;  // 2^kLazyLog2, rounded up

template <int N>
__device__ __forceinline__ void online_softmax_fp8(float (&s)[N], float (&m)[2], float (&l)[2],
                                                   float c, float dequant, float lp, float inv_r,
                                                   float (&alpha)[2]) {
  // The row max as kChains independent chains (header), then combined.
  float mxc[2][kChains];
#pragma unroll
  for (int u = 0; u < kChains; ++u) {
    mxc[0][u] = fmaxf(s[4 * u], s[4 * u + 1]);
    mxc[1][u] = fmaxf(s[4 * u + 2], s[4 * u + 3]);
  }
#pragma unroll
  for (int i = 4 * kChains; i < N; i += 4) {
    const int u = (i / 4) % kChains;
    mxc[0][u] = fmaxf(mxc[0][u], fmaxf(s[i], s[i + 1]));
    mxc[1][u] = fmaxf(mxc[1][u], fmaxf(s[i + 2], s[i + 3]));
  }
  float mx[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    mx[h] = fmaxf(fmaxf(mxc[h][0], mxc[h][1]), fmaxf(mxc[h][2], mxc[h][3]));
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the quad's four threads hold the row
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
  float shift[2];  // lp - c m_new: the exponent's constant term
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // m moves only for a rise of more than kLazyLog2 in the exponent (header); from -inf, any
    // finite max is such a rise (+inf > kLazyLog2), and a row with no key yet stays at -inf.
    const float tile_max = mx[h] * dequant;
    const float m_new = (tile_max - m[h]) * c > kLazyLog2 ? tile_max : m[h];
    const float base = m_new == -INFINITY ? 0.0f : m_new * c;  // no key seen yet: no -inf - -inf
    // An unmoved max gives alpha = 1 exactly (hopper_attention.cuh, online_softmax, says why); else
    // 0 while m = -inf.
    alpha[h] = m_new == m[h] ? 1.0f : ex2_approx(fmaf(m[h], c, -base));
    shift[h] = lp - base;
    m[h] = m_new;
    l[h] *= alpha[h];
  }
  const float cd = c * dequant;
  // The row sum as kChains independent chains too, added to l at the end.
  float lc[2][kChains];
#pragma unroll
  for (int u = 0; u < kChains; ++u) lc[0][u] = lc[1][u] = 0.0f;
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    const int u = (i / 4) % kChains;
    s[i] = ex2_approx(fmaf(s[i], cd, shift[0]));
    s[i + 1] = ex2_approx(fmaf(s[i + 1], cd, shift[0]));
    s[i + 2] = ex2_approx(fmaf(s[i + 2], cd, shift[1]));
    s[i + 3] = ex2_approx(fmaf(s[i + 3], cd, shift[1]));
    lc[0][u] += s[i] + s[i + 1];
    lc[1][u] += s[i + 2] + s[i + 3];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
    l[h] = fmaf((lc[h][0] + lc[h][1]) + (lc[h][2] + lc[h][3]), inv_r, l[h]);
}

// ---- The promotion (header) ------------------------------------------------------------------
// A code is an 8-bit integer q in [-126, 126], stored as the byte q + 128. Both directions go
// through fp16, whose conversions and paired adds run beside the fp32 pipe the softmax keeps busy:
// between 1024 and 2048 the fp16 numbers are the integers, so adding kCodeMagic = 1664 = 1536 + 128
// to x / mult (|x / mult| <= 126) rounds it to an integer and leaves q + 128 in the low byte of the
// fp16's bits (1664 + q - 1024 = 640 + q, and 640 = 0x280); a byte b put back under the high
// byte 0x66 of 1536's bits is the fp16 1536 + b, from which subtracting kCodeMagic gives q exactly.
constexpr float kCodeRange = 126.0f;  // |q| <= 126: no rounding can reach 128 (header)
constexpr float kCodeMagic = 1664.0f;
constexpr uint32_t kCodeHigh = 0x6666u;  // the high byte of 1536 (0x6600), twice

// The smallest power of two >= x, for x a positive normal float (x's exponent, plus one unless x
// is a power of two already); 1 for zero, subnormal x and NaN.
__device__ __forceinline__ float pow2_at_least(float x) {
  if (!(x >= FLT_MIN)) return 1.0f;
  const uint32_t bits = __float_as_uint(x);
  return __uint_as_float((bits & 0x7f800000u) + ((bits & 0x007fffffu) ? 0x00800000u : 0u));
}

// q of bytes 2p and 2p + 1 of a word of codes, as two floats.
__device__ __forceinline__ float2 codes_at(uint32_t word, int p) {
  const uint32_t bits = __byte_perm(word, kCodeHigh, p == 0 ? 0x5140u : 0x5342u);
  __half2 h;
  memcpy(&h, &bits, 4);
  return __half22float2(__hsub2(h, __float2half2_rn(kCodeMagic)));
}

// O' += base mult: this thread's codes, element i of the fragment (row g + 8 ((i / 2) % 2)) is
// byte i, chunk i / 16 at base_t + (i / 16) * 128 * 16 (header).
__device__ __forceinline__ void add_base(float (&o)[kOAcc], const unsigned char* base_t,
                                         const float (&mult)[2]) {
#pragma unroll
  for (int ch = 0; ch < kBaseChunks; ++ch) {
    const uint4 v = *reinterpret_cast<const uint4*>(base_t + ch * 128 * 16);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = 16 * ch + 4 * k;
      const float2 r0 = codes_at(words[k], 0);  // elements i, i + 1: row g
      const float2 r1 = codes_at(words[k], 1);  // elements i + 2, i + 3: row g + 8
      o[i] = fmaf(r0.x, mult[0], o[i]);
      o[i + 1] = fmaf(r0.y, mult[0], o[i + 1]);
      o[i + 2] = fmaf(r1.x, mult[1], o[i + 2]);
      o[i + 3] = fmaf(r1.y, mult[1], o[i + 3]);
    }
  }
}

// The promotion: O_true = base mult + O' (no base before the first), then a new mult per row (a
// power of two: O_true / mult and q mult are exact), the codes q = round(O_true / mult), and O'
// the residual O_true - q mult, at most about mult / 2 <= max_row |O_true| / 126 (the fp16 step
// may round once more; the residual is computed from the q stored, so the sum stays exact). The
// max is over this thread's kOAcc / 2 elements of a row (32 at D = 128): the base is private to the thread, and so is
// its scale.
__device__ __forceinline__ void promote(float (&o)[kOAcc], unsigned char* base_t, float (&mult)[2],
                                        bool have_base) {
  if (have_base) add_base(o, base_t, mult);
  float mx[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kOAcc; i += 4) {
    mx[0] = fmaxf(mx[0], fmaxf(fabsf(o[i]), fabsf(o[i + 1])));
    mx[1] = fmaxf(mx[1], fmaxf(fabsf(o[i + 2]), fabsf(o[i + 3])));
  }
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mult[h] = pow2_at_least(mx[h] * (1.0f / kCodeRange));
    inv[h] = __uint_as_float(0x7f000000u - __float_as_uint(mult[h]));  // 1 / mult, exactly
  }
  const __half2 magic = __float2half2_rn(kCodeMagic);
#pragma unroll
  for (int ch = 0; ch < kBaseChunks; ++ch) {
    uint32_t words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = 16 * ch + 4 * k;
      // 1664 + q per lane: elements i, i + 1 (row g) in y0, i + 2, i + 3 (row g + 8) in y1.
      const __half2 y0 = __hadd2(__floats2half2_rn(o[i] * inv[0], o[i + 1] * inv[0]), magic);
      const __half2 y1 = __hadd2(__floats2half2_rn(o[i + 2] * inv[1], o[i + 3] * inv[1]), magic);
      const float2 q0 = __half22float2(__hsub2(y0, magic)), q1 = __half22float2(__hsub2(y1, magic));
      o[i] = fmaf(-q0.x, mult[0], o[i]);
      o[i + 1] = fmaf(-q0.y, mult[0], o[i + 1]);
      o[i + 2] = fmaf(-q1.x, mult[1], o[i + 2]);
      o[i + 3] = fmaf(-q1.y, mult[1], o[i + 3]);
      uint32_t b0, b1;
      memcpy(&b0, &y0, 4);
      memcpy(&b1, &y1, 4);
      words[k] = __byte_perm(b0, b1, 0x6420u);  // the four low bytes: q + 128 each
    }
    *reinterpret_cast<uint4*>(base_t + ch * 128 * 16) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// P' (this thread's 64 accumulators of S_j after the exponentials) -> e4m3, straight into the A
// fragments of the k32 steps of P V. The accumulator holds, of each row, keys 8n + 2q and 8n + 2q
// + 1 (n = 0 .. kBc / 8 - 1; element 4n + e of row g, 4n + 2 + e of row g + 8); the A fragment of k32 step
// kk wants 4 consecutive k of a row (wgmma_e4m3_rs_m64n128k32). With the keys of every 16 in the
// order of the header, A's k = 16h + 4q + i is key 16h + {2q, 2q + 1, 2q + 8, 2q + 9}[i] of the
// step's 32, and those four are this thread's: elements 16kk + 8h + {0, 1, 4, 5} (row g) and
// + 2 (row g + 8). Byte i of a word is A's k = 4q + i (cuda_fp8.h puts x in the low byte).
__device__ __forceinline__ void pack_p_fragments(const float (&s)[kSAcc],
                                                 uint32_t (&pf)[kPVSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // a[0] row g, a[1] row g + 8, a[2], a[3] the next 16 k
      const int i = 16 * kk + 8 * (r / 2) + 2 * (r % 2);
      const uint32_t lo =
          __nv_cvt_float2_to_fp8x2(make_float2(s[i], s[i + 1]), __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi =
          __nv_cvt_float2_to_fp8x2(make_float2(s[i + 4], s[i + 5]), __NV_SATFINITE, __NV_E4M3);
      pf[kk][r] = lo | (hi << 16);
    }
}

__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_fp8_t47_kernel(const __grid_constant__ CUtensorMap tm_q,
                             const __grid_constant__ CUtensorMap tm_k,
                             const __grid_constant__ CUtensorMap tm_vt, const Fp8Params p) {
  using Sm = Fp8T47Smem;
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKBytes; };
  auto sVt = [&](int s) { return smem + Sm::kVtOffset + s * Sm::kVtBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  // Per stage: k_scale[j] of the K tile in it.
  float* sKScale = reinterpret_cast<float*>(smem + Sm::kScaleOffset);
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
    // tile are kStrips boxes each (one at D = 128: a row is one 128-byte strip), a V^T tile
    // kVtStrips boxes of D rows x 128 keys.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
      for (int st = 0; st < kStrips; ++st)
        hopper::tma_load_3d(sQ + st * kBr * kStripCols, &tm_q, q_full, st * kStripCols, int(q0),
                            int(bh));
      const float* k_scale = p.k_scale + bh * p.kv_blocks;
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        const float ks = k_scale[j];  // loaded before the wait: its latency hides there
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        sKScale[s] = ks;  // before the release arrive (header)
        hopper::mbar_arrive_expect_tx(&full_k[s], Sm::kKBytes);
        for (int st = 0; st < kStrips; ++st)
          hopper::tma_load_3d(sK(s) + st * kBc * kStripCols, &tm_k, &full_k[s], st * kStripCols,
                              j * kBc, int(bh));
        if (use > 0) hopper::mbar_wait(&empty_v[s], (use - 1) & 1);  // freed a turn after K
        hopper::mbar_arrive_expect_tx(&full_v[s], Sm::kVtBytes);
        for (int st = 0; st < kVtStrips; ++st)  // (header)
          hopper::tma_load_3d(sVt(s) + st * kD * kStripCols, &tm_vt, &full_v[s],
                              j * kBc + st * kStripCols, 0, int(bh));
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  // Its 64 rows of Q: one 128-byte strip a row at D = 128.
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * kStripCols;
  // The wgmma descriptors, built once (header): k32 step kk of a K-major tile is kk * 32 bytes into
  // its one 128-byte strip (D = 128), and stage s of K or V^T a fixed number of bytes on, so each
  // descriptor in the turn is one of these plus an offset: one add (hopper::smem_desc_advance).
  const uint64_t desc_q = desc_k_major<kBr>(sQc, 0);
  const uint64_t desc_k0 = desc_k_major<kBc>(sK(0), 0);
  const uint64_t desc_vt0 = desc_k_major<kD>(sVt(0), 0);
  unsigned char* base_t = smem + Sm::kBaseOffset + consumer * Sm::kBaseBytes + t * 16;  // header
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, p.seq_q, p.seq_k, p.causal),
                               last_visible_key(row0 + 8, p.seq_q, p.seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);
  const float lp = log2f(p.p_scale);  // P' = P~ p_scale r_j = 2^(c s - c m + lp + log2 r_j)
  // vs_ref, O's unit (header): the largest V scale of the tiles this block visits, a warp-wide max
  // (scales are positive: a block of zeros has scale 1). No tiles: no turn reads it.
  const float* v_scale = p.v_scale + bh * p.kv_blocks;
  float vs_ref = 0.0f;
  for (int j = t % 32; j < n_tiles; j += 32) vs_ref = fmaxf(vs_ref, v_scale[j]);
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2)
    vs_ref = fmaxf(vs_ref, __shfl_xor_sync(0xffffffffu, vs_ref, lane_mask));
  const float log2_vs_ref = __log2f(vs_ref);
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

  // O accumulates P'_j V_j straight from the tensor cores, in units of vs_ref / p_scale (header):
  // before P_j V_j is added, O (scaled to m_{j-1}) is multiplied by alpha_j alone.
  // O_true = q mult + O', the base plus the residual (header); mult rides every rescale of O'.
  // No base before the first promotion: have_base keeps its unwritten codes out of the sums.
  float mult[2] = {0.0f, 0.0f};
  bool have_base = false;
  // P_j, e4m3, as the A fragments of P_j V_j's k32 steps (header): written by the softmax of S_j,
  // read by the wgmmas of the next turn.
  uint32_t pf[kPVSteps][4];
  auto o_half = [&](int h) -> float(&)[kAcc] {
    return *reinterpret_cast<float(*)[kAcc]>(o + h * kAcc);
  };
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    const int s = j % kStages, sp = (j + kStages - 1) % kStages;  // stages of tile j and j - 1
    float acc[kSAcc];                                             // S_j

    if constexpr (kPV) {
      // O' holds tiles 0 .. j - 2; every kPromoteTiles of them, it moves to the base (header).
      // Its wgmmas were waited for at the end of the last turn.
      if (j > 1 && (j - 1) % kPromoteTiles == 0) {
        promote(o, base_t, mult, have_base);
        have_base = true;
      }
      hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);  // in P order as it lands
      const float f0 = alpha[0], f1 = alpha[1];
      mult[0] *= f0;
      mult[1] *= f1;
      if (!__all_sync(0xffffffffu, f0 == 1.0f && f1 == 1.0f)) {
#pragma unroll
        for (int i = 0; i < kOAcc; i += 4) {
          o[i] *= f0;
          o[i + 1] *= f0;
          o[i + 2] *= f1;
          o[i + 3] *= f1;
        }
      }
      hopper::wgmma_fence();
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
#pragma unroll
        for (int kk = 0; kk < kPVSteps; ++kk)
          wgmma_e4m3_rs_m64n128k32(
              o_half(h), pf[kk],
              hopper::smem_desc_advance(desc_vt0, sp * Sm::kVtBytes + (kk / 4) * kD * kStripCols +
                                                      h * 128 * kStripCols + (kk % 4) * 32),
              1);
      hopper::wgmma_commit();
    }

    if constexpr (kS) {
      const float vs_j = v_scale[j];  // loaded before the waits: its latency hides there
      hopper::mbar_wait(&full_k[s], (j / kStages) & 1);
      const float dequant = scale_q * sKScale[s];
      hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
      hopper::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        wgmma_e4m3_m64n224k32(acc, hopper::smem_desc_advance(desc_q, kk * 32),
                              hopper::smem_desc_advance(desc_k0, s * Sm::kKBytes + kk * 32),
                              kk > 0);
      hopper::wgmma_commit();
      if (consumer == 0 || j + 1 < n_tiles)
        hopper::named_bar_arrive(kTurnBar + 1 - consumer, kTurnThreads);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(acc);
      hopper::fence_registers(o);
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk) hopper::fence_registers(pf[kk]);  // read until here
      if constexpr (kPV) hopper::mbar_arrive(&empty_v[sp]);
      hopper::mbar_arrive(&empty_k[s]);
      if (j >= n_unmasked) mask_tile(acc, int64_t(j) * kBc, last_key, q);
      // log2 r_j, r_j = v_scale[j] / vs_ref <= 1 (header), clamped: 2^64 / r_j stays finite.
      const float log2_r = fmaxf(__log2f(vs_j) - log2_vs_ref, kMinLog2Ratio);
      online_softmax_fp8(acc, m, l, c, dequant, lp + log2_r, ex2_approx(-log2_r), alpha);
      pack_p_fragments(acc, pf);
    } else {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o);
      if constexpr (kPV) hopper::mbar_arrive(&empty_v[sp]);
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

  // l summed P' / r_j = P~ p_scale (online_softmax_fp8); the epilogue wants the sum of P~. O is in
  // units of vs_ref / p_scale.
  l[0] *= p.inv_p_scale;
  l[1] *= p.inv_p_scale;
  if (have_base) add_base(o, base_t, mult);
  {
    const float fo = vs_ref * p.inv_p_scale;
#pragma unroll
    for (int i = 0; i < kOAcc; ++i) o[i] *= fo;
  }
  store_o_l<__nv_bfloat16, kD>(o, m, l, c, static_cast<__nv_bfloat16*>(p.o) + bh * p.seq_q * kD,
                               p.lse + bh * p.seq_q, wg_row0, p.seq_q, t);
}

// ---- Host side ---------------------------------------------------------------------------------
constexpr const char* kName = "07/fp8_t47_lazy_rescale";

void attention_fwd_fp8_t47(const AttentionFwdFp8Args& a, cudaStream_t stream) {
  FA_REQUIRE(a.p_scale * kLazyHeadroom < kE4M3Max,
             std::string(kName) +
                 ": p_scale * 2^0.75 must stay below e4m3's 448 (a row's P~ "
                 "reaches 2^0.75 under the lazy max)");
  Fp8Launch l;
  if (!prepare_fp8_launch(a, kName, kD, kBr, kRowsPerWarpgroup, kBc, l, /*vt_p_order=*/true))
    return;
  set_smem_limit_once<flash_fwd_fp8_t47_kernel, Fp8T47Smem::kBytes>();
  flash_fwd_fp8_t47_kernel<<<l.blocks, kThreads, Fp8T47Smem::kBytes, stream>>>(l.tm_q, l.tm_k,
                                                                               l.tm_vt, l.p);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(
    AttentionFwdFp8Kernel,
    {kName,
     attention_fwd_fp8_t47,
     "Hopper FP8 (e4m3) at D = 128, tuning step: fp8_t45 with a row max that moves only when "
     "it rises by more than 2^0.75 (O's rescale skipped on more tiles)",
     {128},
     90,
     kRowsPerWarpgroup,
     kBc,
     /*vt_p_order=*/true});

}  // namespace fa::ch07
