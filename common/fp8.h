// fp8.h: FP8 (e4m3) on the host: the number format, per-block scaling, the random Hadamard
// rotation of FlashAttention-3's "incoherent processing", and a naive FP8 attention forward. An FP8
// attention kernel is checked against these; notes/fp8_accuracy.md measures what each costs.
//
// e4m3 is the OCP FP8 E4M3 format the Hopper tensor cores take: 1 sign bit, 4 exponent bits (bias
// 7), 3 mantissa bits. Normal values are (1 + m/8) * 2^(E-7) for E = 1..15, subnormals m/8 * 2^-6
// for E = 0. There is no infinity: S.1111.111 is NaN (0x7F, 0xFF), so the largest finite value is
// S.1111.110 = 1.75 * 2^8 = 448. Relative spacing 2^-3, nearest rounding within 2^-4.
//
// float_to_e4m3 rounds to nearest, ties to even, and saturates: every |x| > 448, infinities
// included, becomes +-448, NaN stays NaN (sign kept). That is what the device conversion the kernel
// uses does, cvt.rn.satfinite.e4m3x2.f32 (CUDA's __nv_cvt_float_to_fp8 with __NV_SATFINITE: "input
// larger than the maximum representable finite number MAXNORM of the target format round to the
// MAXNORM of the same sign as input"; without .satfinite e4m3 would give NaN, having no
// infinity). The test compares the two on every rounding boundary.
//
// Per-block scaling: a [rows, d] tensor (one head) is cut into blocks of block_rows consecutive rows;
// block b gets scale_b = amax_b / 448 (amax_b: the largest |x| of the block) and stores
// code = e4m3(x / scale_b), so its largest entry lands on 448 and the whole e4m3 range is used.
// The value the kernel computes with is e4m3_to_float(code) * scale_b (dequantize()).
//
// The rotation: R = diag(s) H / sqrt(d), H the d x d Sylvester Hadamard matrix (d a power of two)
// and s a seeded random vector of +-1. x R flips signs first, then mixes every coordinate into
// every other; R is orthogonal, so (Q R)(K R)^T = Q K^T exactly, but an outlier coordinate of a row
// is spread over all d coordinates, its amax drops and with it the block scale (notes/fp8_accuracy.md
// has the argument). The signs come first on purpose: with H first they would only flip the signs
// of an already fixed result and change no magnitude.
//
// ---- The accuracy rule for an FP8 attention kernel -----------------------------------------------
// The repository's FlashAttention rule (compare.h) with the naive FP8 implementation in place of the
// naive bf16 one. Quantise Q, K, V once (quantize_head, with or without the rotation); give the same
// codes and scales to the kernel and to attention_forward_fp8_naive_head; compute O_ref64 with
// attention_forward_ref_head on the dequantised values (fp8_dequantized_view), i.e. on exactly the
// numbers the kernel sees. Then the kernel must satisfy
//     max |O_kernel - O_ref64| <= 2 * max |O_naive_fp8 - O_ref64| + 1e-4
// (and the same for L), compare_flash_rule(..., factor 2.0, floor 1e-4): the floor of the bf16
// forward rule. The quantisation choices (block rows, the rotation and its seed, P's scale
// kFp8PScale) must be the same in the kernel and in the naive implementation: the rule measures
// the kernel's arithmetic, not the format's.
// A kernel that writes O in bf16 (AttentionFwdFp8Args) is compared with the naive O rounded to
// bf16, as the bf16 naive forward rounds its own O (reference.h): otherwise a one-key row, where
// the naive O is exact, would allow only the 1e-4 floor for the bf16 rounding of O alone.
// The floor grows by kFp8AccumulatorRel times fp8_accumulator_bound (scale * max_i sum_d |Q_id|
// max_j |K_jd|, the largest magnitude a partial sum or a product of S's accumulator can reach), in
// L, and times that and max |O_ref| in O: the FP8 tensor cores do not add in fp32. They align the
// products of one instruction to the largest and drop the bits below (Fasi, Higham, Mikaitis and
// Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021, for fp16 on V100, T4 and
// A100; DeepSeek-V3's technical report, section 3.3.2, measured "around 14 bits" of accumulation
// precision for FP8 on H800), and a kernel that chains all of D into one accumulator adds each
// instruction's sum to a partial S at that precision. On an H100 the first FP8 kernels missed a
// 1e-4 floor on L by 1.2x to 2.2x without outliers and by 2x to 5x with outlier features, with
// every O inside its bound (notes/fp8_accuracy.md). A CPU naive implementation summing in fp32
// cannot show this. The rule allows 2^-10 of the bound: an error delta in S moves L by delta and
// O by about delta |O|.
#pragma once
#include <cstdint>
#include <vector>

