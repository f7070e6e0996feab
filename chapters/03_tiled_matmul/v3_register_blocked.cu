// 03/v3_register_blocked: each thread computes an 8x8 block of C in registers.
// What changed vs v2: in v2 every FMA needs two shared-memory loads, so the shared-memory pipe,
// not the FMA units, sets the pace. Here a block of 256 threads owns a 128x128 tile of C and each
// thread an 8x8 sub-tile. For every k a thread loads 8 values of A and 8 of B from shared memory
// into registers and does 8*8 = 64 FMAs with them: 16 loads per 64 FMAs instead of 2 per 1.
// Global reuse grows too: every loaded element of A (B) serves 128 columns (rows) of C.
// The inner dimension is staged BK = 8 at a time (128x8 of A + 8x128 of B = 8 KiB of shared).
// Left for v4: the A tile is stored as in global memory ([row][k]), so the 8 A values a thread
// needs for one k are 8 separate loads strided by BK; global loads are scalar.
// Ragged edges: zero-filled loads, predicated stores.
// Speed (H200, 2026-12-02): 21.2 TFLOP/s fp32 at 4096^3, 41.2% of cuBLAS SGEMM
// (notes/measured/h200-2026-12-02/tour.log).
#include "ch03_common.cuh"
#include "check.h"
#include "registry.h"

namespace fa::ch03 {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8;         // block tile
constexpr int kTM = 8, kTN = 8;                      // outputs per thread
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 16 x 16 = 256
constexpr int kALoads = kBM * kBK / kThreads;        // A elements each thread loads per step: 4
constexpr int kBLoads = kBK * kBN / kThreads;        // B elements: 4

__global__ void __launch_bounds__(kThreads)
    gemm_regblock_kernel(const float* __restrict__ A, const float* __restrict__ B,
                         float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
  __shared__ float As[kBM][kBK];
  __shared__ float Bs[kBK][kBN];
  const int tid = threadIdx.x;
  const int tx = tid % (kBN / kTN);  // which 8 columns of the tile
  const int ty = tid / (kBN / kTN);  // which 8 rows
  const int64_t row0 = int64_t(blockIdx.y) * kBM;
  const int64_t col0 = int64_t(blockIdx.x) * kBN;

  float acc[kTM][kTN] = {};
  float a_reg[kTM], b_reg[kTN];

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
    for (int l = 0; l < kALoads; ++l) {  // 8 consecutive threads read one row's 8 k values
      const int idx = tid + l * kThreads;
      const int r = idx / kBK, c = idx % kBK;
      const int64_t gi = row0 + r, gk = k0 + c;
      As[r][c] = (gi < M && gk < K) ? A[gi * K + gk] : 0.0f;
    }
#pragma unroll
    for (int l = 0; l < kBLoads; ++l) {  // a warp reads 32 consecutive floats of one B row
      const int idx = tid + l * kThreads;
      const int r = idx / kBN, c = idx % kBN;
      const int64_t gk = k0 + r, gj = col0 + c;
      Bs[r][c] = (gk < K && gj < N) ? B[gk * N + gj] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
#pragma unroll
      for (int m = 0; m < kTM; ++m) a_reg[m] = As[ty * kTM + m][k];
#pragma unroll
      for (int n = 0; n < kTN; ++n) b_reg[n] = Bs[k][tx * kTN + n];
#pragma unroll
      for (int m = 0; m < kTM; ++m)
#pragma unroll
        for (int n = 0; n < kTN; ++n) acc[m][n] += a_reg[m] * b_reg[n];
    }
    __syncthreads();
  }
#pragma unroll
  for (int m = 0; m < kTM; ++m) {
    const int64_t gi = row0 + ty * kTM + m;
    if (gi >= M) continue;
#pragma unroll
    for (int n = 0; n < kTN; ++n) {
      const int64_t gj = col0 + tx * kTN + n;
      if (gj < N) C[gi * N + gj] = acc[m][n];
    }
  }
}

void gemm_v3(const void* A, const void* B, float* C, GemmShape s, DType dtype,
             cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype != DType::F32, "03/v3_register_blocked takes fp32 only");
  if (s.M == 0 || s.N == 0) return;
  FA_REQUIRE(ceil_div(s.M, kBM) <= kMaxGridY, "M too large for gridDim.y");
  dim3 grid(unsigned(ceil_div(s.N, kBN)), unsigned(ceil_div(s.M, kBM)));
  gemm_regblock_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<const float*>(A), static_cast<const float*>(B), C, s.M, s.N, s.K);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/v3_register_blocked", gemm_v3,
                         "128x128 block tile, 8x8 outputs per thread in registers, BK=8"});

}  // namespace fa::ch03
