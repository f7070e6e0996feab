// GENERATED from chapters/06_flash_backward/v1_fp32_common.cuh by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// v1_fp32_common.cuh: the fp32 FlashAttention-2 backward kernels of 06/v1_fp32 (v1_fp32.cu), the
// teaching version. 06/v1_fp32_atomic_dq (v1_fp32_atomic_dq.cu) uses its tile, BwdParams, group_sum
// and prob for its one kernel.
//
// Map of this file
//   BwdParams               the pointers and sizes every kernel reads
//   group_sum               sum over the kGroup threads that share one row
//   prob                    P_ij from the saved L_i
//   dkdv_kernel<D>          one block per (K/V tile of Bc rows, batch*head); loops over Q tiles
//   dq_kernel<D>            one block per (Q tile of Br rows, batch*head); loops over K/V tiles
//
// Thread layout (both kernels): kGroup = 4 consecutive threads own one row (a key row j in
// dkdv_kernel, a query row i in dq_kernel). Thread g of the group owns the columns
// d = g, g + 4, g + 8, ... so a row's dot product is 4 partial sums and two shuffles, each thread
// keeps only D/4 values of each vector in registers, and when the 8 groups of a warp read the
// same shared row the 4 distinct addresses sit in 4 consecutive banks (no bank conflicts).
//
// Everything is recomputed from the saved L: P_ij = exp(scale q_i.k_j - L_i), never stored.
// EXERCISE-KERNELS: 06/v1_fp32, 06/v1_fp32_atomic_dq
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "shapes.h"

