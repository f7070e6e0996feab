// reference.h: the float64 references every kernel is checked against (Eigen, on the CPU), and the
// "naive same-precision" implementations that set the fp16/bf16 tolerance (see compare.h).
//
// Inputs are the float values the kernel sees (already rounded to its dtype); outputs are double.
// Semantics, defined once here and documented in notes/conventions.md:
//  * softmax of a row that is entirely -inf is all zeros (there is no distribution to return);
//  * causal attention is bottom-right aligned (shapes.h); a query row that sees no key has O = 0
//    and L = -inf, and contributes nothing to any gradient.
#pragma once
#include <cstdint>
#include <vector>

#include "dtype.h"
#include "shapes.h"

namespace fa {

// ---- softmax and GEMM ----
std::vector<double> softmax_rows_ref(const float* x, SoftmaxShape s);
std::vector<double> gemm_ref(const float* A, const float* B, GemmShape s);
// fp32 accumulation in plain k order: what a straightforward 16-bit-input GEMM computes.
std::vector<float> gemm_naive_fp32(const float* A, const float* B, GemmShape s);

// ---- attention, one (batch, head) at a time ----
// q is [seq_q, d], k and v are [seq_k, d], all row-major and contiguous (one head's slice).
struct HeadView {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t seq_q = 0, seq_k = 0, d = 0;
  bool causal = false;
  double scale = 1.0;
  int64_t window_left = -1, window_right = -1;  // the sliding window of shapes.h (-1: none)
};
// The view of query head bh = b * heads + h: its Q slice and the K/V slice of the K/V head it
// reads (s.kv_index(bh); the same head unless heads_kv < heads, see shapes.h).
HeadView head_view(const AttentionShape& s, const float* q, const float* k, const float* v,
                   int64_t bh);

// O and L of the query rows listed in `rows` (all rows when empty): O is [rows, d], L is [rows].
void attention_forward_ref_head(const HeadView& h, const std::vector<int64_t>& rows, double* O,
                                double* L);
// The same computed the way a naive 16-bit implementation would: S = QK^T rounded to `t`,
// softmax in fp32 rounded to `t`, O = PV accumulated in fp32 and rounded to `t`.
void attention_forward_lowp_head(const HeadView& h, DType t, const std::vector<int64_t>& rows,
                                 float* O, float* L);

// Gradients for one head given dO [seq_q, d]: dQ [seq_q, d], dK and dV [seq_k, d], D [seq_q].
void attention_backward_ref_head(const HeadView& h, const float* dO, double* dQ, double* dK,
                                 double* dV, double* D);
void attention_backward_lowp_head(const HeadView& h, const float* dO, DType t, float* dQ, float* dK,
                                  float* dV, float* D);

// ---- whole tensors (every head), for tests and small problems ----
struct AttentionFwdRef {
  std::vector<double> O, L;
};
AttentionFwdRef attention_forward_ref(const float* q, const float* k, const float* v,
                                      const AttentionShape& s);
struct AttentionBwdRef {
  std::vector<double> dQ, dK, dV, D;
};
// Backward; with grouped K/V heads, dK and dV of a K/V head are summed over its query heads.
AttentionBwdRef attention_backward_ref(const float* q, const float* k, const float* v,
                                       const float* dO, const AttentionShape& s);

}  // namespace fa