#include "reference.h"

namespace fa {

// ---- the format --------------------------------------------------------------------------------
constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3MaxCode = 0x7E;  // +448; 0xFE is -448
constexpr uint8_t kE4M3NaN = 0x7F;      // and 0xFF

uint8_t float_to_e4m3(float x);  // round to nearest even, saturating (see above)
float e4m3_to_float(uint8_t c);  // exact; NaN for 0x7F and 0xFF
inline float round_to_e4m3(float x) {
  return e4m3_to_float(float_to_e4m3(x));
}

// ---- per-block scaling -------------------------------------------------------------------------
// A [rows, d] row-major tensor as e4m3 codes and one float scale per block of block_rows rows (the
// last block may be shorter). A block that is all zeros gets scale 1.
struct Fp8Blocks {
  int64_t rows = 0, d = 0, block_rows = 0;
  std::vector<uint8_t> codes;  // [rows, d]
  std::vector<float> scales;   // [ceil(rows / block_rows)]
  int64_t num_blocks() const { return static_cast<int64_t>(scales.size()); }
  float scale_of_row(int64_t r) const { return scales[static_cast<size_t>(r / block_rows)]; }
  // The value element (r, c) stands for: e4m3_to_float(code) * scale, rounded once to float
  // (2^-24 relative, far below the format's 2^-4).
  float value(int64_t r, int64_t c) const;
  std::vector<float> dequantize() const;  // [rows, d]
};
// Throws fa::Error on a non-finite input or block_rows < 1.
Fp8Blocks quantize_e4m3_blocks(const float* x, int64_t rows, int64_t d, int64_t block_rows);

// ---- the random Hadamard rotation --------------------------------------------------------------
struct HadamardRotation {
  int64_t d = 0;
  std::vector<float> signs;  // s, d entries of +-1
};
// d must be a power of two (fa::UsageError otherwise); the signs come from `seed`.
HadamardRotation random_hadamard(int64_t d, uint64_t seed);
// R = diag(s) H / sqrt(d) as a [d, d] row-major matrix (for tests; rotate_rows does not build it).
std::vector<double> rotation_matrix(const HadamardRotation& r);
// x R for each of the `rows` rows of x [rows, d]: a fast Walsh-Hadamard transform in double,
// rounded once to float.
std::vector<float> rotate_rows(const float* x, int64_t rows, const HadamardRotation& r);

// ---- naive FP8 attention, one head -------------------------------------------------------------
// P (in [0, 1]) is quantised as e4m3(P~ * 256), P~ = exp(S - m) the unnormalised probabilities a
// FlashAttention kernel holds, and 1/256 is folded into the final 1/l. A power of two so that the
// scaling is exact both ways; 256 <= 448, so P~ = 1 is stored exactly; P~ below 2^-6 / 256 = 2^-14
// is then subnormal and at or below 2^-18 it becomes 0 (without the scale: at or below 2^-10).
constexpr float kFp8PScale = 256.0f;
// The FP8 tensor cores' error in S relative to fp8_accumulator_bound (the rule above).
constexpr double kFp8AccumulatorRel = 1.0 / 1024.0;

// Q, K, V of one head quantised for an FP8 kernel. With `rotated`, q and k hold the codes of Q R
// and K R (R from rotation_seed); V is never rotated.
struct Fp8Head {
  Fp8Blocks q, k, v;
  bool causal = false;
  double scale = 1.0;  // the softmax scale, 1/sqrt(d) usually
  int64_t window_left = -1, window_right = -1;
  bool rotated = false;
  uint64_t rotation_seed = 0;
  int64_t seq_q() const { return q.rows; }
  int64_t seq_k() const { return k.rows; }
  int64_t d() const { return q.d; }
};
// Quantises h's Q, K, V per block (block_rows_q rows for Q, block_rows_kv for K and V), rotating Q
// and K first when `rotate` is set (d must then be a power of two).
Fp8Head quantize_head(const HeadView& h, int64_t block_rows_q, int64_t block_rows_kv, bool rotate,
                      uint64_t rotation_seed = 0);

// The dequantised Q, K, V of an Fp8Head as float tensors and a HeadView over them: the inputs of
// the float64 reference in the accuracy rule above (the vectors own the values).
struct Fp8Dequantized {
  std::vector<float> q, k, v;
  HeadView view;
};
Fp8Dequantized fp8_dequantized_view(const Fp8Head& h);

// What a straightforward FP8 kernel computes, row by row, in fp32 on the e4m3 values:
//   S = (codes_Q . codes_K) * (scale_Q(block of i) * scale_K(block of j) * softmax scale)
//   m = max_j S, P~ = exp(S - m), l = sum_j P~            (fp32, before any rounding of P)
//   O = (sum_j e4m3(P~ * 256) * V_j) / (256 l),  V_j = e4m3 value * scale_V(block of j)
//   L = m + log(l)
// O is [seq_q, d], L [seq_q]; a row that sees no key gets O = 0 and L = -inf.
void attention_forward_fp8_naive_head(const Fp8Head& h, float* O, float* L);

// |scale| * max_i sum_d |Q_id| (max_j |K_jd|), on the values a view holds: an upper bound on every
// |partial sum| and |product| the accumulator of S = scale Q K^T meets (the rule above).
double fp8_accumulator_bound(const HeadView& h);

// ---- the device layout of V for an FP8 kernel (AttentionFwdFp8Args in registry.h) --------------
// The FP8 wgmma reads both operands K-major (PTX ISA, wgmma.mma_async: imm-trans-a and imm-trans-b
// exist for .f16 and .bf16 only), and in O += P V the reduction runs over keys: V must be stored
// with the keys innermost, V^T [d, seq_k] per head. TMA wants each row stride a multiple of 16
// bytes, so a row holds fp8_vt_stride(seq_k) bytes, the keys past seq_k zero (code 0 is +0: a
// kernel that multiplies the padding by P = 0 still adds 0, never NaN).
constexpr int64_t kFp8VtAlignBytes = 16;
inline int64_t fp8_vt_stride(int64_t seq_k) {
  return (seq_k + kFp8VtAlignBytes - 1) / kFp8VtAlignBytes * kFp8VtAlignBytes;
}
// A kernel that keeps P in registers as the A operand of P V has, of each 16 keys, a thread's
// accumulator columns {2q, 2q + 1, 2q + 8, 2q + 9} where the e4m3 wgmma wants 4 consecutive k
// (chapter 07's fp8_t36 and later): V^T's keys in that order make the two agree. P order: slot s of
// every aligned 16 holds key fp8_vt_key_at(s) of those 16, i.e. 0 1 8 9 2 3 10 11 4 5 12 13 6 7 14
// 15. The stride is a multiple of 16, so every group of 16 lies in its row; keys past seq_k are
// zero codes wherever they land.
constexpr int kFp8VtGroup = 16;
constexpr int fp8_vt_key_at(int slot) {
  return 2 * ((slot / 4) % 4) + (slot / 2) % 2 * 8 + slot % 2;
}
// How many slots of a V^T row a kernel's TMA map must cover (TMA reads zeros past a map's
// extent). In key order seq_k: the slots past it hold keys past seq_k. In P order the whole
// stride: a partial last group of 16 puts some of its keys in slots past seq_k (seq_k = 1000: key
// 999 is slot 7 of its group, which P order stores at 992 + 13 = 1005) and keys past seq_k, zeros,
// in slots before it.
inline int64_t fp8_vt_map_keys(int64_t seq_k, bool p_order) {
  return p_order ? fp8_vt_stride(seq_k) : seq_k;
}
// v: [seq_k, d] codes of one head; vt: d * fp8_vt_stride(seq_k) bytes, written entirely, keys in
// their order or (p_order) in P order.
void fp8_transpose_v(const uint8_t* v, int64_t seq_k, int64_t d, uint8_t* vt, bool p_order = false);

}  // namespace fa