namespace fa {
namespace ch06_v1 {

constexpr int kGroup = 4;               // threads per row
constexpr int kBr = 32;                 // query rows per tile
constexpr int kBc = 32;                 // key rows per tile
constexpr int kThreads = kBc * kGroup;  // = kBr * kGroup = 128 threads per block
static_assert(kBr == kBc, "both kernels use kThreads = rows per tile * kGroup");

struct BwdParams {
  const float* q;
  const float* k;
  const float* v;
  const float* dout;
  const float* lse;    // L, [bh, seq_q]
  const float* delta;  // D, [bh, seq_q], written by the preprocess
  float* dq;
  float* dk;
  float* dv;
  float* dq_accum;  // fp32 workspace: the dQ accumulator of 06/v1_fp32_atomic_dq
  int64_t seq_q, seq_k;
  float scale;
  bool causal;
};

// Sum over the kGroup = 4 consecutive lanes that share a row. Every lane of the warp must call it.
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// P_ij from the saved L_i, or 0 when j is masked, out of range, or the row sees no key (L = -inf:
// exp(S - L) would be exp(-inf + inf) = NaN).
__device__ __forceinline__ float prob(float s_scaled, float L, bool visible) {
  // TODO(exercise recompute-p): rebuild the probability from the scaled score and the row's saved log-sum-exp, with no maximum or sum to recompute; masked entries and rows that saw no key give 0, never NaN
  return 0.0f;  // stand-in: P = 0
}

// One (query row i, key row j) pair of the dK/dV loop: dS_ij from P_ij, dP_ij and D_i, and row i's
// terms of dV_j and dK_j. q_row and do_row are row i of Q and dO in shared memory; the thread owns
// the columns g, g + kGroup, g + 2 kGroup, ... Returns dS_ij, which 06/v1_fp32_atomic_dq also
// turns into its dQ term: both kernels take dK and dV from here, so neither repeats the other.
template <int kCols>
__device__ __forceinline__ float ds_dkdv(float pij, float dp, float Di, const float* q_row,
                                         const float* do_row, int g, float (&dk)[kCols],
                                         float (&dv)[kCols]) {
  // TODO(exercise ds-dkdv): form dS for this (query, key) pair from P, dP and the row's D (the softmax's Jacobian); then add this query row's contributions to the key's dV and dK: differentiate O = P V with respect to V and S = Q K^T with respect to K (the softmax scale is applied once, at the store); return dS
  (void)pij, (void)dp, (void)Di, (void)q_row, (void)do_row, (void)g, (void)dk, (void)dv;
  return 0.0f;  // stand-in: dS = 0, dK and dV stay 0
}

// ---------------------------------------------------------------------------------------------
// dK and dV of one K/V tile. The block keeps its Bc rows of K and V and their dK, dV accumulators
// in registers for the whole kernel and streams the Q tiles (Q, dO, L, D) through shared memory:
//   for each visible Q tile, for each row i of it:
//     s = scale q_i.k_j,  p = exp(s - L_i),  dp = dO_i.v_j,  ds = p (dp - D_i)
//     dV_j += p dO_i,  dK_j += ds q_i                       (dK gets its scale at the end)
template <int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(BwdParams p) {
  constexpr int kCols = D / kGroup;  // columns of a row each thread owns
  static_assert(D % kGroup == 0, "head dim must be a multiple of kGroup");
  __shared__ float q_s[kBr][D];
  __shared__ float do_s[kBr][D];
  __shared__ float L_s[kBr];
  __shared__ float D_s[kBr];

  const int64_t n_ktiles = ceil_div(p.seq_k, kBc);
  const int64_t bh = int64_t(blockIdx.x) / n_ktiles;  // batch*head on gridDim.x: no 65535 limit
  const int64_t k0 = (int64_t(blockIdx.x) % n_ktiles) * kBc;
  const int g = threadIdx.x % kGroup;
  const int64_t j = k0 + threadIdx.x / kGroup;  // this group's key row
  const bool valid_j = j < p.seq_k;  // causal: query i sees key j iff j <= causal_last_key(i)

  const float* Q = p.q + bh * p.seq_q * D;
  const float* dO = p.dout + bh * p.seq_q * D;
  const float* Lrow = p.lse + bh * p.seq_q;
  const float* Drow = p.delta + bh * p.seq_q;

  float k_r[kCols], v_r[kCols], dk[kCols], dv[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int64_t off = (bh * p.seq_k + j) * D + g + kGroup * c;
    k_r[c] = valid_j ? p.k[off] : 0.0f;
    v_r[c] = valid_j ? p.v[off] : 0.0f;
    dk[c] = 0.0f;
    dv[c] = 0.0f;
  }

  // Causal: the first query that sees key k0 is causal_first_query(k0); the Q tiles before it see
  // nothing of this K tile (fully masked) and are skipped. A K tile no query sees loops zero times
  // and writes dK = dV = 0.
  const int64_t i_first =
      p.causal ? max(int64_t(0), causal_first_query(k0, p.seq_q, p.seq_k)) : int64_t(0);
  for (int64_t q0 = (i_first / kBr) * kBr; q0 < p.seq_q; q0 += kBr) {
    __syncthreads();  // everyone is done with the previous Q tile
    for (int x = threadIdx.x; x < kBr * D; x += kThreads) {
      const int r = x / D, d = x % D;
      const int64_t i = q0 + r;
      q_s[r][d] = i < p.seq_q ? Q[i * D + d] : 0.0f;
      do_s[r][d] = i < p.seq_q ? dO[i * D + d] : 0.0f;
    }
    for (int r = threadIdx.x; r < kBr; r += kThreads) {
      const int64_t i = q0 + r;
      L_s[r] = i < p.seq_q ? Lrow[i] : -INFINITY;
      D_s[r] = i < p.seq_q ? Drow[i] : 0.0f;
    }
    __syncthreads();

    const int rows = int(min(int64_t(kBr), p.seq_q - q0));  // the same for the whole block
    for (int r = 0; r < rows; ++r) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        s += q_s[r][g + kGroup * c] * k_r[c];
        dp += do_s[r][g + kGroup * c] * v_r[c];
      }
      s = group_sum(s);
      dp = group_sum(dp);
      const int64_t i = q0 + r;
      const bool visible = valid_j && (!p.causal || j <= causal_last_key(i, p.seq_q, p.seq_k));
      const float pij = prob(s * p.scale, L_s[r], visible);
      ds_dkdv(pij, dp, D_s[r], q_s[r], do_s[r], g, dk, dv);
    }
  }

