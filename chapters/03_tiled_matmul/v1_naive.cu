// 03/v1_naive: one thread per output element, straight from the definition
//   C[i][j] = sum_k A[i][k] * B[k][j].
// What it teaches: the baseline. Every thread reads a full row of A and a full column of B from
// global memory, so each element of A is read N times and each element of B M times: 2*M*N*K
// loads for 2*M*N*K flops, an arithmetic intensity of 1 flop per 4 bytes (fp32). Threads with
// consecutive threadIdx.x take consecutive columns j, so the loads of B and the stores of C are
// coalesced and the loads of A are broadcasts; the kernel is still bound by load traffic
// (mostly served by L1/L2, far from the FMA units' rate).
// Measured: see notes/03_tiled_matmul.md.
#include "ch03_common.cuh"
#include "check.h"
#include "registry.h"

namespace fa::ch03 {
namespace {

constexpr int kBlockX = 16;  // threads along the columns of C
constexpr int kBlockY = 16;  // threads along the rows of C

__global__ void gemm_naive_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
  const int64_t i = int64_t(blockIdx.y) * kBlockY + threadIdx.y;  // row of C
  const int64_t j = int64_t(blockIdx.x) * kBlockX + threadIdx.x;  // column of C
  if (i >= M || j >= N) return;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
  C[i * N + j] = acc;
}

void gemm_v1(const void* A, const void* B, float* C, GemmShape s, DType dtype,
             cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype != DType::F32, "03/v1_naive takes fp32 only");
  if (s.M == 0 || s.N == 0) return;
  FA_REQUIRE(ceil_div(s.M, kBlockY) <= kMaxGridY, "M too large for gridDim.y");
  dim3 block(kBlockX, kBlockY);
  dim3 grid(unsigned(ceil_div(s.N, kBlockX)), unsigned(ceil_div(s.M, kBlockY)));
  gemm_naive_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(A),
                                                static_cast<const float*>(B), C, s.M, s.N, s.K);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/v1_naive", gemm_v1, "one thread per output, all loads from global"});

}  // namespace fa::ch03
