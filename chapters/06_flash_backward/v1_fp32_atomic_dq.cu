// v1_fp32_atomic_dq.cu: 06/v1_fp32_atomic_dq, the same backward with dQ computed inside the
// dK/dV kernel and accumulated with fp32 atomicAdd (the FlashAttention-2 paper's single-pass
// formulation).
//
// What changed vs 06/v1_fp32: the dQ kernel is gone. The dK/dV block that computes ds_ij for its
// K tile also forms dQ_i += scale ds_ij k_j, sums it over the block's keys (warp shuffles), and
// adds the result into an fp32 workspace (args.workspace, zeroed by the harness before every
// call) with atomicAdd. A last small kernel copies the workspace to dq.
//
// Why bother: S, P and dP are computed once instead of twice. Why it is not the default here:
// the blocks of different K tiles add into the same dQ_i in whatever order the hardware runs
// them, and float addition is not associative, so two runs may differ in the last bits
// (deterministic = false; tests/gpu/test_ch06_determinism.cpp prints whether they did).
// Speed (H100, 2026-11-21): 3.8 TFLOP/s fp32 D128 N2048 (3.7 causal), against 12.8 for
// 06/v1_fp32 (fa_bench; notes/measured/h100-2026-11-21/bench.log).
#include <algorithm>

#include "ch06_preprocess.h"
#include "check.h"
#include "registry.h"
#include "v1_fp32_common.cuh"

namespace fa {
namespace ch06_v1 {

BwdParams make_params(const AttentionBwdArgs& a);  // v1_fp32.cu
unsigned grid_for(int64_t tiles_per_head, int64_t bh);

namespace {

// The atomic variant accumulated dQ in an fp32 workspace; copy it to the output.
__global__ void copy_workspace_kernel(const float* __restrict__ ws, float* __restrict__ dq,
                                      int64_t n) {
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n;
       x += int64_t(gridDim.x) * blockDim.x)
    dq[x] = ws[x];
}

template <int D>
void launch_atomic(const BwdParams& p, int64_t bh, cudaStream_t st) {
  if (p.seq_k > 0) {
    dkdv_kernel<D, true><<<grid_for(ceil_div(p.seq_k, kBc), bh), kThreads, 0, st>>>(p);
    FA_CHECK_LAUNCH();
  }
}

void run_v1_fp32_atomic_dq(const AttentionBwdArgs& a, cudaStream_t st) {
  FA_UNSUPPORTED_IF(a.dtype != DType::F32, "06/v1_fp32_atomic_dq takes fp32 only");
  FA_REQUIRE(a.workspace != nullptr, "needs the fp32 workspace for the dQ accumulator");
  const AttentionShape& s = a.shape;
  if (s.bh() == 0) return;
  const BwdParams p = make_params(a);
  launch_delta_preprocess(a.o, a.dout, a.delta, s, a.dtype, st);
  switch (s.head_dim) {
    case 32:
      launch_atomic<32>(p, s.bh(), st);
      break;
    case 64:
      launch_atomic<64>(p, s.bh(), st);
      break;
    case 96:
      launch_atomic<96>(p, s.bh(), st);
      break;
    case 128:
      launch_atomic<128>(p, s.bh(), st);
      break;
    default:
      FA_UNSUPPORTED_IF(true, "06/v1_fp32_atomic_dq has head dims 32, 64, 96, 128");
  }
  const int64_t n = s.q_numel();
  if (n > 0) {
    constexpr int kCopyThreads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(n, kCopyThreads), int64_t(1) << 20);
    copy_workspace_kernel<<<static_cast<unsigned>(blocks), kCopyThreads, 0, st>>>(
        a.workspace, static_cast<float*>(a.dq), n);
    FA_CHECK_LAUNCH();
  }
}

}  // namespace
}  // namespace ch06_v1
}  // namespace fa

FA_REGISTER(AttentionBwdKernel, {"06/v1_fp32_atomic_dq",
                                 fa::ch06_v1::run_v1_fp32_atomic_dq,
                                 "fp32 backward, dQ by atomicAdd inside the dK/dV kernel",
                                 {fa::DType::F32},
                                 {32, 64, 96, 128},
                                 70,
                                 false});