  if (valid_j) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int64_t off = (bh * p.seq_k + j) * D + g + kGroup * c;
      p.dk[off] = p.scale * dk[c];  // dK = scale dS^T Q: the scale once, at the end
      p.dv[off] = dv[c];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dQ of one Q tile. The block keeps its Br rows of Q and dO (and L_i, D_i) in registers, with the
// dQ accumulator, and streams the K/V tiles through shared memory:
//   for each visible K/V tile, for each key j of it:  dQ_i += ds_ij k_j   (scale at the end)
// Each dQ_i is summed by one thread group in a fixed order: bitwise deterministic.
template <int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(BwdParams p) {
  constexpr int kCols = D / kGroup;
  __shared__ float k_s[kBc][D];
  __shared__ float v_s[kBc][D];

  const int64_t n_qtiles = ceil_div(p.seq_q, kBr);
  const int64_t bh = int64_t(blockIdx.x) / n_qtiles;
  const int64_t q0 = (int64_t(blockIdx.x) % n_qtiles) * kBr;
  const int g = threadIdx.x % kGroup;
  const int64_t i = q0 + threadIdx.x / kGroup;  // this group's query row
  const bool valid_i = i < p.seq_q;

  const float* K = p.k + bh * p.seq_k * D;
  const float* V = p.v + bh * p.seq_k * D;
  const float Li = valid_i ? p.lse[bh * p.seq_q + i] : -INFINITY;
  const float Di = valid_i ? p.delta[bh * p.seq_q + i] : 0.0f;

  float q_r[kCols], do_r[kCols], dq[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int64_t off = (bh * p.seq_q + i) * D + g + kGroup * c;
    q_r[c] = valid_i ? p.q[off] : 0.0f;
    do_r[c] = valid_i ? p.dout[off] : 0.0f;
    dq[c] = 0.0f;
  }

  // Causal: the last key any row of this tile sees is causal_last_key(its last row); K tiles
  // after it are fully masked and skipped.
  const int64_t last_row = min(q0 + kBr, p.seq_q) - 1;
  const int64_t k_end =
      p.causal ? min(p.seq_k, causal_last_key(last_row, p.seq_q, p.seq_k) + 1) : p.seq_k;
  for (int64_t k0 = 0; k0 < k_end; k0 += kBc) {
    __syncthreads();
    for (int x = threadIdx.x; x < kBc * D; x += kThreads) {
      const int c = x / D, d = x % D;
      const int64_t jj = k0 + c;
      k_s[c][d] = jj < p.seq_k ? K[jj * D + d] : 0.0f;
      v_s[c][d] = jj < p.seq_k ? V[jj * D + d] : 0.0f;
    }
    __syncthreads();

    const int cols = int(min(int64_t(kBc), p.seq_k - k0));
    for (int cc = 0; cc < cols; ++cc) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        s += q_r[c] * k_s[cc][g + kGroup * c];
        dp += do_r[c] * v_s[cc][g + kGroup * c];
      }
      s = group_sum(s);
      dp = group_sum(dp);
      const int64_t j = k0 + cc;
      const bool visible = valid_i && (!p.causal || j <= causal_last_key(i, p.seq_q, p.seq_k));
      const float pij = prob(s * p.scale, Li, visible);
      // TODO(exercise ds-dq): the same dS, seen from the query side: add this key's contribution to the query's dQ by differentiating S = Q K^T with respect to Q (the scale is applied at the store)
      (void)pij, (void)dp, (void)Di;  // stand-in: dQ stays 0
    }
  }

  if (valid_i) {
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      p.dq[(bh * p.seq_q + i) * D + g + kGroup * c] = p.scale * dq[c];  // dQ = scale dS K
  }
}

}  // namespace ch06_v1
}  // namespace fa

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/06_flash_backward/exercises/v1_fp32_common.cuh", {"06/v1_fp32", "06/v1_fp32_atomic_dq"}, 3});
