// v1_fp32.cu: 06/v1_fp32, the FlashAttention-2 backward pass in plain fp32 (the teaching kernel).
//
// What is new compared with the forward of chapter 05: nothing is stored between the passes but
// O and the log-sum-exp L. The backward recomputes P = exp(scale Q K^T - L) tile by tile, and
// runs as three kernels on one stream:
//   1. preprocess  D_i = rowsum(dO_i o O_i)                        (delta_preprocess.cu)
//   2. dK, dV      one block per K/V tile, looping over the Q tiles that can see it
//   3. dQ          one block per Q tile, looping over the K/V tiles it can see
// Splitting dK/dV from dQ means every output element is owned by exactly one thread, which sums
// it in a fixed order: no atomics, so the result is bitwise the same on every run. The price is
// that S, P and dP are computed twice (once in each kernel). The kernels are in
// v1_fp32_common.cuh; 06/v1_fp32_atomic_dq is the one-kernel alternative with atomics.
//
// Scalar fp32 FMAs, no tensor cores: the later rungs (v2 to v5) are the fast ones.
// Speed (H100 80GB HBM3, 2026-11-21): D 128 N 2048 fp32 12.8 TFLOP/s, causal 12.1 (fa_bench,
// notes/measured/h100-2026-11-21/bench.log).
//
// EXERCISE-KERNELS: 06/v1_fp32, 06/v1_fp32_atomic_dq
// (The exercise also covers v1_fp32_common.cuh: exercises/v1_fp32.cu includes the exercise copy
// of that header, which sits next to it.)
#include "ch06_preprocess.h"
#include "check.h"
#include "registry.h"
#include "v1_fp32_common.cuh"

namespace fa {
namespace ch06_v1 {

BwdParams make_params(const AttentionBwdArgs& a) {
  BwdParams p;
  p.q = static_cast<const float*>(a.q);
  p.k = static_cast<const float*>(a.k);
  p.v = static_cast<const float*>(a.v);
  p.dout = static_cast<const float*>(a.dout);
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq = static_cast<float*>(a.dq);
  p.dk = static_cast<float*>(a.dk);
  p.dv = static_cast<float*>(a.dv);
  p.dq_accum = a.workspace;
  p.seq_q = a.shape.seq_q;
  p.seq_k = a.shape.seq_k;
  p.scale = a.shape.softmax_scale();
  p.causal = a.shape.causal;
  return p;
}

// Grid of (tiles per head) * (batch * heads) blocks, all on gridDim.x (limit 2^31 - 1).
unsigned grid_for(int64_t tiles_per_head, int64_t bh) {
  const int64_t blocks = tiles_per_head * bh;
  FA_REQUIRE(blocks <= 0x7fffffff, "too many blocks for gridDim.x");
  return static_cast<unsigned>(blocks);
}

template <int D>
void launch_dkdv_dq(const BwdParams& p, int64_t bh, cudaStream_t st) {
  if (p.seq_k > 0) {
    dkdv_kernel<D><<<grid_for(ceil_div(p.seq_k, kBc), bh), kThreads, 0, st>>>(p);
    FA_CHECK_LAUNCH();
  }
  if (p.seq_q > 0) {
    dq_kernel<D><<<grid_for(ceil_div(p.seq_q, kBr), bh), kThreads, 0, st>>>(p);
    FA_CHECK_LAUNCH();
  }
}

// Step 1, the preprocess: D for every row, before the dK/dV and dQ kernels run. 06/v1_fp32_atomic_dq
// runs the same step, from here.
void compute_delta(const AttentionBwdArgs& a, cudaStream_t st) {
  // EXERCISE(delta): dS needs a per-row scalar D that the forward's output makes cheap to get; compute it before the dK/dV and dQ kernels run (the chapter already has a kernel for it)
  launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, st);
  // EXERCISE-PLACEHOLDER
  // (void)a, (void)st;  // stand-in: D is never computed
  // EXERCISE-END
}

void run_v1_fp32(const AttentionBwdArgs& a, cudaStream_t st) {
  FA_UNSUPPORTED_IF(a.dtype != DType::F32, "06/v1_fp32 takes fp32 only");
  const AttentionShape& s = a.shape;
  if (s.bh() == 0) return;
  const BwdParams p = make_params(a);
  compute_delta(a, st);
  switch (s.head_dim) {
    case 32:
      launch_dkdv_dq<32>(p, s.bh(), st);
      break;
    case 64:
      launch_dkdv_dq<64>(p, s.bh(), st);
      break;
    case 96:
      launch_dkdv_dq<96>(p, s.bh(), st);
      break;
    case 128:
      launch_dkdv_dq<128>(p, s.bh(), st);
      break;
    default:
      FA_UNSUPPORTED_IF(true, "06/v1_fp32 has head dims 32, 64, 96, 128");
  }
}

}  // namespace ch06_v1
}  // namespace fa

FA_REGISTER(AttentionBwdKernel, {"06/v1_fp32",
                                 fa::ch06_v1::run_v1_fp32,
                                 "fp32 FA-2 backward: D preprocess, dK/dV kernel, dQ kernel",
                                 {fa::DType::F32},
                                 {32, 64, 96, 128},
                                 70,
                                 true});
