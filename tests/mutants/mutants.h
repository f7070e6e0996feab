// mutants.h: deliberately WRONG kernels, each with one classic mistake, and correct twins built
// the same way. They are NOT registered (the chapter programs, the generic tests and the
// benchmarks never see them): tests/gpu/test_mutants_gpu.cpp wraps each launcher in an ad-hoc
// fa::SoftmaxKernel / AttentionFwdKernel / AttentionBwdKernel and hands it straight to the harness,
// which must REJECT every mutant and accept every twin. If a mutant ever passes, the harness has a
// blind spot: that is the point of mutation testing.
//
// Every attention launcher here takes head_dim 64 only (fa::Unsupported otherwise).
#pragma once
#include <cuda_runtime_api.h>

#include "registry.h"

namespace mutants {

constexpr int kHeadDim = 64;

// ---- Row softmax, fp32, one thread per row. ---------------------------------------------------
// Correct twin: online max/sum with the rescale, -inf rows give zeros.
void softmax_online_correct(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st);
// (a) exp(x) without subtracting the row max: exp overflows to inf past x = 88.7, inf/inf = NaN.
void softmax_no_max_subtraction(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st);
// (b) online softmax that forgets to rescale l by exp(m_old - m_new) when the max grows.
void softmax_online_no_rescale(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st);

// ---- Attention forward, one thread per query row (fp32 or fp16 inputs). ---------------------
// Correct twin: online softmax, fp32 accumulators, bottom-right causal mask.
void attn_fwd_correct(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (c) causal mask off by one: query i also sees key i + (seq_k - seq_q) + 1.
void attn_fwd_causal_off_by_one(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (e) O accumulated in __half: small terms vanish once the sum is large (long sequences).
void attn_fwd_half_accumulator(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (f) launches only full 64-row tiles: the ragged tail rows are never written (poison NaN stays).
void attn_fwd_skips_tail_rows(const fa::AttentionFwdArgs& a, cudaStream_t st);

// ---- Attention forward, fp32, K/V tiles staged in shared memory. -------------------------------
// Correct twin: __syncthreads after loading a tile AND after using it.
void attn_fwd_tiled_synced(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (d) no __syncthreads after using a tile: a fast warp overwrites K/V while a slow warp still reads
// them (write-after-read race). Often gives the right answer anyway; racecheck always reports it.
void attn_fwd_tiled_missing_sync(const fa::AttentionFwdArgs& a, cudaStream_t st);

// ---- Attention backward, fp32, one thread per query row (dK, dV by atomics). --------------------
// Correct twin: D = rowsum(dO * O).
void attn_bwd_correct(const fa::AttentionBwdArgs& a, cudaStream_t st);
// (g) D computed from the wrong tensor: rowsum(dO * dO).
void attn_bwd_delta_from_dout(const fa::AttentionBwdArgs& a, cudaStream_t st);

}  // namespace mutants
