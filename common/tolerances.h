// tolerances.h: the numbers every correctness check of the repository judges by, in one place.
// The C++ harnesses (common/harness_*.cpp) include this header; the Python package's check.py
// reads the same numbers out of its text when it is imported (python/flash_from_scratch/
// _tolerances.py; `pip install` ships a copy of this file inside the package). So keep it plain:
// one `constexpr double kName = value;` per line, a number literal as the value, nothing else.
//
// Two rules (compare.h writes them out):
//   fp32 ("allclose"):      |x - ref| <= atol + rtol |ref| for every element;
//   fp16, bf16 (FlashAttention's rule): max |x - ref| <= factor * max |naive - ref| + floor, where
//                           naive is the same computation done plainly in that precision. The bound
//                           follows the precision's own error, so it is neither loose for bf16 nor
//                           tight for fp16; the floor keeps it above 0 where naive is exact.
// ref is the float64 CPU reference (notes/conventions.md says why these rules).
#pragma once

namespace fa::tol {

// ---- Attention forward, fp32 ------------------------------------------------------------------
// O: a weighted mean of V's rows, so |O| is about |V| (about 1 for the harness's inputs). The
// bound is loose next to one fp32 rounding (6e-8) because the kernels' order of summation differs
// from the reference's (blockwise, with rescaling) and their exponentials are exp2-based.
constexpr double kFp32OAtol = 1e-4;
constexpr double kFp32ORtol = 1e-4;
// L = m + ln l, a log: its absolute bound is O's; its relative part is smaller because |L| grows
// with the scores and the row length, where 1e-4 |L| alone would allow a visibly wrong L.
constexpr double kFp32LAtol = 1e-4;
constexpr double kFp32LRtol = 1e-5;

// ---- Attention backward, fp32 -----------------------------------------------------------------
// dQ, dK, dV: each a sum over a whole row or column of the attention matrix of terms that
// cancel (dS = P o (dP - D) subtracts two close numbers), so they are judged more loosely than O.
constexpr double kFp32GradAtol = 2e-4;
constexpr double kFp32GradRtol = 1e-3;
// D = rowsum(dO o O): one head_dim-long dot product per row, as accurate as O.
constexpr double kFp32DeltaAtol = 1e-4;
constexpr double kFp32DeltaRtol = 1e-4;

// ---- Attention, fp16 and bf16 (FlashAttention's rule) -----------------------------------------
// Forward (O, L): at most twice the naive implementation's error.
constexpr double kFlashFwdFactor = 2.0;
// Backward (dQ, dK, dV, D): three times: the gradients go through more roundings to 16 bits
// than the forward does (P and dS are both MMA inputs).
constexpr double kFlashBwdFactor = 3.0;
// The floor of the bound, forward and backward: it keeps the bound above 0 where the naive error
// is 0 (one key: O is V's row exactly, and an fp32-accumulating kernel may still be off by a
// rounding), and it is fp32's O bound above.
constexpr double kFlashFloor = 1e-4;

// ---- GEMM (chapter 03) -----------------------------------------------------------------------
// An entry of C is a K-long dot product whose rounding error grows like sqrt(K): the absolute
// parts scale by sqrt(K) (harness_gemm.cpp), fp32 by allclose, 16-bit inputs by the rule above.
constexpr double kGemmAtolPerSqrtK = 1e-4;
constexpr double kGemmRtol = 1e-4;
constexpr double kGemmFlashFactor = 2.0;

// ---- Row softmax (chapters 01, 02) -------------------------------------------------------------
// y is in [0, 1] and sums to 1 per row: the relative part judges every entry that is not tiny,
// and the absolute 1e-9 only the entries near 0 (an fp32 exp of a very negative score).
constexpr double kSoftmaxAtol = 1e-9;
constexpr double kSoftmaxRtol = 2e-5;

}  // namespace fa::tol
