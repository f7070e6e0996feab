// attention_bwd_mutants.cu: the simplest attention backward (fp32, head_dim 64), one thread per
// query row, recomputing P from the forward's L:
//   D_i  = rowsum(dO_i * O_i)
//   P_ij = exp(scale * q_i.k_j - L_i),  dP_ij = dO_i.v_j,  dS_ij = P_ij (dP_ij - D_i)
//   dQ_i = scale * sum_j dS_ij k_j      (this thread's own row: a plain store)
//   dK_j += scale * dS_ij q_i,  dV_j += P_ij dO_i   (shared by all rows: fp32 atomics)
//   attn_bwd_correct          the twin that must pass
//   attn_bwd_delta_from_dout  (g) D = rowsum(dO * dO): the wrong tensor; D, dQ and dK all go wrong
#include <cstdint>

#include "check.h"
#include "mutants.h"

namespace mutants {
namespace {

constexpr int kD = kHeadDim;
constexpr int kRowsPerBlock = 64;

template <bool kDeltaFromDout>
__global__ void attn_bwd_row_per_thread(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, const float* __restrict__ o,
                                        const float* __restrict__ dout,
                                        const float* __restrict__ lse, float* __restrict__ dq,
                                        float* dk, float* dv, float* __restrict__ delta,
                                        int64_t seq_q, int64_t seq_k, bool causal, float scale) {
  const int64_t bh = blockIdx.x;
  const int64_t i = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (i >= seq_q) return;
  const int64_t row = (bh * seq_q + i) * kD;
  const float* kh = k + bh * seq_k * kD;
  const float* vh = v + bh * seq_k * kD;
  float* dkh = dk + bh * seq_k * kD;
  float* dvh = dv + bh * seq_k * kD;

  float qi[kD], doi[kD], dqi[kD];
  float D = 0.0f;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    qi[d] = q[row + d];
    doi[d] = dout[row + d];
    dqi[d] = 0.0f;
    D += doi[d] * (kDeltaFromDout ? doi[d] : o[row + d]);  // (g) BUG when kDeltaFromDout
  }
  delta[bh * seq_q + i] = D;

  const float L = lse[bh * seq_q + i];
  int64_t last = causal ? fa::causal_last_key(i, seq_q, seq_k) : seq_k - 1;
  if (last > seq_k - 1) last = seq_k - 1;  // last < 0: the row saw no key and has no gradient
  for (int64_t j = 0; j <= last; ++j) {
    const float* kj = kh + j * kD;
    const float* vj = vh + j * kD;
    float s = 0.0f, dp = 0.0f;
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      s += qi[d] * kj[d];
      dp += doi[d] * vj[d];
    }
    const float p = expf(s * scale - L);
    const float ds = p * (dp - D);
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      dqi[d] += ds * kj[d];
      atomicAdd(&dkh[j * kD + d], scale * ds * qi[d]);
      atomicAdd(&dvh[j * kD + d], p * doi[d]);
    }
  }
#pragma unroll
  for (int d = 0; d < kD; ++d) dq[row + d] = scale * dqi[d];
}

template <bool kDeltaFromDout>
void launch(const fa::AttentionBwdArgs& a, cudaStream_t st) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(s.head_dim != kD, "mutant kernels take head_dim 64 only");
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::F32, "the backward mutant takes fp32 only");
  // dK and dV are sums over query rows, built by atomics: start from zero (the harness poisons
  // every output with NaN before the run, precisely to catch a kernel that forgets this).
  FA_CUDA_CHECK(cudaMemsetAsync(a.dk, 0, s.k_numel() * sizeof(float), st));
  FA_CUDA_CHECK(cudaMemsetAsync(a.dv, 0, s.k_numel() * sizeof(float), st));
  const int64_t row_blocks = (s.seq_q + kRowsPerBlock - 1) / kRowsPerBlock;
  if (s.bh() == 0 || row_blocks == 0) return;
  FA_REQUIRE(row_blocks <= 65535, "too many query rows for gridDim.y");
  const dim3 grid(static_cast<unsigned>(s.bh()), static_cast<unsigned>(row_blocks));
  attn_bwd_row_per_thread<kDeltaFromDout><<<grid, kRowsPerBlock, 0, st>>>(
      static_cast<const float*>(a.q), static_cast<const float*>(a.k),
      static_cast<const float*>(a.v), static_cast<const float*>(a.o),
      static_cast<const float*>(a.dout), a.lse, static_cast<float*>(a.dq),
      static_cast<float*>(a.dk), static_cast<float*>(a.dv), a.delta, s.seq_q, s.seq_k, s.causal,
      s.softmax_scale());
  FA_CHECK_LAUNCH();
}

}  // namespace

void attn_bwd_correct(const fa::AttentionBwdArgs& a, cudaStream_t st) {
  launch<false>(a, st);
}
void attn_bwd_delta_from_dout(const fa::AttentionBwdArgs& a, cudaStream_t st) {
  launch<true>(a, st);
}

}  // namespace mutants

FA_REGISTER_MUTANT(AttentionBwdKernel, {"mutant/06_delta_from_dout",
                                        mutants::attn_bwd_delta_from_dout,
                                        "D = rowsum(dO * dO) instead of rowsum(dO * O)",
                                        {fa::DType::F32},
                                        {mutants::kHeadDim},
                                        70,
                                        /*deterministic=*/false});
