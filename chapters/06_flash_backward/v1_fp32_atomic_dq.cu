// v1_fp32_atomic_dq.cu: 06/v1_fp32_atomic_dq, v1's other way out: dQ computed inside the dK/dV
// kernel and accumulated with fp32 atomicAdd (the FlashAttention-2 paper's single-pass
// formulation), in the same fp32 CUDA-core code as 06/v1_fp32.
//
// What changed vs 06/v1_fp32: the dQ kernel is gone. The dK/dV block that computes ds_ij for its
// K tile also forms dQ_i += scale ds_ij k_j, sums it over the block's keys (warp shuffles), and
// adds the result into an fp32 workspace (args.workspace, zeroed by the harness before every
// call) with atomicAdd. A last small kernel copies the workspace to dq.
//
// Why bother: S, P and dP are computed once instead of twice. Why it is not the default here:
// the blocks of different K tiles add into the same dQ_i in whatever order the hardware runs
// them, and float addition is not associative, so two runs may differ in the last bits
// (deterministic = false; tests/gpu/test_ch06_determinism.cpp prints whether they did). And on
// CUDA cores it is slower, not faster: a row's dQ takes kCols atomics per key row, each after
// three shuffles, where v1's dQ kernel keeps its sum in registers. The same idea on tensor cores,
// with dS through shared memory so that a whole tile of dQ is one product, is 06/v3_atomic_dq.
//
// The map: compute_delta (D, v1_fp32.cu), dkdv_dq_kernel (v1's dkdv_kernel, v1_fp32_common.cuh,
// with the dQ atomics after dS), copy_workspace_kernel. The tile, BwdParams, group_sum and prob
// are v1's (v1_fp32_common.cuh), and so are make_params and grid_for (v1_fp32.cu).
//
// Speed (H100 80GB HBM3, 2026-11-21): D 128 N 2048 fp32 3.8 TFLOP/s, 06/v1_fp32 12.8 (fa_bench,
// notes/measured/h100-2026-11-21/bench.log).
#include <algorithm>

#include "check.h"
#include "registry.h"
#include "v1_fp32_common.cuh"

namespace fa {
namespace ch06_v1 {

BwdParams make_params(const AttentionBwdArgs& a);  // v1_fp32.cu
unsigned grid_for(int64_t tiles_per_head, int64_t bh);
void compute_delta(const AttentionBwdArgs& a, cudaStream_t st);

namespace {

// ---------------------------------------------------------------------------------------------
// dK and dV of one K/V tile, as v1's dkdv_kernel, and this tile's share of dQ:
//   for each visible Q tile, for each row i of it:
//     s = scale q_i.k_j,  p = exp(s - L_i),  dp = dO_i.v_j,  ds = p (dp - D_i)
//     dV_j += p dO_i,  dK_j += ds q_i                       (dK gets its scale at the end)
//     dQ_i += scale ds k_j, summed over the block's keys and added to the fp32 workspace with
//     atomicAdd (blocks of different K tiles add into the same dQ_i: order not fixed).
template <int D>
__global__ void __launch_bounds__(kThreads) dkdv_dq_kernel(BwdParams p) {
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
      const float ds = ds_dkdv(pij, dp, D_s[r], q_s[r], do_s[r], g, dk, dv);
      // dQ_i += scale * sum_j ds_ij k_j: first sum the warp's 8 key rows with shuffles (lanes
      // g, g+4, ..., g+28 hold the same columns), then lanes 0..3 add the warp's share.
      const int lane = threadIdx.x % 32;
      float* dq_row = p.dq_accum + (bh * p.seq_q + i) * D;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        float part = ds * k_r[c];
        part += __shfl_xor_sync(0xffffffffu, part, 4);
        part += __shfl_xor_sync(0xffffffffu, part, 8);
        part += __shfl_xor_sync(0xffffffffu, part, 16);
        if (lane < kGroup) atomicAdd(dq_row + g + kGroup * c, p.scale * part);
      }
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
    dkdv_dq_kernel<D><<<grid_for(ceil_div(p.seq_k, kBc), bh), kThreads, 0, st>>>(p);
    FA_CHECK_LAUNCH();
  }
}

void run_v1_fp32_atomic_dq(const AttentionBwdArgs& a, cudaStream_t st) {
  FA_UNSUPPORTED_IF(a.dtype != DType::F32, "06/v1_fp32_atomic_dq takes fp32 only");
  FA_REQUIRE(a.workspace != nullptr, "needs the fp32 workspace for the dQ accumulator");
  const AttentionShape& s = a.shape;
  if (s.bh() == 0) return;
  const BwdParams p = make_params(a);
  compute_delta(a, st);
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
